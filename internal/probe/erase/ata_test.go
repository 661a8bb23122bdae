package erase

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestATAPassThroughCDBs(t *testing.T) {
	crypto, err := ataSanitizeCommand(ataCryptoScrambleExt)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ataSanitizeCommand(ataBlockEraseExt)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		got  []byte
		want []byte
	}{
		// PIO Data-In (4<<1), T_DIR|BYT_BLOK|T_LENGTH=COUNT (0x0E), COUNT 1, command ECh.
		{"IDENTIFY DEVICE", ataCommand{protocol: satPIODataIn, fromDev: true, blocks: true, tLength: 2, count: 1, command: ataCmdIdentify}.cdb(),
			[]byte{0x85, 0x08, 0x0E, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xEC, 0}},
		// Non-data (3<<1) 48-bit, FEATURE 0011h, COUNT 0010h (FAILURE MODE), LBA "Cryp" as
		// (31:24) (7:0) (39:32) (15:8) (47:40) (23:16).
		{"CRYPTO SCRAMBLE EXT", crypto.cdb(), []byte{0x85, 0x07, 0x00, 0x00, 0x11, 0x00, 0x10, 0x43, 0x70, 0, 0x79, 0, 0x72, 0, 0xB4, 0}},
		{"BLOCK ERASE EXT", block.cdb(), []byte{0x85, 0x07, 0x00, 0x00, 0x12, 0x00, 0x10, 0x42, 0x72, 0, 0x45, 0, 0x6B, 0, 0xB4, 0}},
		{"SANITIZE STATUS EXT, CK_COND", ataSanitizeStatusCommand().cdb(), []byte{0x85, 0x07, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xB4, 0}},
		{"every LBA byte in its place", ataCommand{lba: 0x0605_0403_0201, feature: 0x0A0B, count: 0x0C0D}.cdb(),
			[]byte{0x85, 0, 0, 0x0A, 0x0B, 0x0C, 0x0D, 0x04, 0x01, 0x05, 0x02, 0x06, 0x03, 0, 0, 0}},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, tc.got, tc.want)
		}
	}
	if _, err := ataSanitizeCommand(0x0014); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OVERWRITE EXT: %v", err)
	}
}

// ataRegs are registers a fake drive ends a command with.
type ataRegs struct {
	err, status, device byte
	count               uint16
	lba                 uint64
}

// ataStatusDescriptor builds the ATA Status Return descriptor (09h) SAT returns them in, EXTEND
// set.
func ataStatusDescriptor(r ataRegs) []byte {
	return []byte{0x09, 0x0C, 0x01, r.err, byte(r.count >> 8), byte(r.count), byte(r.lba >> 24), byte(r.lba),
		byte(r.lba >> 32), byte(r.lba >> 8), byte(r.lba >> 40), byte(r.lba >> 16), r.device, r.status}
}

// ataFixedSense builds SAT-5's fixed-format sense data for them: ERROR, STATUS, DEVICE,
// COUNT(7:0) in INFORMATION; EXTEND, COUNT UPPER NONZERO, LBA UPPER NONZERO and LBA(23:0) in
// COMMAND-SPECIFIC INFORMATION.
func ataFixedSense(key, asc, ascq byte, r ataRegs) []byte {
	b := fixedSense(key, asc, ascq)
	b[0] |= 0x80
	b[3], b[4], b[5], b[6] = r.err, r.status, r.device, byte(r.count)
	b[8] = 0x80
	if r.count>>8 != 0 {
		b[8] |= 0x40
	}
	if r.lba>>24 != 0 {
		b[8] |= 0x20
	}
	b[9], b[10], b[11] = byte(r.lba), byte(r.lba>>8), byte(r.lba>>16)
	return b
}

