package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// NVMe admin commands (NVM Express Base Specification 2.0): what a sanitize needs.
const (
	nvmeOpGetLogPage = 0x02
	nvmeOpIdentify   = 0x06
	nvmeOpSanitize   = 0x84

	// Identify Controller: SANICAP, bit 0 crypto erase, bit 1 block erase.
	nvmeSanicapOffset = 328
	nvmeSanicapCrypto = 1 << 0
	nvmeSanicapBlock  = 1 << 1

	// Sanitize actions (CDW10 SANACT) and AUSE: a failed sanitize may be left by another one,
	// or by Exit Failure Mode, after which the namespaces take I/O again.
	nvmeSanactExitFailure = 1
	nvmeSanactBlock       = 2
	nvmeSanactCrypto      = 4
	nvmeAUSE              = 1 << 3

	// The Sanitize Status log page: SSTAT bits 2:0.
	nvmeLogSanitize       = 0x81
	nvmeSanitizeLogBytes  = 512
	nvmeSstatNever        = 0
	nvmeSstatDone         = 1
	nvmeSstatInProgress   = 2
	nvmeSstatFailed       = 3
	nvmeSstatDoneNoDealoc = 4
)

// nvmeNamespace reports whether a kernel device name is a whole NVMe namespace (nvme0n1, not
// nvme0n1p1 or the controller's char device nvme0).
func nvmeNamespace(name string) bool {
	rest, ok := strings.CutPrefix(name, "nvme")
	c, n, ok2 := strings.Cut(rest, "n")
	return ok && ok2 && digits(c) && digits(n)
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// nvmeCommand is Linux's struct nvme_admin_cmd (linux/nvme_ioctl.h), 72 bytes.
type nvmeCommand struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	CDW2, CDW3  uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	CDW10       uint32
	CDW11       uint32
	CDW12       uint32
	CDW13       uint32
	CDW14       uint32
	CDW15       uint32
	TimeoutMS   uint32
	Result      uint32
}

// nvmeAdmin sends one admin command, data (nil or the command's buffer) in or out.
type nvmeAdmin func(cmd *nvmeCommand, data []byte) error

// nvmeSanicap reads which sanitize actions the controller supports (0: none, or not NVMe).
func nvmeSanicap(admin nvmeAdmin) (uint32, error) {
	buf := make([]byte, 4096)
	if err := admin(&nvmeCommand{Opcode: nvmeOpIdentify, CDW10: 1, DataLen: uint32(len(buf))}, buf); err != nil {
		return 0, fmt.Errorf("identify controller: %w", err)
	}
	return binary.LittleEndian.Uint32(buf[nvmeSanicapOffset:]), nil
}

// nvmeSanitizeStatus reads SSTAT's status and SPROG (progress in 1/65536).
func nvmeSanitizeStatus(admin nvmeAdmin) (status int, progress uint16, err error) {
	buf := make([]byte, nvmeSanitizeLogBytes)
	numd := uint32(len(buf)/4 - 1)
	cmd := &nvmeCommand{Opcode: nvmeOpGetLogPage, NSID: 0xFFFFFFFF, CDW10: numd<<16 | nvmeLogSanitize, DataLen: uint32(len(buf))}
	if err := admin(cmd, buf); err != nil {
		return 0, 0, fmt.Errorf("sanitize status log: %w", err)
	}
	return int(binary.LittleEndian.Uint16(buf[2:]) & 0x7), binary.LittleEndian.Uint16(buf[0:]), nil
}

// nvmeSanitizePoll is how often a sanitize in progress is looked at.
var nvmeSanitizePoll = 2 * time.Second

// nvmeSanitize starts a sanitize of the whole controller (every namespace on it) and waits
// until the controller reports it done, or failed, or ctx ends. The drive goes on with a
// sanitize it started whatever happens to the agent, and refuses I/O until it is done.
func nvmeSanitize(ctx context.Context, admin nvmeAdmin, action uint32) error {
	if err := admin(&nvmeCommand{Opcode: nvmeOpSanitize, CDW10: action | nvmeAUSE}, nil); err != nil {
		return fmt.Errorf("sanitize: %w", err)
	}
	for {
		st, _, err := nvmeSanitizeStatus(admin)
		if err != nil {
			return err
		}
		switch st {
		case nvmeSstatDone, nvmeSstatDoneNoDealoc:
			return nil
		case nvmeSstatFailed:
			// With AUSE the controller may leave failure mode; until it does it refuses all
			// media access, so the plan's next method could not write.
			if err := admin(&nvmeCommand{Opcode: nvmeOpSanitize, CDW10: nvmeSanactExitFailure}, nil); err != nil {
				return fmt.Errorf("sanitize: the controller reports it failed, and leaving failure mode failed: %w", err)
			}
			return errors.New("sanitize: the controller reports it failed")
		case nvmeSstatNever:
			return errors.New("sanitize: the controller reports none was ever run")
		}
		t := time.NewTimer(nvmeSanitizePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
