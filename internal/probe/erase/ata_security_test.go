package erase

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestATASecurityCDBs(t *testing.T) {
	pw := make([]byte, 32)
	copy(pw, "metalhub-erase")
	for _, tc := range []struct {
		name    string
		command byte
		control uint16
		cdb     []byte
		word0   []byte
	}{
		// PIO Data-Out (5<<1), 28-bit; BYT_BLOK|T_LENGTH=COUNT, T_DIR 0 (0x06); COUNT 1.
		{"SECURITY SET PASSWORD, user, high", ataCmdSecuritySetPassword, 0,
			[]byte{0x85, 0x0A, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF1, 0}, []byte{0, 0}},
		{"SECURITY UNLOCK, user", ataCmdSecurityUnlock, 0,
			[]byte{0x85, 0x0A, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF2, 0}, []byte{0, 0}},
		{"SECURITY ERASE UNIT, normal", ataCmdSecurityEraseUnit, 0,
			[]byte{0x85, 0x0A, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF4, 0}, []byte{0, 0}},
		{"SECURITY ERASE UNIT, enhanced", ataCmdSecurityEraseUnit, ataSecurityEnhancedErase,
			[]byte{0x85, 0x0A, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF4, 0}, []byte{0x02, 0}},
		{"SECURITY DISABLE PASSWORD, user", ataCmdSecurityDisablePassword, 0,
			[]byte{0x85, 0x0A, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF6, 0}, []byte{0, 0}},
	} {
		c, data := ataSecurityCommand(tc.command, tc.control)
		if got := c.cdb(); !bytes.Equal(got, tc.cdb) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, got, tc.cdb)
		}
		// Word 0 the control bits, words 1-16 the password, the rest zero.
		want := append(append(append([]byte{}, tc.word0...), pw...), make([]byte, 512-34)...)
		if !bytes.Equal(data, want) {
			t.Errorf("%s: data % x", tc.name, data[:40])
		}
		if c.timeout <= 0 || (tc.command != ataCmdSecurityEraseUnit && c.timeout > time.Minute) {
			t.Errorf("%s: timeout %s", tc.name, c.timeout)
		}
	}
	// Non-data (3<<1), 28-bit, nothing else.
	if got, want := ataErasePrepareCommand().cdb(), []byte{0x85, 0x06, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xF3, 0}; !bytes.Equal(got, want) {
		t.Errorf("SECURITY ERASE PREPARE:\n got % x\nwant % x", got, want)
	}
}

func TestATASecurityCaps(t *testing.T) {
	for _, tc := range []struct {
		word128          uint16
		enhanced, normal bool
	}{
		{0x0000, false, false},
		{0x0001, false, true},
		{0x0021, true, true},
		{0x0029, false, false}, // frozen
		{0x0009, false, false}, // frozen
		{0x0020, false, false}, // enhanced without the feature set
		{0x0027, true, true},   // enabled and locked: recovered at erase time
		{0x0133, true, true},   // count expired, master capability maximum: refused at erase time, saying why
	} {
		e, n := ataSecurityCaps(identifyWith(map[int]uint16{128: tc.word128}))
		if e != tc.enhanced || n != tc.normal {
			t.Errorf("word 128 %#04x: enhanced %v normal %v", tc.word128, e, n)
		}
	}
}

