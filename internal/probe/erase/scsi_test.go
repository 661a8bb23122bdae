package erase

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// The header is Linux's struct sg_io_hdr byte for byte, on 64-bit and 32-bit alike.
func TestSgIOHdrLayout(t *testing.T) {
	var h sgIOHdr
	ptr := unsafe.Sizeof(uintptr(0))
	want := map[string]uintptr{"size": 88, "dxfer_len": 12, "dxferp": 16, "cmdp": 24, "sbp": 32, "timeout": 40,
		"usr_ptr": 56, "status": 64, "sb_len_wr": 67, "host_status": 68, "driver_status": 70, "resid": 72, "info": 80}
	if ptr == 4 {
		want = map[string]uintptr{"size": 64, "dxfer_len": 12, "dxferp": 16, "cmdp": 20, "sbp": 24, "timeout": 28,
			"usr_ptr": 40, "status": 44, "sb_len_wr": 47, "host_status": 48, "driver_status": 50, "resid": 52, "info": 60}
	}
	got := map[string]uintptr{"size": unsafe.Sizeof(h), "dxfer_len": unsafe.Offsetof(h.DxferLen), "dxferp": unsafe.Offsetof(h.Dxferp),
		"cmdp": unsafe.Offsetof(h.Cmdp), "sbp": unsafe.Offsetof(h.Sbp), "timeout": unsafe.Offsetof(h.Timeout),
		"usr_ptr": unsafe.Offsetof(h.UsrPtr), "status": unsafe.Offsetof(h.Status), "sb_len_wr": unsafe.Offsetof(h.SbLenWr),
		"host_status": unsafe.Offsetof(h.HostStatus), "driver_status": unsafe.Offsetof(h.DriverStatus),
		"resid": unsafe.Offsetof(h.Resid), "info": unsafe.Offsetof(h.Info)}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("sg_io_hdr %s: %d, want %d", name, got[name], w)
		}
	}
}

