package erase

// Method is how a disk is erased. The values are what a Proof reports and must never change.
type Method string

const (
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
}

// Plan lists the methods for a full erase of a device with c, best first: the next one is
// tried where one fails or its read-back does not hold.
func Plan(c Capabilities) []Method {
	var out []Method
	if c.Discard {
		out = append(out, MethodDiscard)
	}
	if c.Block && c.ZeroOut {
		out = append(out, MethodZeroOut)
	}
	return append(out, MethodOverwrite)
}
