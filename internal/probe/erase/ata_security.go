package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ATASecurityPassword is the user password an ATA security erase sets for SECURITY ERASE UNIT
// to carry (the drive erases only for the password set) and the drive drops once erased. It is fixed and published so that a
// drive an interrupted erase left locked (power lost mid-erase) is unlocked by the next cleaning,
// or by hand: hdparm --user-master u --security-unlock metalhub-erase /dev/sdX (hdparm puts the
// password's bytes where this package does, bytes 2-33 of the data, unswapped).
const ATASecurityPassword = "metalhub-erase"

// Security feature set commands (ACS-3, ACS-4 keeps them; 28-bit, no LBA).
const (
	ataCmdSecuritySetPassword     = 0xF1
	ataCmdSecurityUnlock          = 0xF2
	ataCmdSecurityErasePrepare    = 0xF3
	ataCmdSecurityEraseUnit       = 0xF4
	ataCmdSecurityDisablePassword = 0xF6

	// IDENTIFY DEVICE word 128, security status (ACS-3).
	ataIDSecurityWord        = 128
	ataSecSupported          = 1 << 0
	ataSecEnabled            = 1 << 1
	ataSecLocked             = 1 << 2
	ataSecFrozen             = 1 << 3
	ataSecCountExpired       = 1 << 4
	ataSecEnhancedSupported  = 1 << 5
	ataIDEraseTimeWord       = 89 // normal erase time, in 2 minutes
	ataIDEnhancedEraseWord   = 90 // enhanced erase time, in 2 minutes
	ataEraseTimeExtended     = 1 << 15
	ataSecurityEnhancedErase = 1 << 1 // SECURITY ERASE UNIT data word 0 bit 1

	// ataSecurityTimeout bounds the security commands other than SECURITY ERASE UNIT.
	ataSecurityTimeout = 15 * time.Second
	// ataEraseMargin is added to twice the time the drive gives for its erase.
	ataEraseMargin = 30 * time.Minute
	// ataEraseBytesPerSecond estimates an erase whose time the drive does not give, as
	// hdparm does (30 MB a second).
	ataEraseBytesPerSecond = 30 << 20
)

// errATAPasswordRefused is a drive whose security was enabled refusing ATASecurityPassword.
var errATAPasswordRefused = fmt.Errorf("the drive refused the password %q", ATASecurityPassword)

func ataWord(id []byte, w int) uint16 { return binary.LittleEndian.Uint16(id[2*w:]) }

// ataSecurityCaps reads from IDENTIFY DEVICE data which security erases the drive can be asked
// for: none where security is frozen, which most BIOSes do at boot and only a suspend/resume
// cycle (or a power cycle without the BIOS) undoes, which the agent does not do.
func ataSecurityCaps(id []byte) (enhanced, normal bool) {
	w := ataWord(id, ataIDSecurityWord)
	if w&ataSecSupported == 0 || w&ataSecFrozen != 0 {
		return false, false
	}
	return w&ataSecEnhancedSupported != 0, true
}

// ataEraseTimeout is how long SECURITY ERASE UNIT may take: twice what word 89 or 90 gives (bit
// 15 set: bits 14:0, else bits 7:0, in 2 minutes, ACS-3), plus a margin; where the drive gives
// no time (0) or only "more than" (all ones), at least size at hdparm's 30 MB a second.
func ataEraseTimeout(id []byte, enhanced bool, size int64) time.Duration {
	w := ataWord(id, ataIDEraseTimeWord)
	if enhanced {
		w = ataWord(id, ataIDEnhancedEraseWord)
	}
	units, most := w&0xFF, uint16(0xFF)
	if w&ataEraseTimeExtended != 0 {
		units, most = w&0x7FFF, 0x7FFF
	}
	t := 2*time.Duration(units)*2*time.Minute + ataEraseMargin
	if units == 0 || units == most {
		t = max(t, time.Duration(size/ataEraseBytesPerSecond)*time.Second+ataEraseMargin)
	}
	return t
}

// ataSecurityCommand is one of the security commands carrying a password: PIO Data-Out of one
// 512-byte block, word 0 control bits, words 1-16 the password (ACS-3 Tables for F1h, F2h, F4h,
// F6h). Word 0 bit 0 is clear (the user password), bit 8 too (SET PASSWORD: capability high,
// so a master password could still unlock a drive this left locked).
func ataSecurityCommand(command byte, control uint16) (ataCommand, []byte) {
	data := make([]byte, 512)
	binary.LittleEndian.PutUint16(data, control)
	copy(data[2:34], ATASecurityPassword)
	c := ataCommand{protocol: satPIODataOut, blocks: true, tLength: 2, count: 1, command: command, timeout: ataSecurityTimeout}
	return c, data
}

// ataErasePrepareCommand is SECURITY ERASE PREPARE, non-data; ERASE UNIT must follow it at once.
func ataErasePrepareCommand() ataCommand {
	return ataCommand{protocol: satNonData, command: ataCmdSecurityErasePrepare, timeout: ataSecurityTimeout}
}

