package probe

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// FixtureDir, under a root other than "/", holds what a fixture tree cannot express as
// sysfs files: FixtureAddresses (one "<interface> <ip>[/<prefix>]" per line) and FixtureLLDP
// (the output of `lldpctl -f json`).
const (
	FixtureDir       = "metalprobe"
	FixtureAddresses = FixtureDir + "/addresses"
	FixtureLLDP      = FixtureDir + "/lldp.json"
)

// Options say where and how to collect.
type Options struct {
	// Root is the file system root to read /sys and /proc under (default "/"). Only with "/"
	// are the running kernel's addresses and lldpctl asked; other roots are fixture trees.
	Root string
	// LLDPCommand is the lldpctl to run under root "/" (default "lldpctl", looked up on PATH;
	// absent means no neighbours).
	LLDPCommand string
	// Logger receives what could not be read; missing files are normal and only logged at V(1).
	Logger logr.Logger
}

func (o Options) withDefaults() Options {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.LLDPCommand == "" {
		o.LLDPCommand = "lldpctl"
	}
	return o
}

// live reports whether the root is the running system rather than a fixture tree.
func (o Options) live() bool { return filepath.Clean(o.Root) == "/" }

// Collect reads the machine's hardware. Missing files are tolerated (a field stays empty): a
// partial report is worth more than none on odd hardware.
func Collect(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	if st, err := os.Stat(o.Root); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("collecting hardware: root %q is not a directory", o.Root)
	}
	fs := sysfs{root: o.Root, log: o.Logger}
	r := &Report{Version: ReportVersion}
	r.System = collectSystem(fs, o.live())
	r.CPUs = collectCPUs(fs)
	r.MemoryBytes = collectMemory(fs)
	nics, err := collectNICs(fs, o.live())
	if err != nil {
		return nil, err
	}
	r.NICs = nics
	neighbors, err := collectLLDP(ctx, fs, o)
	if err != nil {
		// LLDP is a nice-to-have: a broken lldpd must not stop discovery.
		o.Logger.Info("LLDP neighbours unavailable", "error", err.Error())
	}
	for i := range r.NICs {
		r.NICs[i].Neighbors = neighbors[r.NICs[i].Name]
	}
	if r.BlockDevices, err = collectBlockDevices(ctx, fs); err != nil {
		// As with any unreadable section, the rest of the report is still worth sending.
		o.Logger.Info("block devices unavailable", "error", err.Error())
	}
	r.PCIDevices = collectPCIDevices(fs)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("collecting hardware: %w", err)
	}
	return r, nil
}

// sysfs reads small text files under a root.
type sysfs struct {
	root string
	log  logr.Logger
}

func (f sysfs) path(p string) string { return filepath.Join(f.root, p) }

// read returns the trimmed content of a file, "" when it is missing or unreadable (many sysfs
// attributes are root-only or fail with EINVAL when a link is down).
func (f sysfs) read(p string) string {
	b, err := os.ReadFile(f.path(p))
	if err != nil {
		f.log.V(1).Info("not readable", "path", p, "error", err.Error())
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readInt returns the integer in a file and whether there was one.
func (f sysfs) readInt(p string) (int64, bool) {
	s := f.read(p)
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		f.log.V(1).Info("not an integer", "path", p, "value", s)
		return 0, false
	}
	return n, true
}

// list returns the names in a directory (nil when missing).
func (f sysfs) list(p string) []string {
	entries, err := os.ReadDir(f.path(p))
	if err != nil {
		f.log.V(1).Info("not listable", "path", p, "error", err.Error())
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func (f sysfs) exists(p string) bool {
	_, err := os.Stat(f.path(p))
	return err == nil
}

func collectSystem(fs sysfs, live bool) System {
	const dmi = "sys/class/dmi/id/"
	s := System{
		UUID:        strings.ToLower(fs.read(dmi + "product_uuid")),
		Vendor:      fs.read(dmi + "sys_vendor"),
		Product:     fs.read(dmi + "product_name"),
		Serial:      fs.read(dmi + "product_serial"),
		BIOSVersion: fs.read(dmi + "bios_version"),
		// /proc/sys/kernel/arch is uname -m without a syscall, so fixtures can carry it.
		Architecture: fs.read("proc/sys/kernel/arch"),
	}
	if s.Architecture == "" && live {
		s.Architecture = unameMachine(runtime.GOARCH)
	}
	return s
}

// unameMachine maps GOARCH to the kernel's name for the same machine.
func unameMachine(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	default:
		return goarch
	}
}

// collectMemory reads MemTotal, not ghw's memory: its TotalPhysicalBytes counts online memory
// blocks (or a syslog line), more than MemTotal, which leaves out what the firmware and kernel
// keep; its TotalUsableBytes is MemTotal, but only after that block walk and syslog scan.
func collectMemory(fs sysfs) int64 {
	for _, line := range strings.Split(fs.read("proc/meminfo"), "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0
		}
		// The kernel always prints kB (meaning KiB) here.
		if len(fields) > 1 && fields[1] != "kB" {
			fs.log.Info("unexpected MemTotal unit", "unit", fields[1])
		}
		return n * 1024
	}
	return 0
}