func TestATAEraseTimeout(t *testing.T) {
	const size = 3 << 40 // 3 TiB: 104857 s at 30 MiB/s
	estimate := 104857*time.Second + 30*time.Minute
	for _, tc := range []struct {
		name     string
		w89, w90 uint16
		enhanced bool
		want     time.Duration
	}{
		{"5 units: 10 minutes", 5, 0, false, 2*10*time.Minute + 30*time.Minute},
		{"enhanced reads word 90", 5, 60, true, 2*120*time.Minute + 30*time.Minute},
		{"bits 14:8 ignored without bit 15", 0x7F05, 0, false, 50 * time.Minute},
		{"extended format", 0x8000 | 300, 0, false, 2*600*time.Minute + 30*time.Minute},
		{"not given: from the size", 0, 0, false, estimate},
		{"more than 508 minutes: from the size where longer", 0xFF, 0, false, estimate},
		{"extended more than: the larger", 0xFFFF, 0, false, 2*65534*time.Minute + 30*time.Minute},
	} {
		id := identifyWith(map[int]uint16{89: tc.w89, 90: tc.w90})
		if got := ataEraseTimeout(id, tc.enhanced, size); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// fakeSecurity plays a fakeATA's Security feature set, ACS-3's states as far as the agent meets
// them: a password set enables security; ERASE UNIT right after ERASE PREPARE, with the
// password, erases the media and disables security; a wrong password is aborted and spends one
// of five attempts; a locked drive hides its media (the file is emptied) until unlocked. Every
// CDB and data block is checked byte by byte.
type fakeSecurity struct {
	frozen, enhanced bool // word 128 bits 3 and 5
	word89, word90   uint16
	enabled, locked  bool
	password         []byte
	attempts         int  // left: 0 is count expired
	eraseFails       bool // ERASE UNIT is aborted whatever the password
	keepsSecurity    bool // a completed erase leaves security enabled, against ACS
	onesAfterErase   bool // a normal erase reads back ones, as many SSDs' do, not ACS's zeros
	hidden           []byte

	last         byte     // the command before
	commands     []string // the security commands taken, "!" after one aborted
	eraseTimeout time.Duration
}

func (s *fakeSecurity) word128() uint16 {
	w := uint16(ataSecSupported)
	for bit, on := range map[uint16]bool{ataSecEnabled: s.enabled, ataSecLocked: s.locked, ataSecFrozen: s.frozen,
		ataSecCountExpired: s.enabled && s.attempts == 0, ataSecEnhancedSupported: s.enhanced} {
		if on {
			w |= bit
		}
	}
	return w
}

// lockWith leaves the drive as a power cycle leaves one whose security is enabled: locked with
// password, its media unreadable until unlocked.
func (f *fakeATA) lockWith(t *testing.T, password string) {
	t.Helper()
	b, err := os.ReadFile(f.disk)
	if err != nil {
		t.Fatal(err)
	}
	f.sec.enabled, f.sec.locked, f.sec.hidden = true, true, b
	f.sec.password = append([]byte(password), make([]byte, 32-len(password))...)
	if err := os.Truncate(f.disk, 0); err != nil {
		t.Fatal(err)
	}
}

var securityNames = map[byte]string{ataCmdSecuritySetPassword: "SET PASSWORD", ataCmdSecurityUnlock: "UNLOCK",
	ataCmdSecurityErasePrepare: "ERASE PREPARE", ataCmdSecurityEraseUnit: "ERASE UNIT", ataCmdSecurityDisablePassword: "DISABLE PASSWORD"}

func (f *fakeATA) security(cdb []byte, dir int, data []byte, timeout time.Duration) ([]byte, error) {
	s, command := f.sec, cdb[14]
	name := securityNames[command]
	defer func() { s.last = command }()
	zero := func(b []byte) bool { return bytes.Equal(b, make([]byte, len(b))) }
	if command == ataCmdSecurityErasePrepare {
		if cdb[1] != 0x06 || !zero(cdb[2:14]) || dir != sgDxferNone || data != nil {
			return f.reject("%s % x (%d, %d bytes)", name, cdb, dir, len(data))
		}
	} else if cdb[1] != 0x0A || cdb[2] != 0x06 || !zero(cdb[3:6]) || cdb[6] != 1 || !zero(cdb[7:14]) ||
		dir != sgDxferToDev || len(data) != 512 {
		return f.reject("%s % x (%d, %d bytes)", name, cdb, dir, len(data))
	}
	if timeout <= 0 {
		return f.reject("%s without a timeout", name)
	}
	var password []byte
	if command != ataCmdSecurityErasePrepare {
		control, allowed := binary.LittleEndian.Uint16(data), uint16(0)
		if command == ataCmdSecurityEraseUnit {
			allowed = ataSecurityEnhancedErase
		}
		if control&^allowed != 0 || !zero(data[34:]) {
			return f.reject("%s data % x", name, data[:40])
		}
		password = data[2:34]
	}
	abort := func() ([]byte, error) {
		s.commands = append(s.commands, name+"!")
		return f.abort(0)
	}
	right := func() bool {
		if s.enabled && bytes.Equal(password, s.password) {
			return true
		}
		if s.attempts > 0 {
			s.attempts--
		}
		return false
	}
	if s.frozen {
		return abort()
	}
	switch command {
	case ataCmdSecuritySetPassword:
		if s.locked || s.enabled {
			// Setting a password over one is not what the agent does.
			f.bad = append(f.bad, "SET PASSWORD with security enabled")
			return abort()
		}
		s.enabled, s.password = true, bytes.Clone(password)
	case ataCmdSecurityUnlock:
		if !s.locked {
			f.bad = append(f.bad, "UNLOCK of a drive not locked")
			return abort()
		}
		if s.attempts == 0 || !right() {
			return abort()
		}
		s.locked = false
		if err := os.WriteFile(f.disk, s.hidden, 0o600); err != nil {
			return nil, err
		}
	case ataCmdSecurityErasePrepare:
	case ataCmdSecurityEraseUnit:
		enhanced := binary.LittleEndian.Uint16(data)&ataSecurityEnhancedErase != 0
		if s.last != ataCmdSecurityErasePrepare {
			f.bad = append(f.bad, "ERASE UNIT not right after ERASE PREPARE")
			return abort()
		}
		if s.locked || (enhanced && !s.enhanced) || s.attempts == 0 || !right() || s.eraseFails {
			return abort()
		}
		s.eraseTimeout = timeout
		if enhanced {
			name += " enhanced"
		}
		if err := mediaErased(f.disk, enhanced); err != nil {
			return nil, err
		}
		if s.onesAfterErase && !enhanced {
			if err := os.WriteFile(f.disk, bytes.Repeat([]byte{0xFF}, int(fileSize(f.disk))), 0o600); err != nil {
				return nil, err
			}
		}
		if !s.keepsSecurity {
			s.enabled, s.password = false, nil
		}
	case ataCmdSecurityDisablePassword:
		if s.locked || s.attempts == 0 || !right() {
			return abort()
		}
		s.enabled, s.password = false, nil
	}
	s.commands = append(s.commands, name)
	return nil, nil
}

// securityDrive is a SATA drive without SANITIZE whose security s is, opened as an sd disk.
func securityDrive(t *testing.T, s *fakeSecurity, size int) (*fakeATA, *Device) {
	t.Helper()
	if s.attempts == 0 {
		s.attempts = 5
	}
	f := &fakeATA{sec: s}
	return f, sataDrive(t, f, size)
}

// A SATA drive without SANITIZE is erased by SECURITY ERASE UNIT, enhanced where it has it, under
// the published password, with the time the drive gives (doubled, plus a margin); security is
// disabled afterwards, and the read-back proves every sampled block changed.
func TestATASecurityEraseIsProven(t *testing.T) {
	for _, tc := range []struct {
		name     string
		s        *fakeSecurity
		plan     []Method
		erase    string
		timeout  time.Duration
		verified Method
	}{
		{"enhanced", &fakeSecurity{enhanced: true, word89: 1, word90: 3},
			[]Method{MethodATASecurityEraseEnhanced, MethodATASecurityErase, MethodDiscard, MethodOverwrite},
			"ERASE UNIT enhanced", 2*6*time.Minute + 30*time.Minute, MethodATASecurityEraseEnhanced},
		{"normal", &fakeSecurity{word89: 1},
			[]Method{MethodATASecurityErase, MethodDiscard, MethodOverwrite},
			"ERASE UNIT", 2*2*time.Minute + 30*time.Minute, MethodATASecurityErase},
		// Ones are not zeros, and the data is gone all the same.
		{"normal, reading back ones", &fakeSecurity{word89: 1, onesAfterErase: true},
			[]Method{MethodATASecurityErase, MethodDiscard, MethodOverwrite},
			"ERASE UNIT", 2*2*time.Minute + 30*time.Minute, MethodATASecurityErase},
	} {
		f, d := securityDrive(t, tc.s, 4<<20)
		if plan := Plan(d.Caps); !slices.Equal(plan, tc.plan) {
			t.Fatalf("%s: plan %v, want %v", tc.name, plan, tc.plan)
		}
		p, err := Sanitize(context.Background(), d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Verified || p.Method != tc.verified || len(p.Tried) != 0 || len(f.bad) != 0 {
			t.Fatalf("%s: proof %+v; rejected %q", tc.name, p, f.bad)
		}
		if want := []string{"SET PASSWORD", "ERASE PREPARE", tc.erase}; !slices.Equal(tc.s.commands, want) {
			t.Fatalf("%s: commands %q, want %q", tc.name, tc.s.commands, want)
		}
		if tc.s.enabled || tc.s.eraseTimeout != tc.timeout {
			t.Fatalf("%s: security enabled %v after the erase; ERASE UNIT allowed %s", tc.name, tc.s.enabled, tc.s.eraseTimeout)
		}
	}
}

// Where the drive has SANITIZE, or its security is frozen, no security erase is offered; a drive
// frozen after it was looked at is refused, saying why.
func TestATASecurityEraseOnlyWhereOffered(t *testing.T) {
	f := &fakeATA{word59: 0x9000, sec: &fakeSecurity{enhanced: true, attempts: 5}}
	d := sataDrive(t, f, 1<<20)
	if d.Caps.ATASecurityErase || d.Caps.ATASecurityEraseEnhanced || !d.Caps.ATABlockErase {
		t.Fatalf("with SANITIZE: caps %+v", d.Caps)
	}
	f, d = securityDrive(t, &fakeSecurity{frozen: true, enhanced: true}, 1<<20)
	if d.Caps.ATASecurityErase || d.Caps.ATASecurityEraseEnhanced || d.scsi != nil {
		t.Fatalf("frozen: caps %+v", d.Caps)
	}
	d.scsi, d.sat = f.exec, true
	if err := d.Erase(context.Background(), MethodATASecurityErase); err == nil || !strings.Contains(err.Error(), "frozen") {
		t.Fatalf("erase of a frozen drive: %v", err)
	}
	if len(f.sec.commands) != 0 {
		t.Fatalf("a frozen drive was sent %q", f.sec.commands)
	}
	d.sat = false
	if err := d.Erase(context.Background(), MethodATASecurityErase); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("security erase of a SCSI disk: %v", err)
	}
	f, d = securityDrive(t, &fakeSecurity{}, 1<<20)
	if err := d.Erase(context.Background(), MethodATASecurityEraseEnhanced); !errors.Is(err, ErrUnsupported) || len(f.sec.commands) != 0 {
		t.Fatalf("enhanced erase of a drive without it: %v, %q", err, f.sec.commands)
	}
}

// An ERASE UNIT the drive aborts has the password it set disabled again, and the plan goes on;
// a drive whose security stays enabled after its erase is not trusted, and is disabled too.
func TestATASecurityEraseFailureFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *fakeSecurity
		says string
	}{
		{"erase aborted", &fakeSecurity{enhanced: true, eraseFails: true}, "SECURITY ERASE UNIT: ATA status"},
		{"security kept", &fakeSecurity{enhanced: true, keepsSecurity: true}, "security still enabled"},
	} {
		f, d := securityDrive(t, tc.s, 4<<20)
		p, err := Sanitize(context.Background(), d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Verified || p.Method != MethodDiscard || len(p.Tried) != 2 || len(f.bad) != 0 {
			t.Fatalf("%s: proof %+v; rejected %q", tc.name, p, f.bad)
		}
		for i, m := range []Method{MethodATASecurityEraseEnhanced, MethodATASecurityErase} {
			if !strings.HasPrefix(p.Tried[i], string(m)+": erasing") || !strings.Contains(p.Tried[i], tc.says) {
				t.Errorf("%s: tried %q", tc.name, p.Tried)
			}
		}
		if tc.s.enabled || tc.s.commands[len(tc.s.commands)-1] != "DISABLE PASSWORD" {
			t.Fatalf("%s: security left enabled %v after %q", tc.name, tc.s.enabled, tc.s.commands)
		}
	}
}

// A drive an interrupted erase left locked with the published password is unlocked before its
// blocks are sampled (a locked drive reads nothing), its security disabled, and erased again.
func TestATASecurityEraseRecoversADriveItLeftLocked(t *testing.T) {
	s := &fakeSecurity{enhanced: true}
	f, d := securityDrive(t, s, 4<<20)
	f.lockWith(t, ATASecurityPassword)
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method != MethodATASecurityEraseEnhanced || len(p.Tried) != 0 || len(f.bad) != 0 {
		t.Fatalf("proof %+v; rejected %q", p, f.bad)
	}
	want := []string{"UNLOCK", "DISABLE PASSWORD", "SET PASSWORD", "ERASE PREPARE", "ERASE UNIT enhanced"}
	if !slices.Equal(s.commands, want) || s.attempts != 5 || s.enabled || s.locked {
		t.Fatalf("commands %q (want %q), %d attempts left, enabled %v, locked %v", s.commands, want, s.attempts, s.enabled, s.locked)
	}
}

// A drive whose security another password enabled is asked the published one once (its attempts
// are few): each security method fails naming the password and what to do, and what follows in
// the plan runs where the drive can be read.
func TestATASecurityEraseRefusedPasswordIsNamed(t *testing.T) {
	for _, locked := range []bool{true, false} {
		s := &fakeSecurity{enhanced: true}
		f, d := securityDrive(t, s, 4<<20)
		if locked {
			f.lockWith(t, "tenant-secret")
		} else {
			s.enabled, s.password = true, append([]byte("tenant-secret"), make([]byte, 19)...)
		}
		p, err := Sanitize(context.Background(), d, Options{})
		if locked && (err == nil || !strings.Contains(err.Error(), "reading")) {
			// A locked drive reads nothing: no method after the security erases can be proven.
			t.Fatalf("locked: Sanitize returned %v", err)
		}
		if !locked && (err != nil || !p.Verified || p.Method != MethodDiscard) {
			t.Fatalf("unlocked: proof %+v, %v", p, err)
		}
		if len(p.Tried) != 2 || len(f.bad) != 0 {
			t.Fatalf("locked %v: tried %q; rejected %q", locked, p.Tried, f.bad)
		}
		for i, m := range []Method{MethodATASecurityEraseEnhanced, MethodATASecurityErase} {
			if !strings.HasPrefix(p.Tried[i], string(m)+": ") || !strings.Contains(p.Tried[i], `refused the password "metalhub-erase"`) ||
				!strings.Contains(p.Tried[i], "with that password") {
				t.Errorf("locked %v: tried %q", locked, p.Tried)
			}
		}
		if !strings.Contains(p.Tried[1], "not asked again") || s.attempts != 4 || len(s.commands) != 1 {
			t.Fatalf("locked %v: the drive was asked %q, %d attempts left", locked, s.commands, s.attempts)
		}
	}
}

// A drive whose password attempts ran out is not asked: the method says to power-cycle it.
func TestATASecurityEraseCountExpired(t *testing.T) {
	s := &fakeSecurity{attempts: 1}
	f, d := securityDrive(t, s, 1<<20)
	s.enabled, s.attempts, s.password = true, 0, make([]byte, 32)
	err := d.Erase(context.Background(), MethodATASecurityErase)
	if err == nil || !strings.Contains(err.Error(), "power-cycle") || len(s.commands) != 0 || len(f.bad) != 0 {
		t.Fatalf("erase: %v after %q", err, s.commands)
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