func ataSecuritySend(exec scsiExec, c ataCommand, data []byte) error {
	_, err := ataRun(exec, c, sgDxferToDev, data)
	return err
}

// ataSecurityState reads IDENTIFY DEVICE word 128 afresh.
func ataSecurityState(exec scsiExec) (uint16, []byte, error) {
	id, err := ataIdentify(exec)
	if err != nil {
		return 0, nil, err
	}
	return ataWord(id, ataIDSecurityWord), id, nil
}

// ataSecurityRecover brings a drive whose security is enabled back to disabled with
// ATASecurityPassword: unlock where locked, then disable. A password other than that one is
// refused, which spends one of the drive's few attempts (5 per power cycle, ACS-3), once.
func ataSecurityRecover(exec scsiExec, sec uint16) error {
	if sec&ataSecEnabled == 0 {
		return nil
	}
	if sec&ataSecCountExpired != 0 {
		return errors.New("security is enabled and the drive's password attempt counter expired: power-cycle it, then clean again")
	}
	refused := func(what string, err error) error {
		return fmt.Errorf("%w (%s: %v): its security was enabled with another password; "+
			"unlock and disable it with that password (or erase it with the master password), then clean again",
			errATAPasswordRefused, what, err)
	}
	if sec&ataSecLocked != 0 {
		c, data := ataSecurityCommand(ataCmdSecurityUnlock, 0)
		if err := ataSecuritySend(exec, c, data); err != nil {
			return refused("SECURITY UNLOCK", err)
		}
	}
	c, data := ataSecurityCommand(ataCmdSecurityDisablePassword, 0)
	if err := ataSecuritySend(exec, c, data); err != nil {
		return refused("SECURITY DISABLE PASSWORD", err)
	}
	return nil
}

// ataUnlock unlocks a drive locked with ATASecurityPassword (and disables its security), so
// that it can be read before its erase; a drive not locked is left as it is.
func ataUnlock(exec scsiExec) error {
	sec, _, err := ataSecurityState(exec)
	if err != nil || sec&ataSecLocked == 0 || sec&ataSecFrozen != 0 {
		return err
	}
	return ataSecurityRecover(exec, sec)
}

// ataSecurityErase erases the whole drive by SECURITY ERASE UNIT, enhanced or not: security
// enabled with ATASecurityPassword (after bringing back to disabled one an earlier erase left
// enabled), ERASE PREPARE, ERASE UNIT, which the drive takes as long as it needs over (ctx cannot
// end it once sent), then IDENTIFY must show security disabled, as ACS says a successful erase
// leaves it. Where anything fails after the password was set, it is disabled again.
func ataSecurityErase(ctx context.Context, exec scsiExec, enhanced bool, size int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	sec, id, err := ataSecurityState(exec)
	if err != nil {
		return err
	}
	switch {
	case sec&ataSecSupported == 0, enhanced && sec&ataSecEnhancedSupported == 0:
		return fmt.Errorf("security erase (word 128 %#04x): %w", sec, ErrUnsupported)
	case sec&ataSecFrozen != 0:
		return errors.New("security is frozen (by the BIOS at boot, most likely; a suspend/resume cycle unfreezes it, which the agent does not do)")
	}
	if err := ataSecurityRecover(exec, sec); err != nil {
		return err
	}
	c, data := ataSecurityCommand(ataCmdSecuritySetPassword, 0)
	if err := ataSecuritySend(exec, c, data); err != nil {
		return fmt.Errorf("SECURITY SET PASSWORD: %w", err)
	}
	undo := func(err error) error {
		c, data := ataSecurityCommand(ataCmdSecurityDisablePassword, 0)
		if derr := ataSecuritySend(exec, c, data); derr != nil {
			return fmt.Errorf("%w; security is left enabled with the password %q (disabling it: %v)", err, ATASecurityPassword, derr)
		}
		return err
	}
	if _, err := ataRun(exec, ataErasePrepareCommand(), sgDxferNone, nil); err != nil {
		return undo(fmt.Errorf("SECURITY ERASE PREPARE: %w", err))
	}
	control := uint16(0)
	if enhanced {
		control = ataSecurityEnhancedErase
	}
	c, data = ataSecurityCommand(ataCmdSecurityEraseUnit, control)
	c.timeout = ataEraseTimeout(id, enhanced, size)
	if err := ataSecuritySend(exec, c, data); err != nil {
		return undo(fmt.Errorf("SECURITY ERASE UNIT: %w", err))
	}
	sec, _, err = ataSecurityState(exec)
	if err != nil {
		return fmt.Errorf("after SECURITY ERASE UNIT: %w", err)
	}
	if sec&ataSecEnabled != 0 {
		// ACS has a completed erase disable security: a drive that did not is not trusted to
		// have erased either.
		return undo(fmt.Errorf("security still enabled after SECURITY ERASE UNIT (word 128 %#04x)", sec))
	}
	return nil
}
