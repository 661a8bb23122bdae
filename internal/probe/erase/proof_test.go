package erase

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// disk is a file of size random bytes standing in for a disk that holds a tenant's data.
func disk(t *testing.T, size int) string {
	t.Helper()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string) *Device {
	t.Helper()
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// nonZeroMiB says which MiB of the file at path hold anything but zeros.
func nonZeroMiB(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for off := 0; off < len(b); off += 1 << 20 {
		if !allZero(b[off:min(off+1<<20, len(b))]) {
			out = append(out, off>>20)
		}
	}
	return out
}

// Every byte of the file is gone after an overwrite, and the proof says how and that the
// read-back held.
func TestOverwriteErasesEveryByteAndSaysSo(t *testing.T) {
	path := disk(t, 24<<20+512) // a size no block or chunk divides
	d := open(t, path)
	p, err := Sanitize(context.Background(), d, Options{Methods: []Method{MethodOverwrite}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method != MethodOverwrite || p.Failure != "" || p.SizeBytes != 24<<20+512 {
		t.Fatalf("proof %+v", p)
	}
	if p.Samples < DefaultSamples || p.End.Before(p.Start) {
		t.Errorf("proof samples %d, start %s, end %s", p.Samples, p.Start, p.End)
	}
	if left := nonZeroMiB(t, path); len(left) != 0 {
		t.Fatalf("data left in MiB %v", left)
	}
}

// A file's discard punches a hole over all of it: what reads back is no longer the data.
func TestDiscardOfAFileLeavesNothingReadable(t *testing.T) {
	path := disk(t, 8<<20)
	d := open(t, path)
	if !d.Caps.Discard || d.Caps.Block {
		t.Fatalf("a regular file's capabilities: %+v", d.Caps)
	}
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified {
		t.Fatalf("proof %+v", p)
	}
	if p.Method != MethodDiscard {
		// The filesystem under the test's directory makes no holes: the plan went on.
		t.Logf("discard refused here (%v); erased by %s", p.Tried, p.Method)
	}
	if left := nonZeroMiB(t, path); len(left) != 0 {
		t.Fatalf("data left in MiB %v", left)
	}
}

// A disk whose erase did not take is caught by the read-back, whichever method was claimed.
func TestReadBackCatchesADiskThatKeptItsData(t *testing.T) {
	d := open(t, disk(t, 4<<20))
	for _, m := range []Method{MethodOverwrite, MethodDiscard, MethodZeroOut} {
		offsets, err := sampleOffsets(d.Size, 64, m)
		if err != nil {
			t.Fatal(err)
		}
		before, err := d.fingerprint(offsets)
		if err != nil {
			t.Fatal(err)
		}
		// Nothing erased: the drive acknowledged and did nothing.
		bad, err := d.verify(m, offsets, before)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(bad, "sampled blocks") || !strings.Contains(bad, string(m)) {
			t.Errorf("%s: read-back of an untouched disk said %q", m, bad)
		}
	}
}

// A metadata wipe zeroes both ends, where partition tables and signatures live, leaves the
// middle alone, and says it was a metadata wipe.
func TestMetadataWipeZeroesBothEndsOnly(t *testing.T) {
	path := disk(t, 16<<20)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := open(t, path)
	p, err := Sanitize(context.Background(), d, Options{Methods: []Method{MethodMetadata}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method != MethodMetadata {
		t.Fatalf("proof %+v", p)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !allZero(got[:MetadataBytes]) || !allZero(got[len(got)-MetadataBytes:]) {
		t.Error("an end still holds data")
	}
	if !bytes.Equal(got[MetadataBytes:len(got)-MetadataBytes], orig[MetadataBytes:len(got)-MetadataBytes]) {
		t.Error("the middle changed")
	}
}

// A zero-out is the kernel's for block devices: on a file it fails, and the proof names it
// among the methods tried before the one that held.
func TestAFailedMethodIsNamedAndTheNextRuns(t *testing.T) {
	path := disk(t, 2<<20)
	d := open(t, path)
	p, err := Sanitize(context.Background(), d, Options{Methods: []Method{MethodZeroOut, MethodOverwrite}})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verified || p.Method != MethodOverwrite || len(p.Tried) != 1 || !strings.Contains(p.Tried[0], "ZeroOut") {
		t.Fatalf("proof %+v", p)
	}
}

// A canceled cleaning stops writing and says so, instead of proving anything.
func TestCanceledOverwriteReturnsTheError(t *testing.T) {
	d := open(t, disk(t, 4<<20))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Sanitize(ctx, d, Options{Methods: []Method{MethodOverwrite}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestOpenRefusesWhatIsNoDisk(t *testing.T) {
	if _, err := Open(t.TempDir()); err == nil {
		t.Fatal("a directory opened as a disk")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing path opened")
	}
}

func TestSampleOffsets(t *testing.T) {
	const size = 64 << 20
	for _, m := range []Method{MethodOverwrite, MethodMetadata} {
		offs, err := sampleOffsets(size, 32, m)
		if err != nil {
			t.Fatal(err)
		}
		if offs[0] != 0 || offs[len(offs)-1] != size-SampleBytes {
			t.Errorf("%s: first %d and last %d, want both ends", m, offs[0], offs[len(offs)-1])
		}
		for i, o := range offs {
			if o%SampleBytes != 0 || o < 0 || o > size-SampleBytes || (i > 0 && o <= offs[i-1]) {
				t.Fatalf("%s: offsets not aligned, in bounds, sorted and distinct: %v", m, offs)
			}
			if m == MethodMetadata && o >= MetadataBytes && o < size-MetadataBytes {
				t.Fatalf("metadata sample at %d, outside both ends", o)
			}
		}
		if len(offs) < 32 {
			t.Errorf("%s: %d samples, want at least 32", m, len(offs))
		}
	}
}
