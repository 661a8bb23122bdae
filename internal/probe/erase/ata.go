package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ATA commands (ACS-3; ACS-4 keeps them), sent through SAT's ATA PASS-THROUGH.
const (
	ataCmdIdentify = 0xEC
	ataCmdSanitize = 0xB4 // SANITIZE DEVICE: the FEATURE field says which

	// SANITIZE DEVICE features (ACS-3, Sanitize Device feature set) and the signatures their
	// LBA field must carry, which keep a stray command from erasing a drive.
	ataSanitizeStatusExt = 0x0000
	ataCryptoScrambleExt = 0x0011
	ataBlockEraseExt     = 0x0012
	ataCryptoScrambleKey = 0x43727970 // "Cryp"
	ataBlockEraseKey     = 0x426B4572 // "BkEr"
	ataSanitizeFailMode  = 1 << 4     // COUNT bit 4 FAILURE MODE: a failed sanitize may be left (SCSI's AUSE)
	ataSstatDone         = 1 << 15    // SANITIZE STATUS EXT COUNT: SANITIZE OPERATION COMPLETED WITHOUT ERROR
	ataSstatInProgress   = 1 << 14    // SANITIZE STATUS EXT COUNT: SANITIZE IN PROGRESS
	ataClearSanitizeFail = 1 << 0     // SANITIZE STATUS EXT COUNT bit 0: CLEAR SANITIZE OPERATION FAILED
	ataReasonFailed      = 1          // error reason: the last sanitize completed unsuccessfully

	// IDENTIFY DEVICE data word 59 (ACS-3, ACS-4): bit 12 the SANITIZE feature set, bit 13
	// CRYPTO SCRAMBLE EXT, bit 14 OVERWRITE EXT, bit 15 BLOCK ERASE EXT.
	ataIDSanitizeWord   = 59
	ataIDSanitize       = 1 << 12
	ataIDCryptoScramble = 1 << 13
	ataIDBlockErase     = 1 << 15

	ataStatusERR = 0x01 // STATUS bit 0
	ataErrorABRT = 0x04 // ERROR bit 2

	// SAT-4 ATA PASS-THROUGH PROTOCOL field values (hdparm's and libata's are the same).
	satNonData    = 3
	satPIODataIn  = 4
	satPIODataOut = 5
)

// ataCommand is one ATA command for ATA PASS-THROUGH (16).
type ataCommand struct {
	protocol byte // SAT PROTOCOL
	extend   bool // a 48-bit command: the (15:8) and (47:24) bytes count
	ckCond   bool // return the ATA registers in sense data even when the command succeeds
	fromDev  bool // T_DIR
	blocks   bool // BYT_BLOK: T_LENGTH counts 512-byte blocks
	tLength  byte // T_LENGTH: where the transfer length is (2: the COUNT field)
	feature  uint16
	count    uint16
	lba      uint64 // 48 bits
	device   byte
	command  byte
	// timeout: how long the command may take (0: the transport's default); not in the CDB.
	timeout time.Duration
}

// cdb lays c out as ATA PASS-THROUGH (16) (SAT-4): byte 1 MULTIPLE_COUNT (0),
// PROTOCOL and EXTEND; byte 2 OFF_LINE (0), CK_COND, T_TYPE (0), T_DIR, BYT_BLOK, T_LENGTH; then
// each register's high byte before its low one, the LBA as (31:24) (7:0) (39:32) (15:8) (47:40)
// (23:16).
func (c ataCommand) cdb() []byte {
	b := make([]byte, 16)
	b[0] = scsiOpATAPassThru16
	b[1] = c.protocol << 1
	if c.extend {
		b[1] |= 0x01
	}
	b[2] = c.tLength & 0x03
	if c.ckCond {
		b[2] |= 0x20
	}
	if c.fromDev {
		b[2] |= 0x08
	}
	if c.blocks {
		b[2] |= 0x04
	}
	b[3], b[4] = byte(c.feature>>8), byte(c.feature)
	b[5], b[6] = byte(c.count>>8), byte(c.count)
	b[7], b[8] = byte(c.lba>>24), byte(c.lba)
	b[9], b[10] = byte(c.lba>>32), byte(c.lba>>8)
	b[11], b[12] = byte(c.lba>>40), byte(c.lba>>16)
	b[13], b[14] = c.device, c.command
	return b
}

// ataRegisters are the ATA registers a command ended with, as the SATL returned them.
type ataRegisters struct {
	err, status, device byte
	count               uint16
	lba                 uint64
	// partial: from fixed-format sense data (SAT-5 12.2.2.8), which gives COUNT(7:0) and
	// LBA(23:0) only, and of the rest whether it is zero.
	partial                          bool
	countHighNonZero, lbaHighNonZero bool
}

