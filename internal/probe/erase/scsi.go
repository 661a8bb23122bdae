package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"
)

// SCSI commands (SPC-4, SBC-4): what a SANITIZE needs.
const (
	scsiOpRequestSense  = 0x03
	scsiOpSanitize      = 0x48
	scsiOpMaintenanceIn = 0xA3
	scsiOpATAPassThru16 = 0x85

	// SANITIZE (SBC-4) byte 1: IMMED returns once the CDB is checked, AUSE lets a failed
	// sanitize be left by another one, bits 4:0 the service action.
	scsiSanitizeImmed  = 0x80
	scsiSanitizeAUSE   = 0x20
	scsiSanactBlock    = 0x02
	scsiSanactCrypto   = 0x03
	scsiSanactExitFail = 0x1F // EXIT FAILURE MODE: what AUSE allows after a failed sanitize
	scsiSanitizeCDBLen = 10

	// REPORT SUPPORTED OPERATION CODES (SPC-4 6.35): MAINTENANCE IN service action 0Ch;
	// reporting options 010b: one command, with the service action asked.
	scsiSARSOC          = 0x0C
	scsiRSOCOneWithSA   = 0x02
	scsiRSOCSupportMask = 0x07
	scsiRSOCStandard    = 0x03 // supported as the standard says
	scsiRSOCVendor      = 0x05 // supported in a vendor specific manner

	// requestSenseLen is REQUEST SENSE's allocation length: the most sense data SPC allows.
	requestSenseLen = 252
)

// Sense keys (SPC-4 4.5.6).
const (
	senseNoSense        = 0x0
	senseRecoveredError = 0x1
	senseNotReady       = 0x2
	senseMediumError    = 0x3
	senseIllegalRequest = 0x5
	senseUnitAttention  = 0x6
	senseAbortedCommand = 0xB
)

// Transfer directions of Linux's SG_IO (scsi/sg.h).
const (
	sgDxferNone    = -1
	sgDxferToDev   = -2
	sgDxferFromDev = -3
)

// scsiExec sends one CDB to the disk, data (nil, or the buffer dir says) in or out, allowing it
// timeout (0: sgTimeoutMS). A CHECK CONDITION is a *checkCondition error, its sense also
// returned; any other error is the transport's.
type scsiExec func(cdb []byte, dir int, data []byte, timeout time.Duration) (sense []byte, err error)

// sgIOHdr is Linux's struct sg_io_hdr (scsi/sg.h): 88 bytes on 64-bit, 64 on 32-bit. The
// pointers are unsafe.Pointer so that the buffers they point to stay alive through the ioctl.
type sgIOHdr struct {
	InterfaceID    int32 // 'S'
	DxferDirection int32
	CmdLen         uint8
	MxSbLen        uint8
	IovecCount     uint16
	DxferLen       uint32
	Dxferp         unsafe.Pointer
	Cmdp           unsafe.Pointer
	Sbp            unsafe.Pointer
	Timeout        uint32 // ms
	Flags          uint32
	PackID         int32
	UsrPtr         unsafe.Pointer
	Status         uint8
	MaskedStatus   uint8
	MsgStatus      uint8
	SbLenWr        uint8
	HostStatus     uint16
	DriverStatus   uint16
	Resid          int32
	Duration       uint32
	Info           uint32
}

// senseData is decoded sense data (SPC-4 4.5): fixed (70h/71h) or descriptor (72h/73h) format.
type senseData struct {
	key, asc, ascq byte
	// deferred: it reports an earlier command's error (71h, 73h).
	deferred   bool
	descriptor bool
	// Fixed format: the INFORMATION field (valid: its VALID bit) and the COMMAND-SPECIFIC
	// INFORMATION field, where SAT puts an ATA command's registers.
	infoValid   bool
	information [4]byte
	csi         [4]byte
	// ataStatus is the body of an ATA Status Return descriptor (09h), if one came.
	ataStatus []byte
}