func TestSCSICDBs(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want []byte
	}{
		{"SANITIZE crypto erase, IMMED, AUSE", scsiSanitizeCDB(scsiSanactCrypto), []byte{0x48, 0xA3, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"SANITIZE block erase, IMMED, AUSE", scsiSanitizeCDB(scsiSanactBlock), []byte{0x48, 0xA2, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"SANITIZE exit failure mode", scsiSanitizeCDB(scsiSanactExitFail), []byte{0x48, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"REPORT SUPPORTED OPERATION CODES for SANITIZE/03h", rsocCDB(scsiSanactCrypto, 32),
			[]byte{0xA3, 0x0C, 0x02, 0x48, 0x00, 0x03, 0, 0, 0, 32, 0, 0}},
		{"REQUEST SENSE, fixed format", requestSenseCDB(), []byte{0x03, 0, 0, 0, 252, 0}},
	} {
		if !bytes.Equal(tc.got, tc.want) {
			t.Errorf("%s: % x, want % x", tc.name, tc.got, tc.want)
		}
	}
}

// fixedSense builds fixed-format sense data as SPC-4 lays it out.
func fixedSense(key, asc, ascq byte) []byte {
	b := make([]byte, 18)
	b[0], b[2], b[7], b[12], b[13] = 0x70, key, 10, asc, ascq
	return b
}

// descSense builds descriptor-format sense data with the descriptors given.
func descSense(key, asc, ascq byte, descs ...[]byte) []byte {
	b := []byte{0x72, key, asc, ascq, 0, 0, 0, 0}
	for _, d := range descs {
		b = append(b, d...)
	}
	b[7] = byte(len(b) - 8)
	return b
}

func TestParseSense(t *testing.T) {
	ata := []byte{0x09, 0x0C, 0x01, 0x00, 0x80, 0x00, 0, 0xFF, 0, 0xFF, 0, 0, 0x40, 0x50}
	withProgress := fixedSense(senseNotReady, 0x04, 0x1B)
	withProgress[15], withProgress[16], withProgress[17] = 0x80, 0x40, 0x00
	for _, tc := range []struct {
		name    string
		in      []byte
		want    senseData
		wantErr bool
	}{
		{"fixed, sanitize in progress", withProgress, senseData{key: senseNotReady, asc: 0x04, ascq: 0x1B}, false},
		{"fixed, deferred, medium error", append([]byte{0x71}, fixedSense(senseMediumError, 0x31, 0x03)[1:]...),
			senseData{key: senseMediumError, asc: 0x31, ascq: 0x03, deferred: true}, false},
		{"fixed, VALID, ATA registers", []byte{0xF0, 0, 0x01, 0x00, 0x50, 0x40, 0x02, 10, 0x80, 0x11, 0x22, 0x33, 0x00, 0x1D},
			senseData{key: senseRecoveredError, asc: 0x00, ascq: 0x1D, infoValid: true, information: [4]byte{0, 0x50, 0x40, 0x02},
				csi: [4]byte{0x80, 0x11, 0x22, 0x33}}, false},
		{"fixed, short additional length: no ASC", []byte{0x70, 0, 0x06, 0, 0, 0, 0, 0}, senseData{key: senseUnitAttention}, false},
		{"descriptor, no descriptors", descSense(senseNoSense, 0, 0), senseData{descriptor: true}, false},
		{"descriptor, deferred", append([]byte{0x73}, descSense(senseAbortedCommand, 0, 0)[1:]...),
			senseData{key: senseAbortedCommand, descriptor: true, deferred: true}, false},
		{"descriptor, ATA status return after another",
			descSense(senseRecoveredError, 0x00, 0x1D, []byte{0x02, 0x06, 0, 0, 0x80, 0x12, 0x34, 0}, ata),
			senseData{key: senseRecoveredError, asc: 0x00, ascq: 0x1D, descriptor: true, ataStatus: ata}, false},
		{"descriptor overrunning its length", []byte{0x72, 1, 0, 0x1D, 0, 0, 0, 4, 0x09, 0x0C, 0, 0}, senseData{}, true},
		{"empty", nil, senseData{}, true},
		{"unknown response code", []byte{0x7F, 0, 0, 0, 0, 0, 0, 0}, senseData{}, true},
		{"fixed, truncated", []byte{0x70, 0, 0x02}, senseData{}, true},
	} {
		got, err := parseSense(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v", tc.name, err)
			continue
		}
		if tc.wantErr {
			continue
		}
		if got.key != tc.want.key || got.asc != tc.want.asc || got.ascq != tc.want.ascq || got.deferred != tc.want.deferred ||
			got.descriptor != tc.want.descriptor || got.infoValid != tc.want.infoValid || got.information != tc.want.information ||
			got.csi != tc.want.csi || !bytes.Equal(got.ataStatus, tc.want.ataStatus) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	var cc *checkCondition
	if err := checkConditionError(fixedSense(senseMediumError, 0x31, 0x03)); !errors.As(err, &cc) ||
		!strings.Contains(err.Error(), "MEDIUM ERROR") || !strings.Contains(err.Error(), "SANITIZE COMMAND FAILED") {
		t.Errorf("check condition error %v", err)
	}
}

// fakeSCSI plays a SCSI disk behind SG_IO: it checks every CDB byte by byte (what it cannot
// take it rejects, and notes in bad), answers REPORT SUPPORTED OPERATION CODES for SANITIZE, and
// a SANITIZE erases the file standing in for its media, then reports SANITIZE IN PROGRESS to a
// few REQUEST SENSE before it is done (or failed).
type fakeSCSI struct {
	disk          string
	crypto, block bool
	fail          bool // the sanitize fails
	forever       bool // the sanitize never ends
	descriptor    bool // REQUEST SENSE answers descriptor-format sense data
	unitAttention bool // the first REQUEST SENSE reports a unit attention
	onPoll        func(n int)

	sanitized []byte // the service actions of the SANITIZE commands taken
	polls     int
	running   bool
	exited    bool // EXIT FAILURE MODE was taken
	bad       []string
}

func (f *fakeSCSI) reject(format string, args ...any) ([]byte, error) {
	f.bad = append(f.bad, fmt.Sprintf(format, args...))
	sense := fixedSense(senseIllegalRequest, 0x24, 0x00)
	return sense, checkConditionError(sense)
}

func (f *fakeSCSI) exec(cdb []byte, dir int, data []byte, _ time.Duration) ([]byte, error) {
	if len(cdb) == 0 {
		return f.reject("empty CDB")
	}
	switch cdb[0] {
	case scsiOpMaintenanceIn:
		if len(cdb) != 12 || cdb[1] != 0x0C || cdb[2] != 0x02 || cdb[3] != 0x48 || cdb[10] != 0 || cdb[11] != 0 ||
			dir != sgDxferFromDev || int(binary.BigEndian.Uint32(cdb[6:])) != len(data) {
			return f.reject("REPORT SUPPORTED OPERATION CODES % x (%d, %d bytes)", cdb, dir, len(data))
		}
		support := byte(0x01) // not supported
		if sa := binary.BigEndian.Uint16(cdb[4:]); (sa == 3 && f.crypto) || (sa == 2 && f.block) {
			support = 0x03
		}
		copy(data, []byte{0, support, 0, 10, 0x48, 0xFF, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0x07})
	case scsiOpSanitize:
		sa := cdb[1] & 0x1F
		if sa == 0x1F && len(cdb) == 10 && cdb[1] == 0x1F && bytes.Equal(cdb[2:], make([]byte, 8)) && dir == sgDxferNone && data == nil {
			if !f.running || !f.fail {
				sense := fixedSense(senseIllegalRequest, 0x24, 0x00)
				return sense, checkConditionError(sense)
			}
			f.running, f.exited = false, true
			return nil, nil
		}
		if len(cdb) != 10 || cdb[1]&0x80 == 0 || cdb[1]&0x20 == 0 || cdb[1]&0x40 != 0 || (sa != 2 && sa != 3) ||
			!bytes.Equal(cdb[2:], make([]byte, 8)) || dir != sgDxferNone || data != nil {
			return f.reject("SANITIZE % x (%d, %d bytes)", cdb, dir, len(data))
		}
		if (sa == 3 && !f.crypto) || (sa == 2 && !f.block) {
			sense := fixedSense(senseIllegalRequest, 0x24, 0x00)
			return sense, checkConditionError(sense)
		}
		f.sanitized, f.running, f.polls = append(f.sanitized, sa), true, 0
		if !f.fail {
			return nil, mediaErased(f.disk, sa == scsiSanactCrypto)
		}
	case scsiOpRequestSense:
		if len(cdb) != 6 || cdb[1]&^0x01 != 0 || cdb[2] != 0 || cdb[3] != 0 || int(cdb[4]) != len(data) || cdb[5] != 0 ||
			dir != sgDxferFromDev || len(data) < 18 {
			return f.reject("REQUEST SENSE % x (%d, %d bytes)", cdb, dir, len(data))
		}
		f.polls++
		if f.polls > 1000 {
			return nil, errors.New("polled on and on")
		}
		if f.onPoll != nil {
			f.onPoll(f.polls)
		}
		key, asc, ascq := byte(senseNoSense), byte(0), byte(0)
		switch {
		case f.unitAttention && f.polls == 1:
			key, asc, ascq = senseUnitAttention, 0x29, 0x00
		case f.running && (f.forever || f.polls <= 3):
			key, asc, ascq = senseNotReady, 0x04, 0x1B
		case f.running && f.fail:
			key, asc, ascq = senseMediumError, 0x31, 0x03
		}
		sense := fixedSense(key, asc, ascq)
		if f.descriptor {
			sense = descSense(key, asc, ascq)
		}
		copy(data, sense)
	default:
		return f.reject("opcode %02xh", cdb[0])
	}
	return nil, nil
}

// mediaErased leaves the file at path as a drive's sanitize leaves its media: noise after a
// crypto erase (the old data read through a new key), zeros after a block erase.
func mediaErased(path string, crypto bool) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if crypto {
		noise := make([]byte, fi.Size())
		if _, err := rand.Read(noise); err != nil {
			return err
		}
		return os.WriteFile(path, noise, 0o600)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return err
	}
	return os.Truncate(path, fi.Size())
}

// sysfsDisk makes a sysfs-like tree for a block device at devPath (under devices/) whose SCSI
// device has vendor, and returns its /sys/dev/block/M:m link.
func sysfsDisk(t *testing.T, devPath, vendor string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "devices", devPath)
	scsiDev := filepath.Dir(filepath.Dir(dir)) // .../H:C:T:L/block/sdX
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scsiDev, "vendor"), []byte(vendor+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(scsiDev, filepath.Join(dir, "device")); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "dev", "block", "8:0")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	return link
}

