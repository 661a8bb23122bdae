package erase

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// loopDevice attaches the file at path to a free loop device and returns the device's path: a
// real block device, so the kernel's ioctls (BLKDISCARD, BLKZEROOUT, O_EXCL) are what is tested.
// Without the right to make loop devices (not root, or a container without them) the test is
// skipped; the machine make test runs on has it.
func loopDevice(t *testing.T, path string) string {
	t.Helper()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no loop devices here: %v", err)
	}
	defer ctl.Close()
	backing, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer backing.Close()
	for range 8 { // another process may take the free device between the two calls
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			t.Skipf("no free loop device: %v", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("opening %s: %v", dev, err)
		}
		err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_SET_FD, int(backing.Fd()))
		if errors.Is(err, unix.EBUSY) {
			f.Close()
			continue
		}
		if err != nil {
			f.Close()
			t.Fatalf("attaching %s to %s: %v", path, dev, err)
		}
		t.Cleanup(func() {
			_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
			f.Close()
		})
		return dev
	}
	t.Fatal("no loop device stayed free")
	return ""
}

// On a real block device each full method leaves the backing file all zeros and the proof says
// the read-back held; the device is opened exclusively while it is erased.
func TestSanitizeALoopDevice(t *testing.T) {
	for _, m := range []Method{MethodDiscard, MethodZeroOut, MethodOverwrite} {
		t.Run(string(m), func(t *testing.T) {
			path := disk(t, 16<<20)
			dev := loopDevice(t, path)
			d := open(t, dev)
			if !d.Caps.Block || !d.Caps.ZeroOut {
				t.Fatalf("capabilities of %s: %+v, want a block device that zeroes", dev, d.Caps)
			}
			if d.Size != 16<<20 {
				t.Fatalf("size %d", d.Size)
			}
			if _, err := os.OpenFile(dev, os.O_RDWR|unix.O_EXCL, 0); err == nil {
				t.Fatal("a second exclusive open of the device being erased succeeded")
			}
			if m == MethodDiscard && !d.Caps.Discard {
				t.Skip("this kernel's loop devices take no discards")
			}
			p, err := Sanitize(context.Background(), d, Options{Methods: []Method{m}})
			if err != nil {
				t.Fatal(err)
			}
			if !p.Verified || p.Method != m || p.Failure != "" {
				t.Fatalf("proof %+v", p)
			}
			if got := nonZeroMiB(t, path); len(got) != 0 {
				t.Fatalf("MiB %v of the backing file still hold data after %s", got, m)
			}
		})
	}
}

// The plan for a loop device starts with a discard where the kernel offers one, and the first
// method that holds is the one the proof names.
func TestDefaultPlanOnALoopDevice(t *testing.T) {
	path := disk(t, 8<<20)
	d := open(t, loopDevice(t, path))
	p, err := Sanitize(context.Background(), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Plan(d.Caps)[0]
	if !p.Verified || p.Method != want || len(p.Tried) != 0 {
		t.Fatalf("proof %+v, want %s verified at once", p, want)
	}
	if got := nonZeroMiB(t, path); len(got) != 0 {
		t.Fatalf("MiB %v still hold data", got)
	}
}
