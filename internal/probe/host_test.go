package probe

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestCollectThisMachine runs the collectors against the real kernel (root "/") and checks them
// against independent sources: the Go runtime and nproc for CPUs, /proc/meminfo for memory.
func TestCollectThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the probe reads Linux /sys and /proc")
	}
	r, err := Collect(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	threads := 0
	for _, c := range r.CPUs {
		threads += c.Threads
		if c.Cores < 1 || c.Cores > c.Threads {
			t.Errorf("socket %d: %d cores for %d threads", c.Socket, c.Cores, c.Threads)
		}
	}
	// The probe counts online CPUs; runtime.NumCPU and nproc count the ones this process may run
	// on. They agree unless a cpuset restricts the test process.
	want := runtime.NumCPU()
	if allowed := allowedCPUs(t); allowed != onlineCPUs(t) {
		t.Logf("process restricted to %d of %d online CPUs; comparing with online", allowed, onlineCPUs(t))
		want = onlineCPUs(t)
	}
	if threads != want {
		t.Errorf("probe counted %d CPU threads, runtime.NumCPU says %d", threads, want)
	}
	if out, err := exec.Command("nproc").Output(); err == nil {
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		if n != runtime.NumCPU() {
			t.Errorf("nproc %d != runtime.NumCPU %d", n, runtime.NumCPU())
		}
	}

	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var kb int64
	for _, line := range strings.Split(string(meminfo), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			kb, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if kb == 0 || r.MemoryBytes != kb*1024 {
		t.Errorf("probe reported %d bytes of memory, /proc/meminfo MemTotal is %d kB", r.MemoryBytes, kb)
	}
	if r.System.Architecture == "" {
		t.Error("no architecture")
	}
	if err := (&Report{Version: ReportVersion, SystemUUID: "x", System: r.System, CPUs: r.CPUs, MemoryBytes: r.MemoryBytes,
		NICs: r.NICs, BlockDevices: r.BlockDevices, PCIDevices: r.PCIDevices}).Validate(); err != nil {
		t.Errorf("this machine's report does not validate: %v", err)
	}
	t.Logf("this machine: %d sockets, %d threads, %d MiB, %d NICs, %d disks, %d PCI functions",
		len(r.CPUs), threads, r.MemoryBytes>>20, len(r.NICs), len(r.BlockDevices), len(r.PCIDevices))
}

func onlineCPUs(t *testing.T) int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Skipf("no /sys/devices/system/cpu/online: %v", err)
	}
	ids, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return len(ids)
}

func allowedCPUs(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			ids, err := parseCPUList(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return len(ids)
		}
	}
	return runtime.NumCPU()
}