const (
	sasDisk  = "pci0000:00/0000:00:01.0/0000:01:00.0/host0/port-0:0/end_device-0:0/target0:0:0/0:0:0:0/block/sda"
	sataDisk = "pci0000:00/0000:00:17.0/ata1/host1/target1:0:0/1:0:0:0/block/sdb"
)

func TestSgTargetAsksWholeSdDisksOnly(t *testing.T) {
	if v, ok := sgTarget(sysfsDisk(t, sasDisk, "SEAGATE ")); !ok || v != "SEAGATE" {
		t.Errorf("SAS disk: %q %v", v, ok)
	}
	if v, ok := sgTarget(sysfsDisk(t, sataDisk, "ATA     ")); !ok || v != "ATA" {
		t.Errorf("SATA disk: %q %v", v, ok)
	}
	if _, ok := sgTarget(sysfsDisk(t, "pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdc", "Kingston")); ok {
		t.Error("a USB disk is asked")
	}
	if _, ok := sgTarget(sysfsDisk(t, "pci0000:00/0000:00:1d.0/0000:03:00.0/nvme/nvme0/x/block/nvme0n1", "ATA")); ok {
		t.Error("an NVMe namespace is asked")
	}
	part := sysfsDisk(t, sataDisk, "ATA")
	dir, err := filepath.EvalSymlinks(part)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "partition"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := sgTarget(part); ok {
		t.Error("a partition is asked")
	}
	if _, ok := sgTarget(filepath.Join(t.TempDir(), "8:0")); ok {
		t.Error("a missing device is asked")
	}
}

