package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// NVMe admin commands (NVM Express Base Specification 2.0; Format NVM's fields as in NVMe
// 1.4 5.23, NVM Command Set 2.0 for the upper LBA format bits): what a sanitize or a format
// with secure erase needs.
const (
	nvmeOpGetLogPage = 0x02
	nvmeOpIdentify   = 0x06
	nvmeOpFormat     = 0x80
	nvmeOpSanitize   = 0x84

	// Identify CNS values, and the broadcast NSID.
	nvmeCNSNamespace  = 0
	nvmeCNSController = 1
	nvmeNSIDAll       = 0xFFFFFFFF

	// Identify Controller: OACS bit 1 Format NVM; SANICAP, bit 0 crypto erase, bit 1 block
	// erase; FNA bit 1 secure erase applies to all namespaces, bit 2 crypto erase supported.
	nvmeOACSOffset    = 256
	nvmeOACSFormat    = 1 << 1
	nvmeSanicapOffset = 328
	nvmeSanicapCrypto = 1 << 0
	nvmeSanicapBlock  = 1 << 1
	nvmeFNAOffset     = 524
	nvmeFNAEraseAll   = 1 << 1
	nvmeFNACrypto     = 1 << 2

	// Identify Namespace: NSZE, NLBAF (zero-based), FLBAS (bits 3:0 and 6:5 the format index,
	// bit 4 extended LBAs), DPS (bits 2:0 PI type, bit 3 PI first in metadata).
	nvmeNSZEOffset  = 0
	nvmeNLBAFOffset = 25
	nvmeFLBASOffset = 26
	nvmeDPSOffset   = 29

	// Format NVM SES values (CDW10 bits 11:9).
	nvmeSESUserData = 1
	nvmeSESCrypto   = 2
	// nvmeFormatTimeoutMS bounds a Format, which the kernel's ioctl waits for: a user data
	// erase may overwrite the whole media.
	nvmeFormatTimeoutMS = 4 * 60 * 60 * 1000

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

// nvmeController is what Identify Controller says of sanitize and format.
type nvmeController struct {
	sanicap uint32
	oacs    uint16
	fna     byte
}

func nvmeIdentifyController(admin nvmeAdmin) (nvmeController, error) {
	buf := make([]byte, 4096)
	if err := admin(&nvmeCommand{Opcode: nvmeOpIdentify, CDW10: nvmeCNSController, DataLen: uint32(len(buf))}, buf); err != nil {
		return nvmeController{}, fmt.Errorf("identify controller: %w", err)
	}
	return nvmeController{
		sanicap: binary.LittleEndian.Uint32(buf[nvmeSanicapOffset:]),
		oacs:    binary.LittleEndian.Uint16(buf[nvmeOACSOffset:]),
		fna:     buf[nvmeFNAOffset],
	}, nil
}

// nvmeCapabilities adds to c what the controller behind admin erases, and keeps admin (and the
// namespace's NSID, from nsid, which a format needs) in d where it erases anything. Format is
// offered besides Sanitize, after it in the plan: a controller whose sanitize failed still gets
// an erase of its own before the kernel's methods.
func nvmeCapabilities(d *Device, c *Capabilities, admin nvmeAdmin, nsid func() (uint32, error)) {
	ctrl, err := nvmeIdentifyController(admin)
	if err != nil {
		return
	}
	c.NVMeCryptoErase, c.NVMeBlockErase = ctrl.sanicap&nvmeSanicapCrypto != 0, ctrl.sanicap&nvmeSanicapBlock != 0
	if ctrl.oacs&nvmeOACSFormat != 0 {
		if id, err := nsid(); err == nil && id != 0 && id != nvmeNSIDAll {
			c.NVMeFormatCryptoErase, c.NVMeFormatUserDataErase = ctrl.fna&nvmeFNACrypto != 0, true
			d.nsid = id
		}
	}
	if c.NVMeCryptoErase || c.NVMeBlockErase || c.NVMeFormatCryptoErase || c.NVMeFormatUserDataErase {
		d.admin = admin
	}
}

// nvmeLBAFormat is a namespace's current format, as Format NVM takes it back.
type nvmeLBAFormat struct {
	lbaf          uint32 // format index, 0-63
	mset, pi, pil uint32
}

// nvmeCurrentFormat reads the format in use out of Identify Namespace data.
func nvmeCurrentFormat(id []byte) (nvmeLBAFormat, error) {
	if binary.LittleEndian.Uint64(id[nvmeNSZEOffset:]) == 0 {
		return nvmeLBAFormat{}, errors.New("the namespace is not active (NSZE 0)")
	}
	flbas, dps := uint32(id[nvmeFLBASOffset]), uint32(id[nvmeDPSOffset])
	f := nvmeLBAFormat{lbaf: flbas&0xF | (flbas>>5&0x3)<<4, mset: flbas >> 4 & 1, pi: dps & 0x7, pil: dps >> 3 & 1}
	if f.lbaf > uint32(id[nvmeNLBAFOffset]) {
		return f, fmt.Errorf("the format in use (%d) is beyond the %d the namespace lists", f.lbaf, id[nvmeNLBAFOffset]+1)
	}
	if f.pi > 3 {
		return f, fmt.Errorf("protection information type %d is reserved", f.pi)
	}
	return f, nil
}

// cdw10 is Format NVM's CDW10 for f with secure erase ses: LBAF bits 3:0 and 13:12, MSET bit
// 4, PI bits 7:5, PIL bit 8, SES bits 11:9.
func (f nvmeLBAFormat) cdw10(ses uint32) uint32 {
	return f.lbaf&0xF | f.mset<<4 | f.pi<<5 | f.pil<<8 | ses<<9 | (f.lbaf>>4&0x3)<<12
}

// nvmeFormat formats namespace nsid in the format it has, with secure erase ses. The kernel's
// ioctl returns when the controller completes the format, so ctx cannot end it once sent.
func nvmeFormat(ctx context.Context, admin nvmeAdmin, nsid, ses uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	if err := admin(&nvmeCommand{Opcode: nvmeOpIdentify, NSID: nsid, CDW10: nvmeCNSNamespace, DataLen: uint32(len(buf))}, buf); err != nil {
		return fmt.Errorf("identify namespace %d: %w", nsid, err)
	}
	f, err := nvmeCurrentFormat(buf)
	if err != nil {
		return fmt.Errorf("identify namespace %d: %w", nsid, err)
	}
	cmd := &nvmeCommand{Opcode: nvmeOpFormat, NSID: nsid, CDW10: f.cdw10(ses), TimeoutMS: nvmeFormatTimeoutMS}
	if err := admin(cmd, nil); err != nil {
		return fmt.Errorf("format NVM of namespace %d, secure erase %d: %w", nsid, ses, err)
	}
	return nil
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
