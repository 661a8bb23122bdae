package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
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

// fakeNVMe plays an NVMe controller behind the admin ioctl: Identify answers its SANICAP, a
// Sanitize erases the file standing in for its namespace (punching it out, as a drive's erase
// leaves it unreadable) and runs for a few status reads, the status log reports progress.
type fakeNVMe struct {
	sanicap  uint32
	disk     string
	fail     bool
	commands []nvmeCommand
	polls    int
	exited   bool // Exit Failure Mode was sent
}

func (f *fakeNVMe) admin(cmd *nvmeCommand, data []byte) error {
	f.commands = append(f.commands, *cmd)
	switch cmd.Opcode {
	case nvmeOpIdentify:
		if cmd.CDW10 != 1 || len(data) != 4096 {
			return errors.New("bad identify")
		}
		binary.LittleEndian.PutUint32(data[nvmeSanicapOffset:], f.sanicap)
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
		return errors.New("unexpected opcode")
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
	sc, err := nvmeSanicap(f.admin)
	if err != nil {
		t.Fatal(err)
	}
	d.admin, d.Caps.NVMeCryptoErase, d.Caps.NVMeBlockErase = f.admin, sc&nvmeSanicapCrypto != 0, sc&nvmeSanicapBlock != 0
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
