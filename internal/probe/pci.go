package probe

import (
	"os"
	"path/filepath"
	"regexp"

	"github.com/jaypipes/pcidb"
	pcitypes "github.com/jaypipes/pcidb/types"
)

// pciAddress matches a PCI function's sysfs name, domain:bus:device.function.
var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

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
// pciutils' path, plain or gzipped); nil when there is none. Never fetched over the network:
// a discovery must not depend on reaching the internet.
func pciNames(root string) *pcitypes.DB {
	for _, p := range []string{"usr/share/hwdata/pci.ids", "usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids.gz", "usr/share/misc/pci.ids.gz"} {
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
