// Package erase is the cleaning agent's disk sanitization and its proof: it erases one disk (a
// block device, or a file standing in for one) by the best method this build can carry out on
// it, then reads back blocks sampled across the whole device and says whether they hold what
// the method leaves, not what was there before.
//
// Methods, best first: the drive's own sanitize, crypto erase before block erase (an NVMe
// controller's Sanitize through the kernel's admin ioctl; a SCSI disk's SANITIZE, or a SATA
// drive's SANITIZE DEVICE in ATA PASS-THROUGH, through SG_IO on whole sd disks), the kernel's
// discard and zero-out, an overwrite. ATA security erase is not carried out: a drive without
// the SANITIZE feature set gets the kernel's methods.
//
// It owns the methods, their choice, the sampling and the per-disk Proof. It must not decide
// whether a server is cleaned (the controller does, from the proofs reported), must not shell
// out to nvme-cli, hdparm or sg_sanitize, and must not touch any device it was not given.
package erase
