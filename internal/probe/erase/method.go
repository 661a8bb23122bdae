package erase

// Method is how a disk is erased. The values are what a Proof reports and must never change.
type Method string

const (
	// MethodNVMeCryptoErase has an NVMe controller change the media encryption key of every
	// namespace (NVMe Sanitize, crypto erase): what was written cannot be read back, including
	// blocks the controller keeps out of the OS's reach.
	MethodNVMeCryptoErase Method = "NVMeCryptoErase"
	// MethodNVMeBlockErase has an NVMe controller erase every block of its media (NVMe
	// Sanitize, block erase), overprovisioned ones included.
	MethodNVMeBlockErase Method = "NVMeBlockErase"
	// MethodSCSICryptoErase has a SCSI disk change the key its media is encrypted with (SBC
	// SANITIZE, cryptographic erase), blocks out of the OS's reach included.
	MethodSCSICryptoErase Method = "SCSICryptoErase"
	// MethodSCSIBlockErase has a SCSI disk erase every block of its media (SBC SANITIZE, block
	// erase), overprovisioned ones included.
	MethodSCSIBlockErase Method = "SCSIBlockErase"
	// MethodATACryptoScramble has a SATA drive change its internal encryption keys (ACS SANITIZE
	// DEVICE, CRYPTO SCRAMBLE EXT, through the SCSI/ATA translation layer).
	MethodATACryptoScramble Method = "ATACryptoScramble"
	// MethodATABlockErase has a SATA drive erase every block of its media (ACS SANITIZE DEVICE,
	// BLOCK ERASE EXT), overprovisioned ones included.
	MethodATABlockErase Method = "ATABlockErase"
	// MethodNVMeFormatCryptoErase has an NVMe controller format the namespace with its
	// current LBA format and a cryptographic erase (Format NVM, SES 2): for controllers without
	// Sanitize. Where the controller's FNA says secure erase applies to all namespaces, every
	// namespace of the subsystem is erased, as a Sanitize would.
	MethodNVMeFormatCryptoErase Method = "NVMeFormatCryptoErase"
	// MethodNVMeFormatUserDataErase has an NVMe controller format the namespace with its
	// current LBA format and a user data erase (Format NVM, SES 1).
	MethodNVMeFormatUserDataErase Method = "NVMeFormatUserDataErase"
	// MethodATASecurityEraseEnhanced has a SATA drive without SANITIZE erase itself by ACS
	// SECURITY ERASE UNIT in enhanced mode, which reaches reallocated sectors too, under the
	// password ATASecurityPassword, which the drive drops once erased.
	MethodATASecurityEraseEnhanced Method = "ATASecurityEraseEnhanced"
	// MethodATASecurityErase is SECURITY ERASE UNIT in normal mode: user data areas only.
	MethodATASecurityErase Method = "ATASecurityErase"
	// MethodZeroOut has the kernel write zeros over the whole device (BLKZEROOUT: the drive's
	// WRITE ZEROES where it has one). Block devices only.
	MethodZeroOut Method = "ZeroOut"
	// MethodDiscard unmaps every block (BLKDISCARD on a device; a punched hole in a file); what
	// reads back is the drive's business, so the proof only says the old data is gone.
	MethodDiscard Method = "Discard"
	// MethodOverwrite writes zeros through the page cache, block by block: slow, and what every
	// device allows.
	MethodOverwrite Method = "Overwrite"
	// MethodMetadata zeroes only where partition tables and filesystem, RAID and volume
	// signatures live (the first and last MetadataBytes), as wipefs would: not a sanitization.
	MethodMetadata Method = "Metadata"
)

// Capabilities are what a device offers for erasing.
type Capabilities struct {
	// Block: a block device (the kernel's ioctls apply); false for a regular file.
	Block bool
	// Discard: the device takes discards (a non-zero discard_max_bytes; a file's filesystem
	// punching holes).
	Discard bool
	// ZeroOut: the kernel zeroes ranges of it (every block device).
	ZeroOut bool
	// NVMeCryptoErase, NVMeBlockErase: an NVMe controller whose Sanitize does that (its
	// Identify Controller's SANICAP).
	NVMeCryptoErase, NVMeBlockErase bool
	// SCSICryptoErase, SCSIBlockErase: a SCSI disk whose SANITIZE does that (REPORT SUPPORTED
	// OPERATION CODES).
	SCSICryptoErase, SCSIBlockErase bool
	// ATACryptoScramble, ATABlockErase: a SATA drive whose SANITIZE DEVICE does that (its
	// IDENTIFY DEVICE data).
	ATACryptoScramble, ATABlockErase bool
	// NVMeFormatCryptoErase, NVMeFormatUserDataErase: an NVMe controller that formats (OACS)
	// with that secure erase (FNA says whether crypto), asked through a whole namespace.
	NVMeFormatCryptoErase, NVMeFormatUserDataErase bool
	// ATASecurityEraseEnhanced, ATASecurityErase: a SATA drive without SANITIZE whose Security
	// feature set is not frozen (IDENTIFY DEVICE word 128).
	ATASecurityEraseEnhanced, ATASecurityErase bool
}

// Plan lists the methods for a full erase of a device with c, best first: the drive's own
// sanitize (it reaches what the OS cannot), then its older erases (NVMe Format NVM with secure
// erase after Sanitize, as a fallback where Sanitize failed too; ATA Security Erase only where
// no ATA sanitize is offered, as it sets a password), then the kernel's discard and zero-out,
// then an overwrite; the next one is tried where one fails or its read-back does not hold.
func Plan(c Capabilities) []Method {
	var out []Method
	if c.NVMeCryptoErase {
		out = append(out, MethodNVMeCryptoErase)
	}
	if c.NVMeBlockErase {
		out = append(out, MethodNVMeBlockErase)
	}
	if c.NVMeFormatCryptoErase {
		out = append(out, MethodNVMeFormatCryptoErase)
	}
	if c.NVMeFormatUserDataErase {
		out = append(out, MethodNVMeFormatUserDataErase)
	}
	if c.SCSICryptoErase {
		out = append(out, MethodSCSICryptoErase)
	}
	if c.SCSIBlockErase {
		out = append(out, MethodSCSIBlockErase)
	}
	if c.ATACryptoScramble {
		out = append(out, MethodATACryptoScramble)
	}
	if c.ATABlockErase {
		out = append(out, MethodATABlockErase)
	}
	if !c.ATACryptoScramble && !c.ATABlockErase {
		if c.ATASecurityEraseEnhanced {
			out = append(out, MethodATASecurityEraseEnhanced)
		}
		if c.ATASecurityErase {
			out = append(out, MethodATASecurityErase)
		}
	}
	if c.Discard {
		out = append(out, MethodDiscard)
	}
	if c.Block && c.ZeroOut {
		out = append(out, MethodZeroOut)
	}
	return append(out, MethodOverwrite)
}
