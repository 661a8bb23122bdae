package probe

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"slices"
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
	// Every Ethernet link iproute2 lists is a NIC of the report, with its MAC and MTU.
	out, err := exec.Command("ip", "-o", "link").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("ip -o link: %v (make test installs iproute2)", err)
		}
		t.Logf("no ip -o link (%v): NICs not compared", err)
	}
	nics := map[string]NIC{}
	for _, n := range r.NICs {
		nics[n.Name] = n
	}
	links := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(strings.ReplaceAll(line, "\\", " "))
		i := slices.Index(f, "link/ether")
		if len(f) < 2 || i < 0 || i+1 >= len(f) || f[i+1] == "00:00:00:00:00:00" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		links++
		n, ok := nics[name]
		mtu := ""
		if j := slices.Index(f, "mtu"); j >= 0 && j+1 < len(f) {
			mtu = f[j+1]
		}
		switch {
		case !ok:
			t.Errorf("ip -o link lists %s, the probe does not", name)
		case n.MAC != f[i+1] || strconv.Itoa(n.MTU) != mtu:
			t.Errorf("%s: probe MAC %s MTU %d, ip -o link %s mtu %s", name, n.MAC, n.MTU, f[i+1], mtu)
		}
	}
	if out != nil && links != len(r.NICs) {
		t.Errorf("ip -o link lists %d Ethernet links, the probe %d NICs", links, len(r.NICs))
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