// parseSense decodes sense data, or says why it cannot.
func parseSense(b []byte) (senseData, error) {
	if len(b) == 0 {
		return senseData{}, errors.New("no sense data")
	}
	var s senseData
	switch code := b[0] & 0x7F; code {
	case 0x70, 0x71:
		if len(b) < 8 {
			return s, fmt.Errorf("fixed-format sense data of %d bytes", len(b))
		}
		b = b[:min(len(b), 8+int(b[7]))]
		s.deferred = code == 0x71
		s.key = b[2] & 0x0F
		s.infoValid = b[0]&0x80 != 0
		copy(s.information[:], b[3:7])
		if len(b) >= 12 {
			copy(s.csi[:], b[8:12])
		}
		if len(b) >= 14 {
			s.asc, s.ascq = b[12], b[13]
		}
	case 0x72, 0x73:
		if len(b) < 8 {
			return s, fmt.Errorf("descriptor-format sense data of %d bytes", len(b))
		}
		b = b[:min(len(b), 8+int(b[7]))]
		s.descriptor, s.deferred = true, code == 0x73
		s.key, s.asc, s.ascq = b[1]&0x0F, b[2], b[3]
		for d := b[8:]; len(d) >= 2; {
			n := 2 + int(d[1])
			if n > len(d) {
				return s, fmt.Errorf("sense descriptor %02xh overruns the sense data", d[0])
			}
			if d[0] == 0x09 && n >= 14 {
				s.ataStatus = d[:n]
			}
			d = d[n:]
		}
	default:
		return s, fmt.Errorf("sense data of unknown response code %02xh", code)
	}
	return s, nil
}

var senseKeys = map[byte]string{
	senseNoSense: "NO SENSE", senseRecoveredError: "RECOVERED ERROR", senseNotReady: "NOT READY",
	senseMediumError: "MEDIUM ERROR", 0x4: "HARDWARE ERROR", senseIllegalRequest: "ILLEGAL REQUEST",
	senseUnitAttention: "UNIT ATTENTION", 0x7: "DATA PROTECT", senseAbortedCommand: "ABORTED COMMAND",
}

// ascNames are the additional sense codes a sanitize meets (SPC-4 Annex F).
var ascNames = map[[2]byte]string{
	{0x00, 0x1D}: "ATA PASS THROUGH INFORMATION AVAILABLE",
	{0x04, 0x1B}: "LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS",
	{0x20, 0x00}: "INVALID COMMAND OPERATION CODE",
	{0x24, 0x00}: "INVALID FIELD IN CDB",
	{0x31, 0x03}: "SANITIZE COMMAND FAILED",
}

func (s senseData) String() string {
	key := senseKeys[s.key]
	if key == "" {
		key = fmt.Sprintf("%Xh", s.key)
	}
	out := fmt.Sprintf("sense key %s, ASC/ASCQ %02Xh/%02Xh", key, s.asc, s.ascq)
	if name := ascNames[[2]byte{s.asc, s.ascq}]; name != "" {
		out += " (" + name + ")"
	}
	if s.deferred {
		out += ", deferred"
	}
	return out
}

// checkCondition is a command the device ended with CHECK CONDITION.
type checkCondition struct{ sense senseData }

func (c *checkCondition) Error() string { return "CHECK CONDITION, " + c.sense.String() }

// checkConditionError is the error for a CHECK CONDITION with sense data b.
func checkConditionError(b []byte) error {
	s, err := parseSense(b)
	if err != nil {
		return fmt.Errorf("CHECK CONDITION with unreadable sense data (% x): %w", b, err)
	}
	return &checkCondition{s}
}

// scsiSanitizeCDB is SANITIZE with IMMED and AUSE, no parameter list (block and crypto erase
// take none); EXIT FAILURE MODE is sent plain, and returns once done.
func scsiSanitizeCDB(action byte) []byte {
	cdb := make([]byte, scsiSanitizeCDBLen)
	cdb[0], cdb[1] = scsiOpSanitize, scsiSanitizeImmed|scsiSanitizeAUSE|action
	if action == scsiSanactExitFail {
		cdb[1] = action
	}
	return cdb
}

// rsocCDB asks whether SANITIZE with that service action is supported, allocating n bytes.
func rsocCDB(action byte, n int) []byte {
	cdb := make([]byte, 12)
	cdb[0], cdb[1], cdb[2], cdb[3] = scsiOpMaintenanceIn, scsiSARSOC, scsiRSOCOneWithSA, scsiOpSanitize
	binary.BigEndian.PutUint16(cdb[4:], uint16(action))
	binary.BigEndian.PutUint32(cdb[6:], uint32(n))
	return cdb
}

// requestSenseCDB asks for fixed-format sense data (DESC 0); a device may answer either.
func requestSenseCDB() []byte { return []byte{scsiOpRequestSense, 0, 0, 0, requestSenseLen, 0} }

// scsiSanitizeSupported says whether the device server supports SANITIZE with action, by REPORT
// SUPPORTED OPERATION CODES; a device that does not know that command supports nothing.
func scsiSanitizeSupported(exec scsiExec, action byte) bool {
	buf := make([]byte, 32)
	if _, err := exec(rsocCDB(action, len(buf)), sgDxferFromDev, buf, 0); err != nil {
		return false
	}
	// One-command parameter data (SPC-4 6.35): byte 1 SUPPORT, bytes 2-3 CDB SIZE, then
	// the CDB usage data, opcode first. Checking the last two catches a device that ignored the
	// reporting options and answered the all-commands format.
	if binary.BigEndian.Uint16(buf[2:]) != scsiSanitizeCDBLen || buf[4] != scsiOpSanitize {
		return false
	}
	support := buf[1] & scsiRSOCSupportMask
	return support == scsiRSOCStandard || support == scsiRSOCVendor
}

