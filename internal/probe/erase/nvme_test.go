package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// The command is Linux's struct nvme_admin_cmd byte for byte.
func TestNVMeCommandLayout(t *testing.T) {
	var c nvmeCommand
	if n := unsafe.Sizeof(c); n != 72 {
		t.Fatalf("nvmeCommand is %d bytes, struct nvme_admin_cmd 72", n)
	}
	for name, off := range map[string]uintptr{"nsid": unsafe.Offsetof(c.NSID), "addr": unsafe.Offsetof(c.Addr), "data_len": unsafe.Offsetof(c.DataLen),
		"cdw10": unsafe.Offsetof(c.CDW10), "timeout_ms": unsafe.Offsetof(c.TimeoutMS), "result": unsafe.Offsetof(c.Result)} {
		want := map[string]uintptr{"nsid": 4, "addr": 24, "data_len": 36, "cdw10": 40, "timeout_ms": 64, "result": 68}[name]
		if off != want {
			t.Errorf("%s at %d, want %d", name, off, want)
		}
	}
}

// fakeNVMe plays an NVMe controller behind the admin ioctl: Identify Controller answers its
// SANICAP, OACS and FNA, Identify Namespace its namespace's format; a Sanitize erases the file
// standing in for its namespace (punching it out, as a drive's erase leaves it unreadable) and
// runs for a few status reads, the status log reports progress; a Format NVM whose CDW10 keeps
// the namespace's format, bit for bit, erases the file at once.
type fakeNVMe struct {
	sanicap  uint32
	disk     string
	fail     bool
	commands []nvmeCommand
	polls    int
	exited   bool // Exit Failure Mode was sent

	oacs uint16
	fna  byte
	// The namespace: its NSID, NLBAF, FLBAS, DPS.
	nsid              uint32
	nlbaf, flbas, dps byte
	formatFails       bool // Format NVM completes with an error status
	formats           []nvmeCommand
	bad               []string
}

func (f *fakeNVMe) reject(format string, args ...any) error {
	f.bad = append(f.bad, fmt.Sprintf(format, args...))
	return errors.New("NVMe status 0x2") // Invalid Field in Command
}

// format checks a Format NVM against the namespace: the format index (both parts), MSET, PI and
// PIL as Identify Namespace gives them, SES a secure erase the controller has, nothing else.
func (f *fakeNVMe) format(cmd *nvmeCommand, data []byte) error {
	f.formats = append(f.formats, *cmd)
	lbaf := uint32(f.flbas&0xF) | uint32(f.flbas>>5&3)<<4
	want := lbaf&0xF | uint32(f.flbas>>4&1)<<4 | uint32(f.dps&7)<<5 | uint32(f.dps>>3&1)<<8 | (lbaf>>4)<<12
	ses := cmd.CDW10 >> 9 & 0x7
	switch {
	case cmd.NSID != f.nsid || data != nil || cmd.DataLen != 0 || cmd.Addr != 0:
		return f.reject("format NSID %d, %d bytes", cmd.NSID, cmd.DataLen)
	case cmd.CDW10&^uint32(0x7<<9) != want:
		return f.reject("format CDW10 %#x changes the format %#x", cmd.CDW10, want)
	case ses != nvmeSESUserData && !(ses == nvmeSESCrypto && f.fna&nvmeFNACrypto != 0):
		return f.reject("format SES %d", ses)
	case cmd.CDW11|cmd.CDW12|cmd.CDW13|cmd.CDW14|cmd.CDW15 != 0 || cmd.Flags != 0:
		return f.reject("format with other fields set: %+v", cmd)
	case cmd.TimeoutMS < 60*60*1000:
		return f.reject("format with a timeout of %d ms: a user data erase may take long", cmd.TimeoutMS)
	case f.formatFails:
		return errors.New("NVMe status 0x10a") // Invalid Format
	}
	return mediaErased(f.disk, ses == nvmeSESCrypto)
}

