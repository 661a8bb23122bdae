package netboot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The emulated machines' disks are sparse files, one per disk of the machine's Hardware, under
// the work directory, kept across boots as a machine's disks are: a claimed server's OS boot
// writes its tenant's data into them (Options.TenantData) and a cleaning boot's agent erases
// them for real, by the same code that erases a real disk.

// tenantSpots are where an OS boot writes its tenant's data on each disk: the start (the
// partition table and a filesystem's superblock), the middle and the last block.
func tenantSpots(size int64) []int64 { return []int64{0, size / 2 / 4096 * 4096, size - 4096} }

func (n *Netboot) diskDir(uuid string) string {
	return filepath.Join(n.opts.WorkDir, "disks", strings.ToLower(uuid))
}

// ensureDisks creates the machine's disk files that do not exist yet, empty.
func (n *Netboot) ensureDisks(hw Hardware) (string, error) {
	dir := n.diskDir(hw.UUID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating the disks of %s: %w", hw.UUID, err)
	}
	for _, d := range hw.Disks {
		path := filepath.Join(dir, d.Name)
		if _, err := os.Lstat(path); err == nil {
			continue
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return "", fmt.Errorf("creating disk %s of %s: %w", d.Name, hw.UUID, err)
		}
		err = f.Truncate(d.Sectors * 512)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("sizing disk %s of %s: %w", d.Name, hw.UUID, err)
		}
	}
	return dir, nil
}

// tenantBlock is what a tenant's OS leaves in one spot of a disk.
func tenantBlock(uuid, disk string) []byte {
	line := []byte(fmt.Sprintf("tenant data of %s on %s\n", uuid, disk))
	return bytes.Repeat(line, 4096/len(line)+1)[:4096]
}

// writeTenantData plays a claimed server's OS writing to every one of its disks.
func (n *Netboot) writeTenantData(hw Hardware) error {
	dir, err := n.ensureDisks(hw)
	if err != nil {
		return err
	}
	for _, d := range hw.Disks {
		f, err := os.OpenFile(filepath.Join(dir, d.Name), os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("writing tenant data on %s of %s: %w", d.Name, hw.UUID, err)
		}
		for _, off := range tenantSpots(d.Sectors * 512) {
			if _, err = f.WriteAt(tenantBlock(hw.UUID, d.Name), off); err != nil {
				break
			}
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("writing tenant data on %s of %s: %w", d.Name, hw.UUID, err)
		}
	}
	return nil
}

// TenantData names the disks of the machine with the UUID that still hold a tenant's data in
// any spot an OS boot wrote to (none for a machine whose disks were never written).
func (n *Netboot) TenantData(uuid string) ([]string, error) {
	entries, err := os.ReadDir(n.diskDir(uuid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	buf := make([]byte, 4096)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		f, err := os.Open(filepath.Join(n.diskDir(uuid), e.Name()))
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		for _, off := range tenantSpots(st.Size()) {
			if _, err := f.ReadAt(buf, off); err == nil && bytes.Contains(buf, []byte("tenant data of")) {
				out = append(out, e.Name())
				break
			}
		}
		f.Close()
	}
	return out, nil
}

// BreakDisk makes a disk of the machine with the UUID one that cannot be opened (the kernel
// lists it, nothing can write it), as a failed drive: a cleaning must name it.
func (n *Netboot) BreakDisk(uuid, disk string) error {
	dir := n.diskDir(uuid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, disk)
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	return os.Mkdir(path, 0o755)
}

// DiskNames lists the disk files of the machine with the UUID (none before its first OS or
// cleaning boot).
func (n *Netboot) DiskNames(uuid string) ([]string, error) {
	entries, err := os.ReadDir(n.diskDir(uuid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out, err
}
