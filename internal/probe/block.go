package probe

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/jaypipes/ghw"
	"github.com/jaypipes/ghw/pkg/util"
)

// skippedBlockPrefixes are kernel-made devices that are not disks.
var skippedBlockPrefixes = []string{"loop", "ram", "zram", "dm-"}

// diskFiles is what the probe reads of a disk itself, where ghw is silent or says it otherwise.
type diskFiles struct {
	// model is device/model: ghw takes the model from udev's database only (ID_MODEL, spaces
	// turned into underscores), so it has none where udev does not run, as in fixture trees.
	model string
	// serial is device/serial or serial (NVMe, virtio); ghw's serial comes from udev only.
	serial string
	// rotational is queue/rotational: ghw folds it into a drive type guessed from the name
	// (nvme and mmc always SSD, md and nbd unknown).
	rotational bool
	// wwid is the kernel's World Wide Name of the disk (wwid of NVMe namespaces, device/wwid
	// of SCSI disks): root device hints name disks by it; ghw's WWN comes from udev only.
	wwid string
}

// collectBlockDevices lists whole disks (ghw reads /sys/block, and udev's database where there
// is one), less the kernel's own devices.
func collectBlockDevices(ctx context.Context, fs sysfs) ([]BlockDevice, error) {
	info, err := ghw.Block(ghwArgs(ctx, fs)...)
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}
	var out []BlockDevice
	for _, d := range info.Disks {
		// Size 0 is an empty optical or card-reader slot, not a disk; sizes past int64 are garbage.
		if d.SizeBytes == 0 || d.SizeBytes > math.MaxInt64 || hasAnyPrefix(d.Name, skippedBlockPrefixes) {
			continue
		}
		dir := "sys/block/" + d.Name + "/"
		rot, _ := fs.readInt(dir + "queue/rotational")
		out = append(out, blockDevice(d, diskFiles{
			model:      fs.read(dir + "device/model"),
			serial:     cmpOr(fs.read(dir+"device/serial"), fs.read(dir+"serial")),
			rotational: rot == 1,
			wwid:       cmpOr(fs.read(dir+"wwid"), fs.read(dir+"device/wwid")),
		}))
	}
	return out, nil
}

// blockDevice maps a ghw disk and what the probe read of it onto the report.
func blockDevice(d *ghw.Disk, own diskFiles) BlockDevice {
	return BlockDevice{
		Name:       d.Name,
		SizeBytes:  int64(d.SizeBytes),
		Vendor:     known(d.Vendor),
		Model:      own.model,
		Serial:     cmpOr(own.serial, known(d.SerialNumber)),
		WWN:        cmpOr(own.wwid, known(d.WWN)),
		Rotational: own.rotational,
		Removable:  d.IsRemovable,
	}
}

// known is s, or "" for ghw's word for a value it could not read.
func known(s string) string {
	if s == util.UNKNOWN {
		return ""
	}
	return s
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