func TestSCSISanitizeSupportedReadsTheSupportField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply []byte
		err   error
		want  bool
	}{
		{"supported", []byte{0, 0x03, 0, 10, 0x48}, nil, true},
		{"supported, vendor specific, CTDP and CDLP set", []byte{0, 0x80 | 0x08 | 0x05, 0, 10, 0x48}, nil, true},
		{"not supported", []byte{0, 0x01, 0, 10, 0x48}, nil, false},
		{"not currently available", []byte{0, 0x00, 0, 10, 0x48}, nil, false},
		{"reserved support value", []byte{0, 0x07, 0, 10, 0x48}, nil, false},
		{"another command's data", []byte{0, 0x03, 0, 16, 0x88}, nil, false},
		{"all-commands format", []byte{0, 0, 0x01, 0x03, 0x48, 0, 0, 0x03}, nil, false},
		{"command refused", nil, checkConditionError(fixedSense(senseIllegalRequest, 0x20, 0)), false},
	} {
		exec := func(cdb []byte, dir int, data []byte, _ time.Duration) ([]byte, error) {
			copy(data, tc.reply)
			return nil, tc.err
		}
		if got := scsiSanitizeSupported(exec, scsiSanactCrypto); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}

func fastPoll(t *testing.T) {
	old := scsiSanitizePoll
	scsiSanitizePoll = time.Millisecond
	t.Cleanup(func() { scsiSanitizePoll = old })
}

// scsiDisk opens a file standing in for a SCSI disk that f plays, its capabilities detected
// as an sd disk's would be.
func scsiDisk(t *testing.T, f *fakeSCSI, size int) *Device {
	t.Helper()
	f.disk = disk(t, size)
	d := open(t, f.disk)
	sgCapabilities(d, &d.Caps, sysfsDisk(t, sasDisk, "SEAGATE"), f.exec)
	return d
}