func (f *fakeNVMe) admin(cmd *nvmeCommand, data []byte) error {
	f.commands = append(f.commands, *cmd)
	switch cmd.Opcode {
	case nvmeOpIdentify:
		if len(data) != 4096 || int(cmd.DataLen) != len(data) {
			return f.reject("identify of %d bytes", len(data))
		}
		switch {
		case cmd.CDW10 == nvmeCNSController && cmd.NSID == 0:
			binary.LittleEndian.PutUint32(data[nvmeSanicapOffset:], f.sanicap)
			binary.LittleEndian.PutUint16(data[nvmeOACSOffset:], f.oacs)
			data[nvmeFNAOffset] = f.fna
		case cmd.CDW10 == nvmeCNSNamespace && cmd.NSID == f.nsid && f.nsid != 0:
			binary.LittleEndian.PutUint64(data[nvmeNSZEOffset:], 1<<20)
			data[nvmeNLBAFOffset], data[nvmeFLBASOffset], data[nvmeDPSOffset] = f.nlbaf, f.flbas, f.dps
		default:
			return f.reject("identify CNS %d NSID %d", cmd.CDW10, cmd.NSID)
		}
	case nvmeOpFormat:
		return f.format(cmd, data)
	case nvmeOpSanitize:
		if cmd.CDW10 == nvmeSanactExitFailure {
			f.exited = true
			return nil
		}
		if cmd.CDW10&nvmeAUSE == 0 {
			return errors.New("sanitize without AUSE")
		}
		if f.fail {
			return nil // accepted; the status log says it failed
		}
		fi, err := os.Stat(f.disk)
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.disk, nil, 0o600); err != nil {
			return err
		}
		return os.Truncate(f.disk, fi.Size())
	case nvmeOpGetLogPage:
		if cmd.CDW10&0xff != nvmeLogSanitize || cmd.NSID != 0xFFFFFFFF || len(data) != nvmeSanitizeLogBytes {
			return errors.New("bad log page")
		}
		f.polls++
		st := nvmeSstatInProgress
		switch {
		case f.polls >= 3 && f.fail:
			st = nvmeSstatFailed
		case f.polls >= 3:
			st = nvmeSstatDone
		}
		binary.LittleEndian.PutUint16(data[0:], uint16(f.polls*20000))
		binary.LittleEndian.PutUint16(data[2:], uint16(st))
	default:
		return f.reject("opcode %#02x", cmd.Opcode)
	}
	return nil
}

// A drive that offers crypto erase is sanitized by it first: the command carries the action
// with AUSE, the agent waits for the status log to say done, and the read-back proves no sampled
// block holds what it held.
func TestNVMeSanitizeIsTriedFirstAndProven(t *testing.T) {
	old := nvmeSanitizePoll
	nvmeSanitizePoll = time.Millisecond
	t.Cleanup(func() { nvmeSanitizePoll = old })
	path := disk(t, 8<<20)
	d := open(t, path)
	f := &fakeNVMe{sanicap: nvmeSanicapCrypto | nvmeSanicapBlock, disk: path}
	nvmeCapabilities(d, &d.Caps, f.admin, func() (uint32, error) { return 1, nil })
	if plan := Plan(d.Caps); plan[0] != MethodNVMeCryptoErase || plan[1] != MethodNVMeBlockErase {
		t.Fatalf("plan %v", plan)
	}
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method != MethodNVMeCryptoErase || len(p.Tried) != 0 {
		t.Fatalf("proof %+v", p)
	}
	var sanitize *nvmeCommand
	for i := range f.commands {
		if f.commands[i].Opcode == nvmeOpSanitize {
			sanitize = &f.commands[i]
		}
	}
	if sanitize == nil || sanitize.CDW10 != nvmeSanactCrypto|nvmeAUSE || f.polls < 3 {
		t.Fatalf("sanitize %+v after %d polls", sanitize, f.polls)
	}
}

// A sanitize the controller reports failed moves on to the next method, and the proof says
// what failed.
func TestNVMeSanitizeFailureFallsBack(t *testing.T) {
	old := nvmeSanitizePoll
	nvmeSanitizePoll = time.Millisecond
	t.Cleanup(func() { nvmeSanitizePoll = old })
	path := disk(t, 4<<20)
	d := open(t, path)
	f := &fakeNVMe{sanicap: nvmeSanicapBlock, disk: path, fail: true}
	d.admin, d.Caps.NVMeBlockErase = f.admin, true
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method == MethodNVMeBlockErase || len(p.Tried) != 1 {
		t.Fatalf("proof %+v", p)
	}
	if want := "NVMeBlockErase: erasing"; len(p.Tried[0]) < len(want) || p.Tried[0][:len(want)] != want {
		t.Fatalf("tried %q", p.Tried)
	}
	if !f.exited {
		t.Fatal("the failed sanitize's failure mode was not left: a real controller refuses the next method's writes")
	}
}

