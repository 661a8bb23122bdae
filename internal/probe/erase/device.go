package erase

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Device is one disk opened for erasing: a block device or a regular file standing in for one.
type Device struct {
	Path  string
	Size  int64
	Caps  Capabilities
	file  *os.File
	block bool
	// admin sends NVMe admin commands to the device's controller (nil: not NVMe); nsid is the
	// namespace's, which a format takes.
	admin nvmeAdmin
	nsid  uint32
	// scsi sends SCSI commands to an sd disk (nil: not asked); sat: the disk is an ATA one behind
	// a SCSI/ATA translation layer, sanitized by ATA commands passed through.
	scsi scsiExec
	sat  bool
	// ataPasswordRefused: the drive refused ATASecurityPassword once; it is not asked again, its
	// password attempts being few.
	ataPasswordRefused error
}

// ErrUnsupported says the device cannot be erased by the method asked.
var ErrUnsupported = errors.New("method not supported by the device")

// Open opens path for erasing, exclusively where it is a block device (a device something has
// mounted or holds open exclusively is refused by the kernel, not by this package).
func Open(path string) (*Device, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	block := fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
	if !block && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is neither a block device nor a regular file", path)
	}
	f, err := openExclusive(path, block)
	if err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("size of %s: %w", path, err)
	}
	d := &Device{Path: path, Size: size, file: f, block: block}
	d.Caps = capabilities(d)
	return d, nil
}

// Close closes the device.
func (d *Device) Close() error { return d.file.Close() }

// Erase erases the whole device by m (MethodMetadata: its metadata regions only) and makes
// sure what it wrote reached the device, and that later reads come from it, not from the
// page cache.
func (d *Device) Erase(ctx context.Context, m Method) error {
	var err error
	switch m {
	case MethodNVMeCryptoErase, MethodNVMeBlockErase:
		if d.admin == nil {
			return fmt.Errorf("%s: %w", m, ErrUnsupported)
		}
		action := uint32(nvmeSanactCrypto)
		if m == MethodNVMeBlockErase {
			action = nvmeSanactBlock
		}
		err = nvmeSanitize(ctx, d.admin, action)
	case MethodSCSICryptoErase, MethodSCSIBlockErase:
		if d.scsi == nil || d.sat {
			return fmt.Errorf("%s: %w", m, ErrUnsupported)
		}
		action := byte(scsiSanactCrypto)
		if m == MethodSCSIBlockErase {
			action = scsiSanactBlock
		}
		err = scsiSanitize(ctx, d.scsi, action)
	case MethodATACryptoScramble, MethodATABlockErase:
		if d.scsi == nil || !d.sat {
			return fmt.Errorf("%s: %w", m, ErrUnsupported)
		}
		feature := uint16(ataCryptoScrambleExt)
		if m == MethodATABlockErase {
			feature = ataBlockEraseExt
		}
		err = ataSanitize(ctx, d.scsi, feature)
	case MethodNVMeFormatCryptoErase, MethodNVMeFormatUserDataErase:
		if d.admin == nil || d.nsid == 0 {
			return fmt.Errorf("%s: %w", m, ErrUnsupported)
		}
		ses := uint32(nvmeSESCrypto)
		if m == MethodNVMeFormatUserDataErase {
			ses = nvmeSESUserData
		}
		err = nvmeFormat(ctx, d.admin, d.nsid, ses)
	case MethodATASecurityEraseEnhanced, MethodATASecurityErase:
		if d.scsi == nil || !d.sat {
			return fmt.Errorf("%s: %w", m, ErrUnsupported)
		}
		if err = d.ataPasswordRefused; err == nil {
			err = ataSecurityErase(ctx, d.scsi, m == MethodATASecurityEraseEnhanced, d.Size)
			d.notePasswordRefused(err)
		}
	case MethodDiscard:
		err = d.discard(0, d.Size)
	case MethodZeroOut:
		if !d.block {
			return fmt.Errorf("%s: %w", m, ErrUnsupported)
		}
		err = d.zeroOut(0, d.Size)
	case MethodOverwrite:
		err = d.overwrite(ctx, 0, d.Size)
	case MethodMetadata:
		for _, r := range metadataRegions(d.Size) {
			if err = d.overwrite(ctx, r.off, r.len); err != nil {
				break
			}
		}
	default:
		return fmt.Errorf("%s: %w", m, ErrUnsupported)
	}
	if err != nil {
		return fmt.Errorf("erasing %s by %s: %w", d.Path, m, err)
	}
	if err := d.file.Sync(); err != nil {
		return fmt.Errorf("flushing %s: %w", d.Path, err)
	}
	dropCache(d)
	return nil
}

// ready readies the device for m before its blocks are sampled: a SATA drive an interrupted
// security erase left locked (with ATASecurityPassword) is unlocked, so that it can be read.
func (d *Device) ready(m Method) error {
	if (m != MethodATASecurityEraseEnhanced && m != MethodATASecurityErase) || d.scsi == nil || !d.sat {
		return nil
	}
	if d.ataPasswordRefused != nil {
		return d.ataPasswordRefused
	}
	err := ataUnlock(d.scsi)
	d.notePasswordRefused(err)
	return err
}

func (d *Device) notePasswordRefused(err error) {
	if errors.Is(err, errATAPasswordRefused) {
		d.ataPasswordRefused = fmt.Errorf("not asked again, as it has few password attempts: %w", err)
	}
}

// chunk is how much one write of an overwrite covers.
const chunk = 1 << 20

var zeros = make([]byte, chunk)

func (d *Device) overwrite(ctx context.Context, off, n int64) error {
	for end := off + n; off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		w := min(int64(chunk), end-off)
		if _, err := d.file.WriteAt(zeros[:w], off); err != nil {
			return err
		}
		off += w
	}
	return nil
}

// MetadataBytes is how much of each end MethodMetadata zeroes: the protective MBR and primary
// GPT, filesystem superblocks near the start (ext4 at 1 KiB, XFS at 0, btrfs at 64 KiB), and the
// backup GPT, MD RAID 0.9/1.0 superblocks and ZFS labels near the end.
const MetadataBytes = 4 << 20

type region struct{ off, len int64 }

// metadataRegions are the ranges MethodMetadata zeroes on a device of size bytes.
func metadataRegions(size int64) []region {
	if size <= 2*MetadataBytes {
		return []region{{0, size}}
	}
	return []region{{0, MetadataBytes}, {size - MetadataBytes, MetadataBytes}}
}