// A SAS disk that offers SANITIZE is sanitized by it first, crypto erase before block erase:
// the agent waits past a unit attention and SANITIZE IN PROGRESS until REQUEST SENSE reports
// nothing, and the read-back proves no sampled block holds what it held.
func TestSCSISanitizeIsTriedFirstAndProven(t *testing.T) {
	fastPoll(t)
	for _, descriptor := range []bool{false, true} {
		f := &fakeSCSI{crypto: true, block: true, descriptor: descriptor, unitAttention: true}
		d := scsiDisk(t, f, 8<<20)
		if plan := Plan(d.Caps); len(plan) < 2 || plan[0] != MethodSCSICryptoErase || plan[1] != MethodSCSIBlockErase {
			t.Fatalf("plan %v", plan)
		}
		p, err := Sanitize(context.Background(), d, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Verified || p.Method != MethodSCSICryptoErase || len(p.Tried) != 0 {
			t.Fatalf("descriptor sense %v: proof %+v", descriptor, p)
		}
		if !bytes.Equal(f.sanitized, []byte{scsiSanactCrypto}) || f.polls != 4 || len(f.bad) != 0 {
			t.Fatalf("sanitized %v after %d polls; rejected %q", f.sanitized, f.polls, f.bad)
		}
	}
}

// A sanitize the disk reports failed (SANITIZE COMMAND FAILED) is left by EXIT FAILURE MODE, so
// that the disk takes I/O again, and the next method runs; the proof says what failed and why.
func TestSCSISanitizeFailureFallsBack(t *testing.T) {
	fastPoll(t)
	f := &fakeSCSI{block: true, fail: true}
	d := scsiDisk(t, f, 4<<20)
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method == MethodSCSIBlockErase || len(p.Tried) != 1 || !f.exited || len(f.bad) != 0 {
		t.Fatalf("proof %+v, failure mode left %v; rejected %q", p, f.exited, f.bad)
	}
	if !strings.HasPrefix(p.Tried[0], "SCSIBlockErase: erasing") || !strings.Contains(p.Tried[0], "SANITIZE COMMAND FAILED") {
		t.Fatalf("tried %q", p.Tried)
	}
}

// A cancelled context ends the wait for a sanitize that does not end.
func TestSCSISanitizeWaitEndsWithTheContext(t *testing.T) {
	fastPoll(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fakeSCSI{crypto: true, forever: true, onPoll: func(n int) {
		if n == 2 {
			cancel()
		}
	}}
	d := scsiDisk(t, f, 1<<20)
	if _, err := Sanitize(ctx, d, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sanitize returned %v", err)
	}
}

// A disk without SANITIZE gets no SCSI method, and none is sent to a disk detected as SATA.
func TestSCSISanitizeOnlyWhereOffered(t *testing.T) {
	f := &fakeSCSI{}
	d := scsiDisk(t, f, 1<<20)
	if d.Caps.SCSICryptoErase || d.Caps.SCSIBlockErase || d.scsi != nil {
		t.Fatalf("caps %+v", d.Caps)
	}
	if err := d.Erase(context.Background(), MethodSCSICryptoErase); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("erase without SANITIZE: %v", err)
	}
	d.scsi, d.sat = f.exec, true
	if err := d.Erase(context.Background(), MethodSCSIBlockErase); !errors.Is(err, ErrUnsupported) || f.sanitized != nil {
		t.Fatalf("SCSI SANITIZE to a SATA drive: %v", err)
	}
}

// On an sd disk the drive's own sanitize comes before the kernel's methods, crypto first.
func TestPlanPutsSdSanitizeFirst(t *testing.T) {
	for _, tc := range []struct {
		c    Capabilities
		want []Method
	}{
		{Capabilities{Block: true, ZeroOut: true, SCSICryptoErase: true, SCSIBlockErase: true},
			[]Method{MethodSCSICryptoErase, MethodSCSIBlockErase, MethodZeroOut, MethodOverwrite}},
		{Capabilities{Block: true, Discard: true, ZeroOut: true, SCSIBlockErase: true},
			[]Method{MethodSCSIBlockErase, MethodDiscard, MethodZeroOut, MethodOverwrite}},
		{Capabilities{Block: true, Discard: true, ZeroOut: true, ATACryptoScramble: true, ATABlockErase: true},
			[]Method{MethodATACryptoScramble, MethodATABlockErase, MethodDiscard, MethodZeroOut, MethodOverwrite}},
	} {
		if got := Plan(tc.c); !slices.Equal(got, tc.want) {
			t.Errorf("Plan(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
}