func TestATARegistersFromSense(t *testing.T) {
	regs := ataRegs{err: 0x04, status: 0x41, device: 0x40, count: 0x8012, lba: 0xAABB_CCDD_EEFF}
	parse := func(b []byte) senseData {
		s, err := parseSense(b)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	r := ataRegistersFrom(parse(descSense(senseAbortedCommand, 0, 0, ataStatusDescriptor(regs))))
	if r == nil || r.err != 0x04 || r.status != 0x41 || r.device != 0x40 || r.count != 0x8012 || r.lba != 0xAABB_CCDD_EEFF || r.partial {
		t.Errorf("descriptor: %+v", r)
	}
	noExtend := ataStatusDescriptor(regs)
	noExtend[2] = 0
	if r := ataRegistersFrom(parse(descSense(senseAbortedCommand, 0, 0, noExtend))); r == nil || r.count != 0x12 || r.lba != 0xDDEEFF {
		t.Errorf("descriptor without EXTEND: %+v", r)
	}
	r = ataRegistersFrom(parse(ataFixedSense(senseAbortedCommand, 0, 0, regs)))
	if r == nil || r.err != 0x04 || r.status != 0x41 || r.device != 0x40 || r.count != 0x12 || r.lba != 0xDDEEFF ||
		!r.partial || !r.countHighNonZero || !r.lbaHighNonZero {
		t.Errorf("fixed: %+v", r)
	}
	if r := ataRegistersFrom(parse(fixedSense(senseAbortedCommand, 0, 0))); r != nil {
		t.Errorf("fixed without VALID: %+v", r)
	}
	if r := ataRegistersFrom(parse(descSense(senseAbortedCommand, 0, 0))); r != nil {
		t.Errorf("descriptor without ATA status: %+v", r)
	}
}

// identify builds IDENTIFY DEVICE data of an ATA disk with word 59, checksummed.
func identify(word59 uint16) []byte { return identifyWith(map[int]uint16{59: word59}) }

// identifyWith builds IDENTIFY DEVICE data of an ATA disk with those words, checksummed.
func identifyWith(words map[int]uint16) []byte {
	id := make([]byte, 512)
	binary.LittleEndian.PutUint16(id[0:], 0x0040)
	for w, v := range words {
		binary.LittleEndian.PutUint16(id[2*w:], v)
	}
	id[510] = 0xA5
	var sum byte
	for _, b := range id[:511] {
		sum += b
	}
	id[511] = -sum
	return id
}

func TestATASanitizeCaps(t *testing.T) {
	for _, tc := range []struct {
		word59        uint16
		crypto, block bool
	}{
		{0x0000, false, false},
		{0x1000, false, false},                   // SANITIZE, neither command
		{0x3000, true, false},                    // CRYPTO SCRAMBLE EXT
		{0x9000, false, true},                    // BLOCK ERASE EXT
		{0xF110, true, true},                     // all, with multiple sector setting bits
		{0xA000, false, false},                   // commands without the feature set
		{0x4000 | 0x1000 | 0x0800, false, false}, // OVERWRITE EXT only
	} {
		c, b := ataSanitizeCaps(identify(tc.word59))
		if c != tc.crypto || b != tc.block {
			t.Errorf("word 59 %#04x: crypto %v block %v", tc.word59, c, b)
		}
	}
}

// fakeATA plays a SATA drive behind a SCSI/ATA translation layer: it checks every ATA
// PASS-THROUGH (16) CDB byte by byte (what it cannot take it rejects, and notes in bad),
// answers IDENTIFY DEVICE, and a CRYPTO SCRAMBLE EXT or BLOCK ERASE EXT with its signature
// erases the file standing in for its media, then reports SANITIZE IN PROGRESS to a few SANITIZE
// STATUS EXT before it is done (or failed).
type fakeATA struct {
	disk    string
	word59  uint16
	fail    bool // the sanitize fails
	forever bool // the sanitize never ends
	// fixedErrors: errors come in fixed-format sense data, as libata gives them with D_SENSE 0
	// (its default); fixed: everything does, as some 6.10 and stable kernels gave it.
	fixedErrors, fixed bool
	onPoll             func(n int)
	// sec plays the Security feature set (nil: word 128 is zero).
	sec *fakeSecurity

	started []uint16 // the features of the sanitize commands taken
	polls   int
	running bool
	cleared bool // CLEAR SANITIZE OPERATION FAILED was taken
	bad     []string
}

func (f *fakeATA) reject(format string, args ...any) ([]byte, error) {
	f.bad = append(f.bad, fmt.Sprintf(format, args...))
	sense := fixedSense(senseIllegalRequest, 0x24, 0x00)
	return sense, checkConditionError(sense)
}

// abort is the drive's ABORT, with the sanitize error reason in LBA(7:0).
func (f *fakeATA) abort(reason byte) ([]byte, error) {
	r := ataRegs{err: ataErrorABRT, status: 0x41, lba: uint64(reason)}
	sense := descSense(senseAbortedCommand, 0, 0, ataStatusDescriptor(r))
	if f.fixed || f.fixedErrors {
		sense = ataFixedSense(senseAbortedCommand, 0, 0, r)
	}
	return sense, checkConditionError(sense)
}

func (f *fakeATA) exec(cdb []byte, dir int, data []byte, timeout time.Duration) ([]byte, error) {
	if len(cdb) != 16 || cdb[0] != 0x85 || cdb[15] != 0 {
		return f.reject("not ATA PASS-THROUGH (16): % x", cdb)
	}
	protocol, extend := cdb[1]>>1&0x0F, cdb[1]&0x01 != 0
	ckCond, tDir, bytBlok, tLength := cdb[2]&0x20 != 0, cdb[2]&0x08 != 0, cdb[2]&0x04 != 0, cdb[2]&0x03
	feature, count := uint16(cdb[3])<<8|uint16(cdb[4]), uint16(cdb[5])<<8|uint16(cdb[6])
	lba := uint64(cdb[11])<<40 | uint64(cdb[9])<<32 | uint64(cdb[7])<<24 | uint64(cdb[12])<<16 | uint64(cdb[10])<<8 | uint64(cdb[8])
	if cdb[1]&0xE0 != 0 || cdb[2]&0xD0 != 0 || cdb[13]&0x0F != 0 {
		// MULTIPLE_COUNT, OFF_LINE, T_TYPE, DEVICE bits 3:0.
		return f.reject("ATA PASS-THROUGH fields this drive does not take: % x", cdb)
	}
	if !extend && (cdb[3] != 0 || cdb[5] != 0 || cdb[7] != 0 || cdb[9] != 0 || cdb[11] != 0) {
		return f.reject("28-bit command with 48-bit bytes: % x", cdb)
	}
	switch cdb[14] {
	case ataCmdIdentify:
		if protocol != 4 || extend || ckCond || !tDir || !bytBlok || tLength != 2 || count != 1 || feature != 0 || lba != 0 ||
			dir != sgDxferFromDev || len(data) != 512 {
			return f.reject("IDENTIFY DEVICE % x (%d, %d bytes)", cdb, dir, len(data))
		}
		words := map[int]uint16{59: f.word59}
		if f.sec != nil {
			words[128], words[89], words[90] = f.sec.word128(), f.sec.word89, f.sec.word90
		}
		copy(data, identifyWith(words))
		if f.sec != nil {
			f.sec.last = ataCmdIdentify
		}
		return nil, nil
	case ataCmdSecuritySetPassword, ataCmdSecurityUnlock, ataCmdSecurityErasePrepare, ataCmdSecurityEraseUnit,
		ataCmdSecurityDisablePassword:
		if f.sec == nil {
			return f.abort(0)
		}
		return f.security(cdb, dir, data, timeout)
	case ataCmdSanitize:
		if protocol != 3 || !extend || tDir || bytBlok || tLength != 0 || dir != sgDxferNone || data != nil {
			return f.reject("SANITIZE DEVICE % x (%d, %d bytes)", cdb, dir, len(data))
		}
	default:
		return f.reject("ATA command %02xh", cdb[14])
	}
	switch feature {
	case ataCryptoScrambleExt, ataBlockEraseExt:
		key, bit := uint64(0x43727970), uint16(1<<13)
		if feature == ataBlockEraseExt {
			key, bit = 0x426B4572, 1<<15
		}
		if lba != key || count != 0x0010 {
			f.bad = append(f.bad, fmt.Sprintf("sanitize %#04x: LBA %#x COUNT %#04x", feature, lba, count))
			return f.abort(2)
		}
		if f.word59&(1<<12) == 0 || f.word59&bit == 0 {
			return f.abort(2)
		}
		f.started, f.running, f.polls = append(f.started, feature), true, 0
		if !f.fail {
			return nil, mediaErased(f.disk, feature == ataCryptoScrambleExt)
		}
		return nil, nil
	case ataSanitizeStatusExt:
		if !ckCond || lba != 0 || count&^0x0001 != 0 {
			return f.reject("SANITIZE STATUS EXT % x", cdb)
		}
		if count == 1 && f.running && f.fail {
			f.running, f.cleared = false, true
			sense := descSense(senseRecoveredError, 0x00, 0x1D, ataStatusDescriptor(ataRegs{status: 0x50, lba: 0xFFFF}))
			return sense, checkConditionError(sense)
		}
	default:
		return f.reject("sanitize feature %#04x", feature)
	}
	f.polls++
	if f.polls > 1000 {
		return nil, errors.New("polled on and on")
	}
	if f.onPoll != nil {
		f.onPoll(f.polls)
	}
	r := ataRegs{status: 0x50, lba: 0xFFFF}
	switch {
	case f.running && (f.forever || f.polls <= 3):
		r.count, r.lba = ataSstatInProgress, uint64(f.polls)*0x4000
	case f.running && f.fail:
		return f.abort(1)
	case f.running:
		r.count = ataSstatDone
	}
	sense := descSense(senseRecoveredError, 0x00, 0x1D, ataStatusDescriptor(r))
	if f.fixed {
		sense = ataFixedSense(senseRecoveredError, 0x00, 0x1D, r)
	}
	return sense, checkConditionError(sense)
}

// sataDrive opens a file standing in for a SATA drive that f plays, its capabilities detected
// as an sd disk's would be.
func sataDrive(t *testing.T, f *fakeATA, size int) *Device {
	t.Helper()
	f.disk = disk(t, size)
	d := open(t, f.disk)
	sgCapabilities(d, &d.Caps, sysfsDisk(t, sataDisk, "ATA"), f.exec)
	return d
}

// A SATA drive with the SANITIZE feature set is sanitized by it first, CRYPTO SCRAMBLE EXT
// before BLOCK ERASE EXT: the agent waits for SANITIZE STATUS EXT to say it completed, and the
// read-back proves no sampled block holds what it held.
func TestATASanitizeIsTriedFirstAndProven(t *testing.T) {
	fastPoll(t)
	f := &fakeATA{word59: 0xB000}
	d := sataDrive(t, f, 8<<20)
	if plan := Plan(d.Caps); len(plan) < 2 || plan[0] != MethodATACryptoScramble || plan[1] != MethodATABlockErase {
		t.Fatalf("plan %v", plan)
	}
	if d.Caps.SCSICryptoErase || d.Caps.SCSIBlockErase {
		t.Fatalf("a SATA drive offers SCSI SANITIZE: %+v", d.Caps)
	}
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method != MethodATACryptoScramble || len(p.Tried) != 0 {
		t.Fatalf("proof %+v", p)
	}
	if len(f.started) != 1 || f.started[0] != ataCryptoScrambleExt || f.polls != 4 || len(f.bad) != 0 {
		t.Fatalf("started %#04x after %d polls; rejected %q", f.started, f.polls, f.bad)
	}
}

// A sanitize the drive reports failed (SANITIZE STATUS EXT aborted, the last sanitize
// unsuccessful) is cleared, so that the drive takes I/O again, and the next method runs; the
// proof says what failed and why.
func TestATASanitizeFailureFallsBack(t *testing.T) {
	fastPoll(t)
	for _, fixed := range []bool{false, true} {
		f := &fakeATA{word59: 0x9000, fail: true, fixedErrors: fixed}
		d := sataDrive(t, f, 4<<20)
		p, err := Sanitize(context.Background(), d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Verified || p.Method == MethodATABlockErase || len(p.Tried) != 1 || !f.cleared || len(f.bad) != 0 {
			t.Fatalf("fixed sense %v: proof %+v, failure cleared %v; rejected %q", fixed, p, f.cleared, f.bad)
		}
		if !strings.HasPrefix(p.Tried[0], "ATABlockErase: erasing") || !strings.Contains(p.Tried[0], "the last sanitize completed unsuccessfully") {
			t.Fatalf("fixed sense %v: tried %q", fixed, p.Tried)
		}
	}
}

// Fixed-format sense data cannot tell a sanitize in progress from one completed: the agent
// says so rather than guess.
func TestATAFixedSenseDoesNotPassForDone(t *testing.T) {
	fastPoll(t)
	f := &fakeATA{word59: 0x3000, fixed: true}
	d := sataDrive(t, f, 1<<20)
	err := d.Erase(context.Background(), MethodATACryptoScramble)
	if err == nil || !strings.Contains(err.Error(), "fixed-format") || f.polls != 1 {
		t.Fatalf("erase: %v after %d polls", err, f.polls)
	}
}

// A cancelled context ends the wait for a sanitize that does not end.
func TestATASanitizeWaitEndsWithTheContext(t *testing.T) {
	fastPoll(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fakeATA{word59: 0x9000, forever: true, onPoll: func(n int) {
		if n == 2 {
			cancel()
		}
	}}
	d := sataDrive(t, f, 1<<20)
	if _, err := Sanitize(ctx, d, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sanitize returned %v", err)
	}
}

// A drive without the SANITIZE feature set, or with bad IDENTIFY data, gets no ATA method, and
// no ATA command goes to a disk detected as SCSI.
func TestATASanitizeOnlyWhereOffered(t *testing.T) {
	f := &fakeATA{word59: 0x0000}
	d := sataDrive(t, f, 1<<20)
	if d.Caps.ATACryptoScramble || d.Caps.ATABlockErase || d.scsi != nil {
		t.Fatalf("caps %+v", d.Caps)
	}
	corrupt := func(cdb []byte, dir int, data []byte, _ time.Duration) ([]byte, error) {
		copy(data, identify(0xB000))
		data[100]++
		return nil, nil
	}
	if _, err := ataIdentify(corrupt); err == nil {
		t.Fatal("IDENTIFY data with a bad checksum taken")
	}
	d.scsi, d.sat = f.exec, false
	if err := d.Erase(context.Background(), MethodATABlockErase); !errors.Is(err, ErrUnsupported) || f.started != nil {
		t.Fatalf("ATA sanitize to a SCSI disk: %v", err)
	}
}
