package erase

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

func openExclusive(path string, block bool) (*os.File, error) {
	flags := os.O_RDWR
	if block {
		// O_EXCL on a block device: refused while mounted or held by another exclusive opener.
		flags |= unix.O_EXCL
	}
	return os.OpenFile(path, flags, 0)
}

// capabilities reads what the device offers: a block device's discard limit in sysfs, an NVMe
// controller's sanitize and format, an sd disk's sanitize or security erase. A file's discard is a punched hole, which most Linux
// filesystems make; where one does not, the discard fails and the plan's next method runs.
func capabilities(d *Device) Capabilities {
	if !d.block {
		return Capabilities{Discard: true}
	}
	c := Capabilities{Block: true, ZeroOut: true}
	if nvmeNamespace(filepath.Base(d.Path)) {
		// Only the kernel's whole NVMe namespaces are asked: no other driver gets an NVMe
		// ioctl, and a sanitize or format through a partition would erase its whole disk.
		nvmeCapabilities(d, &c, ioctlAdmin(d.file), func() (uint32, error) { return nvmeNSID(d.file) })
	}
	var st unix.Stat_t
	if unix.Fstat(int(d.file.Fd()), &st) == nil {
		dev := "/sys/dev/block/" + strconv.Itoa(int(unix.Major(st.Rdev))) + ":" + strconv.Itoa(int(unix.Minor(st.Rdev)))
		if b, err := os.ReadFile(filepath.Join(dev, "queue", "discard_max_bytes")); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			c.Discard = n > 0
		} else if b, err := os.ReadFile(filepath.Join(dev, "..", "queue", "discard_max_bytes")); err == nil {
			// A partition: the queue is its disk's.
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			c.Discard = n > 0
		}
		// Only whole sd disks are asked (sgTarget): no other driver gets a SCSI or ATA command.
		sgCapabilities(d, &c, dev, sgExec(d.file))
	}
	return c
}

func (d *Device) discard(off, n int64) error {
	if !d.block {
		return unix.Fallocate(int(d.file.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	}
	return rangeIoctl(d.file, unix.BLKDISCARD, off, n)
}

func (d *Device) zeroOut(off, n int64) error { return rangeIoctl(d.file, unix.BLKZEROOUT, off, n) }

// rangeIoctl issues a block ioctl that takes a {start, length} range in bytes.
func rangeIoctl(f *os.File, req uint, off, n int64) error {
	r := [2]uint64{uint64(off), uint64(n)}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(unsafe.Pointer(&r))); errno != 0 {
		return errno
	}
	return nil
}

// dropCache evicts the device's clean pages, so the read-back asks the device.
func dropCache(d *Device) {
	_ = unix.Fadvise(int(d.file.Fd()), 0, 0, unix.FADV_DONTNEED)
	if d.block {
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, d.file.Fd(), uintptr(unix.BLKFLSBUF), 0)
	}
}

// nvmeIoctlAdminCmd is NVME_IOCTL_ADMIN_CMD: _IOWR('N', 0x41, struct nvme_admin_cmd);
// nvmeIoctlID is NVME_IOCTL_ID: _IO('N', 0x40), the NSID of the namespace opened.
const (
	nvmeIoctlAdminCmd = 0xC0484E41
	nvmeIoctlID       = 0x4E40
)

// nvmeNSID is the NSID of the NVMe namespace f is opened on.
func nvmeNSID(f *os.File) (uint32, error) {
	id, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlID, 0)
	if errno != 0 {
		return 0, errno
	}
	return uint32(id), nil
}

// ioctlAdmin sends NVMe admin commands through the kernel's NVMe driver.
func ioctlAdmin(f *os.File) nvmeAdmin {
	return func(cmd *nvmeCommand, data []byte) error {
		if len(data) > 0 {
			cmd.Addr = uint64(uintptr(unsafe.Pointer(&data[0])))
			cmd.DataLen = uint32(len(data))
		}
		status, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(cmd)))
		runtime.KeepAlive(data)
		if errno != 0 {
			return errno
		}
		if status != 0 {
			// The command ran and the controller answered an error status (the ioctl's
			// return value; cmd.Result is the completion's command-specific dword).
			return fmt.Errorf("NVMe status %#x", status)
		}
		return nil
	}
}
