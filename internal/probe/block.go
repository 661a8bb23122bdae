package probe

import "strings"

// skippedBlockPrefixes are kernel-made devices that are not disks.
var skippedBlockPrefixes = []string{"loop", "ram", "zram", "dm-"}

// collectBlockDevices reads /sys/block; partitions are not listed there, only whole devices.
func collectBlockDevices(fs sysfs) []BlockDevice {
	var out []BlockDevice
	for _, name := range fs.list("sys/block") {
		if hasAnyPrefix(name, skippedBlockPrefixes) {
			continue
		}
		dir := "sys/block/" + name + "/"
		sectors, _ := fs.readInt(dir + "size")
		if sectors <= 0 {
			continue // an empty optical or card-reader slot, not a disk
		}
		rot, _ := fs.readInt(dir + "queue/rotational")
		rem, _ := fs.readInt(dir + "removable")
		out = append(out, BlockDevice{
			Name: name,
			// size is always in 512-byte sectors, whatever the logical block size.
			SizeBytes:  sectors * 512,
			Vendor:     fs.read(dir + "device/vendor"),
			Model:      fs.read(dir + "device/model"),
			Serial:     cmpOr(fs.read(dir+"device/serial"), fs.read(dir+"serial")),
			Rotational: rot == 1,
			Removable:  rem == 1,
		})
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// collectPCIDevices reads /sys/bus/pci/devices.
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