// Only whole NVMe namespaces are sent admin commands.
func TestNVMeNamespace(t *testing.T) {
	for name, want := range map[string]bool{"nvme0n1": true, "nvme12n3": true, "nvme0n1p1": false, "nvme0": false, "nvmen1": false, "sda": false, "nvme0n": false} {
		if got := nvmeNamespace(name); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

// Format NVM's CDW10 takes back the format Identify Namespace reports in use, bit for bit.
func TestNVMeFormatCDW10(t *testing.T) {
	for _, tc := range []struct {
		name             string
		nlbaf, flbas, dp byte
		ses              uint32
		want             uint32
		wantErr          string
	}{
		{"format 1, crypto erase", 1, 0x01, 0, nvmeSESCrypto, 0x0401, ""},
		{"format 0, user data erase", 0, 0x00, 0, nvmeSESUserData, 0x0200, ""},
		// LBAF 4, MSET 1 (FLBAS bit 4), PI type 1, PIL (DPS bit 3): 4 | 1<<4 | 1<<5 | 1<<8 | 1<<9.
		{"extended LBAs with PI first", 4, 0x14, 0x09, nvmeSESUserData, 0x0334, ""},
		// FLBAS bits 6:5 are the format index's upper bits (NVMe 2.0): index 0x32, CDW10 bits 13:12.
		{"format 50, PI type 3", 63, 0x62, 0x03, nvmeSESCrypto, 0x3462, ""},
		{"PIL without PI is kept as read", 0, 0x00, 0x08, nvmeSESUserData, 0x0300, ""},
		{"format beyond NLBAF", 1, 0x02, 0, nvmeSESCrypto, 0, "beyond"},
		{"reserved PI type", 0, 0x00, 0x05, nvmeSESCrypto, 0, "reserved"},
	} {
		id := make([]byte, 4096)
		binary.LittleEndian.PutUint64(id, 1<<20)
		id[nvmeNLBAFOffset], id[nvmeFLBASOffset], id[nvmeDPSOffset] = tc.nlbaf, tc.flbas, tc.dp
		f, err := nvmeCurrentFormat(id)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := f.cdw10(tc.ses); got != tc.want {
			t.Errorf("%s: CDW10 %#06x, want %#06x", tc.name, got, tc.want)
		}
	}
	if _, err := nvmeCurrentFormat(make([]byte, 4096)); err == nil {
		t.Error("an inactive namespace (NSZE 0) taken")
	}
}

// nvmeDrive opens a file standing in for namespace nsid of the controller f plays, its
// capabilities detected as a whole namespace's are.
func nvmeDrive(t *testing.T, f *fakeNVMe, size int) *Device {
	t.Helper()
	f.disk = disk(t, size)
	d := open(t, f.disk)
	nvmeCapabilities(d, &d.Caps, f.admin, func() (uint32, error) { return f.nsid, nil })
	return d
}

// A controller without Sanitize is formatted with a crypto erase where FNA says it has one, a
// user data erase otherwise, each before the kernel's methods; the format keeps the namespace's
// LBA format, metadata and protection settings, and the read-back proves the blocks changed.
func TestNVMeFormatIsTriedAndProven(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fna      byte
		plan     []Method
		want     Method
		wantCDW0 uint32
	}{
		{"crypto erase", nvmeFNACrypto | nvmeFNAEraseAll, []Method{MethodNVMeFormatCryptoErase, MethodNVMeFormatUserDataErase, MethodDiscard, MethodOverwrite},
			MethodNVMeFormatCryptoErase, 0x0334&^(0x7<<9) | nvmeSESCrypto<<9},
		{"user data erase", 0, []Method{MethodNVMeFormatUserDataErase, MethodDiscard, MethodOverwrite},
			MethodNVMeFormatUserDataErase, 0x0334},
	} {
		f := &fakeNVMe{oacs: nvmeOACSFormat, fna: tc.fna, nsid: 3, nlbaf: 4, flbas: 0x14, dps: 0x09}
		d := nvmeDrive(t, f, 4<<20)
		if plan := Plan(d.Caps); !slices.Equal(plan, tc.plan) {
			t.Fatalf("%s: plan %v, want %v", tc.name, plan, tc.plan)
		}
		p, err := Sanitize(context.Background(), d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Verified || p.Method != tc.want || len(p.Tried) != 0 || len(f.bad) != 0 {
			t.Fatalf("%s: proof %+v; rejected %q", tc.name, p, f.bad)
		}
		if len(f.formats) != 1 || f.formats[0].CDW10 != tc.wantCDW0 || f.formats[0].NSID != 3 || f.formats[0].TimeoutMS != nvmeFormatTimeoutMS {
			t.Fatalf("%s: formats %+v", tc.name, f.formats)
		}
	}
}

// Format comes after Sanitize: where the sanitize fails the format erases, and where formats
// fail too the kernel's methods run, the proof naming each that failed.
func TestNVMeFormatFallsBackAfterSanitizeAndBefore(t *testing.T) {
	old := nvmeSanitizePoll
	nvmeSanitizePoll = time.Millisecond
	t.Cleanup(func() { nvmeSanitizePoll = old })

	f := &fakeNVMe{sanicap: nvmeSanicapCrypto | nvmeSanicapBlock, fail: true, oacs: nvmeOACSFormat, fna: nvmeFNACrypto, nsid: 1}
	d := nvmeDrive(t, f, 4<<20)
	want := []Method{MethodNVMeCryptoErase, MethodNVMeBlockErase, MethodNVMeFormatCryptoErase, MethodNVMeFormatUserDataErase, MethodDiscard, MethodOverwrite}
	if plan := Plan(d.Caps); !slices.Equal(plan, want) {
		t.Fatalf("plan %v, want %v", plan, want)
	}
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method != MethodNVMeFormatCryptoErase || len(p.Tried) != 2 || len(f.bad) != 0 {
		t.Fatalf("proof %+v; rejected %q", p, f.bad)
	}

	f = &fakeNVMe{oacs: nvmeOACSFormat, fna: nvmeFNACrypto, nsid: 1, formatFails: true}
	d = nvmeDrive(t, f, 4<<20)
	p, err = Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method == MethodNVMeFormatCryptoErase || p.Method == MethodNVMeFormatUserDataErase || len(p.Tried) != 2 || len(f.formats) != 2 {
		t.Fatalf("proof %+v after %d formats", p, len(f.formats))
	}
	for i, m := range []Method{MethodNVMeFormatCryptoErase, MethodNVMeFormatUserDataErase} {
		if !strings.HasPrefix(p.Tried[i], string(m)+": erasing") || !strings.Contains(p.Tried[i], "format NVM") {
			t.Errorf("tried %q", p.Tried)
		}
	}
}

// No format is offered by a controller without Format NVM (OACS), nor where the namespace's
// NSID is not had; a controller that erases nothing keeps no admin transport.
func TestNVMeFormatOnlyWhereOffered(t *testing.T) {
	f := &fakeNVMe{fna: nvmeFNACrypto, nsid: 1}
	d := nvmeDrive(t, f, 1<<20)
	if d.Caps.NVMeFormatCryptoErase || d.Caps.NVMeFormatUserDataErase || d.admin != nil {
		t.Fatalf("without OACS Format NVM: caps %+v", d.Caps)
	}
	if err := d.Erase(context.Background(), MethodNVMeFormatUserDataErase); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("format without a controller: %v", err)
	}
	for _, nsid := range []func() (uint32, error){
		func() (uint32, error) { return 0, errors.New("ENOTTY") },
		func() (uint32, error) { return 0, nil },
		func() (uint32, error) { return nvmeNSIDAll, nil },
	} {
		f := &fakeNVMe{oacs: nvmeOACSFormat, fna: nvmeFNACrypto, nsid: 1}
		f.disk = disk(t, 1<<20)
		d := open(t, f.disk)
		nvmeCapabilities(d, &d.Caps, f.admin, nsid)
		if d.Caps.NVMeFormatCryptoErase || d.Caps.NVMeFormatUserDataErase || d.admin != nil || len(f.formats) != 0 {
			t.Fatalf("without the namespace's NSID: caps %+v", d.Caps)
		}
	}
}
