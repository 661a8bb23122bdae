package probe

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// logicalCPU is one hardware thread with what is known about it.
type logicalCPU struct {
	id     int
	socket int
	core   string // unique within the socket
	vendor string
	model  string
	maxMHz int
}

// collectCPUs groups the online logical CPUs by socket. The set of CPUs comes from
// /sys/devices/system/cpu/online (what the kernel schedules on, which is what nproc counts on an
// unrestricted process); topology from sysfs, else /proc/cpuinfo; model names from /proc/cpuinfo.
//
// Not ghw's cpu package: it needs both the per-CPU sysfs directories and /proc/cpuinfo, counts
// cores by core_id alone, passes on a physical_package_id of -1 (which Validate refuses), names
// the ARM implementer only for 0x41 (the registry also knows 0xc0) and has no frequency.
func collectCPUs(fs sysfs) []CPU {
	infos := parseCPUInfo(fs.read("proc/cpuinfo"))
	ids, err := parseCPUList(fs.read("sys/devices/system/cpu/online"))
	if err != nil || len(ids) == 0 {
		ids = nil
		for _, name := range fs.list("sys/devices/system/cpu") {
			if n, ok := strings.CutPrefix(name, "cpu"); ok {
				if id, err := strconv.Atoi(n); err == nil {
					ids = append(ids, id)
				}
			}
		}
	}
	if len(ids) == 0 {
		for id := range infos {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)

	bySocket := map[int][]logicalCPU{}
	for _, id := range ids {
		c := logicalCPU{id: id}
		info := infos[id]
		dir := fmt.Sprintf("sys/devices/system/cpu/cpu%d/", id)
		if v, ok := fs.readInt(dir + "topology/physical_package_id"); ok && v >= 0 {
			c.socket = int(v)
		} else if v, err := strconv.Atoi(info["physical id"]); err == nil {
			c.socket = v
		}
		// core_id is only unique within a die, so the die is part of the core's name.
		if v, ok := fs.readInt(dir + "topology/core_id"); ok {
			die, _ := fs.readInt(dir + "topology/die_id")
			c.core = fmt.Sprintf("%d/%d", die, v)
		} else if v := info["core id"]; v != "" {
			c.core = "0/" + v
		} else {
			c.core = "cpu" + strconv.Itoa(id) // nothing says which threads share a core
		}
		c.vendor = firstOf(info, "vendor_id", "CPU implementer")
		c.model = firstOf(info, "model name", "Processor", "cpu model", "cpu")
		if khz, ok := fs.readInt(dir + "cpufreq/cpuinfo_max_freq"); ok && khz > 0 {
			c.maxMHz = int(khz / 1000)
		} else if mhz, err := strconv.ParseFloat(info["cpu MHz"], 64); err == nil {
			// Current, not maximum, speed: the best there is without cpufreq (VMs).
			c.maxMHz = int(math.Round(mhz))
		}
		bySocket[c.socket] = append(bySocket[c.socket], c)
	}

	sockets := make([]int, 0, len(bySocket))
	for s := range bySocket {
		sockets = append(sockets, s)
	}
	slices.Sort(sockets)
	var out []CPU
	for _, s := range sockets {
		threads := bySocket[s]
		cores := map[string]bool{}
		cpu := CPU{Socket: s, Threads: len(threads)}
		for _, t := range threads {
			cores[t.core] = true
			cpu.Vendor = cmpOr(cpu.Vendor, t.vendor)
			cpu.Model = cmpOr(cpu.Model, t.model)
			cpu.MaxMHz = max(cpu.MaxMHz, t.maxMHz)
		}
		cpu.Cores = len(cores)
		out = append(out, cpu)
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func firstOf(m map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := m[k]; v != "" {
			return v
		}
	}
	return ""
}

// parseCPUInfo splits /proc/cpuinfo into one key/value map per "processor" block, keyed by the
// processor number. Lines before the first processor (ARM puts model lines at the end, some
// kernels at the start) apply to every processor that lacks them.
func parseCPUInfo(text string) map[int]map[string]string {
	out := map[int]map[string]string{}
	shared := map[string]string{}
	var cur map[string]string
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			if strings.TrimSpace(line) == "" {
				cur = nil
			}
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "processor" {
			id, err := strconv.Atoi(v)
			if err != nil {
				// s390 and old ARM say "Processor : <name>" here.
				shared["Processor"] = v
				continue
			}
			cur = map[string]string{}
			out[id] = cur
			continue
		}
		if cur != nil {
			cur[k] = v
		} else {
			shared[k] = v
		}
	}
	for _, m := range out {
		for k, v := range shared {
			if _, ok := m[k]; !ok {
				m[k] = v
			}
		}
	}
	return out
}

// parseCPUList parses the kernel's CPU list format, e.g. "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("cpu list %q: bad range", s)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