// ataRegistersFrom reads the registers out of sense data: an ATA Status Return descriptor
// (09h), or the INFORMATION and COMMAND-SPECIFIC INFORMATION fields of fixed-format
// sense data; nil where neither holds them.
func ataRegistersFrom(s senseData) *ataRegisters {
	if d := s.ataStatus; d != nil {
		r := &ataRegisters{
			err:    d[3],
			count:  uint16(d[4])<<8 | uint16(d[5]),
			lba:    uint64(d[10])<<40 | uint64(d[8])<<32 | uint64(d[6])<<24 | uint64(d[11])<<16 | uint64(d[9])<<8 | uint64(d[7]),
			device: d[12],
			status: d[13],
		}
		if d[2]&0x01 == 0 { // EXTEND clear: the high bytes mean nothing
			r.count &= 0xFF
			r.lba &= 0xFFFFFF
		}
		r.countHighNonZero, r.lbaHighNonZero = r.count>>8 != 0, r.lba>>24 != 0
		return r
	}
	if s.descriptor || !s.infoValid {
		// Linux before 6.11 (and stable kernels without that fix) wrote fixed-format ATA
		// registers at other offsets, VALID clear: not to be read.
		return nil
	}
	extend := s.csi[0]&0x80 != 0
	return &ataRegisters{
		err:              s.information[0],
		status:           s.information[1],
		device:           s.information[2],
		count:            uint16(s.information[3]),
		lba:              uint64(s.csi[3])<<16 | uint64(s.csi[2])<<8 | uint64(s.csi[1]),
		partial:          true,
		countHighNonZero: extend && s.csi[0]&0x40 != 0,
		lbaHighNonZero:   extend && s.csi[0]&0x20 != 0,
	}
}

// ataSanitizeReasons are SANITIZE DEVICE's error reasons, in LBA(7:0) of its error outputs.
var ataSanitizeReasons = map[byte]string{
	0: "reason not reported", 1: "the last sanitize completed unsuccessfully", 2: "unsupported sanitize command",
	3: "the device is sanitize frozen", 4: "SANITIZE FREEZE LOCK refused: antifreeze lock set",
}