// scsiSanitizePoll is how often a SCSI or ATA sanitize in progress is looked at.
var scsiSanitizePoll = 2 * time.Second

// scsiSanitize starts a SANITIZE of the whole logical unit and waits until REQUEST SENSE says it
// is over, or ctx ends. The device goes on with a sanitize it started whatever happens to the
// agent, and refuses media access until it is done.
func scsiSanitize(ctx context.Context, exec scsiExec, action byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := exec(scsiSanitizeCDB(action), sgDxferNone, nil, 0); err != nil {
		return fmt.Errorf("SANITIZE: %w", err)
	}
	for {
		buf := make([]byte, requestSenseLen)
		if _, err := exec(requestSenseCDB(), sgDxferFromDev, buf, 0); err != nil {
			return fmt.Errorf("REQUEST SENSE: %w", err)
		}
		s, err := parseSense(buf)
		if err != nil {
			return fmt.Errorf("REQUEST SENSE: %w", err)
		}
		switch {
		case s.asc == 0x04 && s.ascq == 0x1B && !s.deferred:
			// SANITIZE IN PROGRESS.
		case s.key == senseUnitAttention:
			// Reported once and so cleared: the next REQUEST SENSE tells the sanitize's state.
		case s.key == senseNoSense && !s.deferred:
			return nil
		case s.asc == 0x31 && s.ascq == 0x03:
			// SANITIZE COMMAND FAILED: the device refuses media access until the failure mode is
			// left, which AUSE allows; the next method needs it left.
			err := fmt.Errorf("sanitize: the device reports %s", s)
			if _, xerr := exec(scsiSanitizeCDB(scsiSanactExitFail), sgDxferNone, nil, 0); xerr != nil {
				err = fmt.Errorf("%w; leaving failure mode: %v", err, xerr)
			}
			return err
		default:
			return fmt.Errorf("sanitize: the device reports %s", s)
		}
		if err := sleepCtx(ctx, scsiSanitizePoll); err != nil {
			return err
		}
	}
}

// sleepCtx waits for d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// sgTarget says whether the block device whose sysfs directory is sysDev (/sys/dev/block/M:m)
// may be sent SCSI commands, and its INQUIRY vendor: only whole sd disks (a SANITIZE through a
// partition erases its whole disk) that are not on USB (many USB bridges hang on commands they
// do not know, which is why the kernel's usb-storage never sends REPORT SUPPORTED OPERATION
// CODES).
func sgTarget(sysDev string) (vendor string, ok bool) {
	dir, err := filepath.EvalSymlinks(sysDev)
	if err != nil || !strings.HasPrefix(filepath.Base(dir), "sd") || strings.Contains(dir, "/usb") {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); !errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	b, err := os.ReadFile(filepath.Join(dir, "device", "vendor"))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// sgCapabilities adds to c the sanitize of the sd disk whose sysfs directory is sysDev, asked
// through exec: ATA SANITIZE for a SATA disk (its vendor is "ATA", libata's and SAS HBAs'
// translation layers alike), or its security erase where it has no SANITIZE (setting a
// password is a risk not worth taking where SANITIZE does better); SCSI SANITIZE for any other.
func sgCapabilities(d *Device, c *Capabilities, sysDev string, exec scsiExec) {
	vendor, ok := sgTarget(sysDev)
	if !ok {
		return
	}
	if vendor == "ATA" {
		id, err := ataIdentify(exec)
		if err != nil {
			return
		}
		c.ATACryptoScramble, c.ATABlockErase = ataSanitizeCaps(id)
		if !c.ATACryptoScramble && !c.ATABlockErase {
			c.ATASecurityEraseEnhanced, c.ATASecurityErase = ataSecurityCaps(id)
		}
		if c.ATACryptoScramble || c.ATABlockErase || c.ATASecurityEraseEnhanced || c.ATASecurityErase {
			d.scsi, d.sat = exec, true
		}
		return
	}
	c.SCSICryptoErase = scsiSanitizeSupported(exec, scsiSanactCrypto)
	c.SCSIBlockErase = scsiSanitizeSupported(exec, scsiSanactBlock)
	if c.SCSICryptoErase || c.SCSIBlockErase {
		d.scsi = exec
	}
}
