package probe

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/jaypipes/pcidb"
	pcitypes "github.com/jaypipes/pcidb/types"
)

// pciAddress matches a PCI function's sysfs name, domain:bus:device.function.
var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// collectPCIDevices reads /sys/bus/pci/devices.
//
// Not ghw's pci package: v0.25.0 loads pci.ids ignoring both the chroot and WithPCIDB (the
// host's, $HOME/.cache first, or the network when PCIDB_ENABLE_NETWORK_FETCH is set), fails
// when it finds none, and returns no device at all when one lacks a modalias file.
func collectPCIDevices(fs sysfs) []PCIDevice {
	var out []PCIDevice
	names := pciNames(fs.root)
	for _, addr := range fs.list("sys/bus/pci/devices") {
		dir := "sys/bus/pci/devices/" + addr + "/"
		d := PCIDevice{
			Address: addr,
			Vendor:  hexID(fs.read(dir + "vendor")),
			Device:  hexID(fs.read(dir + "device")),
			Class:   hexID(fs.read(dir + "class")),
			Driver:  fs.linkBase(dir + "driver"),
		}
		d.name(names)
		out = append(out, d)
	}
	return out
}

func hexID(s string) string {
	s = strings.ToLower(s)
	s, _ = strings.CutPrefix(s, "0x")
	return s
}

// linkBase is the last element of a symlink's target ("" when p is not a link): sysfs says
// which bus device backs a NIC, and which driver a device is bound to, by symlinks.
func (f sysfs) linkBase(p string) string {
	target, err := os.Readlink(f.path(p))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// pciNames opens the pci.ids database the discovery OS ships under root (hwdata's or
// pciutils' path, plain or gzipped, or the copy the discovery ignition puts beside the token
// for the probe's container, which has none of its own); nil when there is none. Never fetched over the network:
// a discovery must not depend on reaching the internet. Each path is given as is, since
// pcidb's own search tries $HOME/.cache/pci.ids first, outside any root.
func pciNames(root string) *pcitypes.DB {
	for _, p := range []string{"usr/share/hwdata/pci.ids", "usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids.gz", "usr/share/misc/pci.ids.gz", "etc/metalprobe/pci.ids"} {
		full := filepath.Join(root, p)
		if _, err := os.Stat(full); err != nil {
			continue
		}
		noFetch := false
		db, err := pcidb.New(pcidb.WithPath(full), &pcitypes.WithOption{EnableNetworkFetch: &noFetch})
		if err == nil {
			return db
		}
	}
	return nil
}

// name fills in the vendor's and device's names from db.
func (d *PCIDevice) name(db *pcitypes.DB) {
	if db == nil {
		return
	}
	if v, ok := db.Vendors[d.Vendor]; ok {
		d.VendorName = v.Name
	}
	if p, ok := db.Products[d.Vendor+d.Device]; ok {
		d.DeviceName = p.Name
	}
}