// ataError is an ATA command that ended with an error, or whose SATL refused it; the reason
// in LBA(7:0) is read only for SANITIZE DEVICE, where it means one.
func ataError(err error, command byte) error {
	var cc *checkCondition
	if !errors.As(err, &cc) {
		return err
	}
	r := ataRegistersFrom(cc.sense)
	if r == nil || r.status&ataStatusERR == 0 {
		return err
	}
	msg := fmt.Sprintf("ATA status %#02x, error %#02x", r.status, r.err)
	if reason, ok := ataAbortReason(err); ok {
		msg += ", aborted"
		if why, ok := ataSanitizeReasons[reason]; ok && command == ataCmdSanitize {
			msg += " (" + why + ")"
		}
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// ataAbortReason is the sanitize error reason of an ATA command the drive aborted.
func ataAbortReason(err error) (byte, bool) {
	var cc *checkCondition
	if !errors.As(err, &cc) {
		return 0, false
	}
	r := ataRegistersFrom(cc.sense)
	if r == nil || r.status&ataStatusERR == 0 || r.err&ataErrorABRT == 0 {
		return 0, false
	}
	return byte(r.lba), true
}

// ataRun sends c and returns the registers it ended with (nil where the SATL returned none,
// as it need not without CK_COND).
func ataRun(exec scsiExec, c ataCommand, dir int, data []byte) (*ataRegisters, error) {
	_, err := exec(c.cdb(), dir, data, c.timeout)
	if err == nil {
		return nil, nil
	}
	var cc *checkCondition
	if errors.As(err, &cc) && cc.sense.key == senseRecoveredError && cc.sense.asc == 0x00 && cc.sense.ascq == 0x1D {
		// ATA PASS THROUGH INFORMATION AVAILABLE: CK_COND's answer to a command that worked.
		r := ataRegistersFrom(cc.sense)
		if r != nil && r.status&ataStatusERR != 0 {
			return nil, ataError(err, c.command)
		}
		return r, nil
	}
	return nil, ataError(err, c.command)
}

// ataIdentify reads the drive's IDENTIFY DEVICE data (PIO Data-In, one 512-byte block).
func ataIdentify(exec scsiExec) ([]byte, error) {
	buf := make([]byte, 512)
	c := ataCommand{protocol: satPIODataIn, fromDev: true, blocks: true, tLength: 2, count: 1, command: ataCmdIdentify}
	if _, err := ataRun(exec, c, sgDxferFromDev, buf); err != nil {
		return nil, fmt.Errorf("IDENTIFY DEVICE: %w", err)
	}
	if buf[1]&0x80 != 0 {
		return nil, errors.New("IDENTIFY DEVICE: not an ATA device (word 0 bit 15)")
	}
	// Word 255: A5h then a checksum making the 512 bytes sum to zero, where the drive sets it.
	if buf[510] == 0xA5 {
		var sum byte
		for _, b := range buf {
			sum += b
		}
		if sum != 0 {
			return nil, errors.New("IDENTIFY DEVICE: bad checksum")
		}
	}
	return buf, nil
}

// ataSanitizeCaps reads from IDENTIFY DEVICE data which sanitize commands the drive supports.
func ataSanitizeCaps(id []byte) (cryptoScramble, blockErase bool) {
	w := binary.LittleEndian.Uint16(id[2*ataIDSanitizeWord:])
	if w&ataIDSanitize == 0 {
		return false, false
	}
	return w&ataIDCryptoScramble != 0, w&ataIDBlockErase != 0
}

// ataSanitizeCommand is CRYPTO SCRAMBLE EXT or BLOCK ERASE EXT with FAILURE MODE set.
func ataSanitizeCommand(feature uint16) (ataCommand, error) {
	c := ataCommand{protocol: satNonData, extend: true, feature: feature, count: ataSanitizeFailMode, command: ataCmdSanitize}
	switch feature {
	case ataCryptoScrambleExt:
		c.lba = ataCryptoScrambleKey
	case ataBlockEraseExt:
		c.lba = ataBlockEraseKey
	default:
		return c, fmt.Errorf("sanitize feature %#04x: %w", feature, ErrUnsupported)
	}
	return c, nil
}

// ataSanitizeStatusCommand is SANITIZE STATUS EXT, CK_COND set: its answer is in the registers.
func ataSanitizeStatusCommand() ataCommand {
	return ataCommand{protocol: satNonData, extend: true, ckCond: true, feature: ataSanitizeStatusExt, command: ataCmdSanitize}
}

// ataSanitizeInProgress asks the drive whether its sanitize is still running; an error says it
// failed, or that the answer could not be had.
func ataSanitizeInProgress(exec scsiExec) (bool, error) {
	r, err := ataRun(exec, ataSanitizeStatusCommand(), sgDxferNone, nil)
	if err != nil {
		// The drive aborts SANITIZE STATUS EXT when its last sanitize failed (reason 1).
		return false, fmt.Errorf("SANITIZE STATUS EXT: %w", err)
	}
	if r == nil {
		return false, errors.New("SANITIZE STATUS EXT: the SATL returned no ATA registers")
	}
	if r.partial && r.countHighNonZero {
		// Fixed-format sense data hides COUNT(15:8), where the answer is.
		return false, errors.New("SANITIZE STATUS EXT: the SATL returned fixed-format sense data, which hides the sanitize state")
	}
	switch {
	case r.count&ataSstatInProgress != 0:
		return true, nil
	case r.count&ataSstatDone != 0:
		return false, nil
	}
	return false, fmt.Errorf("SANITIZE STATUS EXT: no sanitize in progress nor completed without error (COUNT %#04x)", r.count)
}

// ataSanitize starts a sanitize of the whole drive and waits until SANITIZE STATUS EXT says it
// is over, or ctx ends. As with NVMe and SCSI, the drive goes on with it whatever happens to the
// agent.
func ataSanitize(ctx context.Context, exec scsiExec, feature uint16) error {
	c, err := ataSanitizeCommand(feature)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := ataRun(exec, c, sgDxferNone, nil); err != nil {
		return fmt.Errorf("SANITIZE DEVICE %#04x: %w", feature, err)
	}
	for {
		running, err := ataSanitizeInProgress(exec)
		if reason, ok := ataAbortReason(err); ok && reason == ataReasonFailed {
			// The drive refuses media access until the failure is cleared, which FAILURE MODE
			// allows; the next method needs it cleared.
			c := ataSanitizeStatusCommand()
			c.count = ataClearSanitizeFail
			if _, xerr := ataRun(exec, c, sgDxferNone, nil); xerr != nil {
				err = fmt.Errorf("%w; clearing the failure: %v", err, xerr)
			}
		}
		if err != nil || !running {
			return err
		}
		if err := sleepCtx(ctx, scsiSanitizePoll); err != nil {
			return err
		}
	}
}
