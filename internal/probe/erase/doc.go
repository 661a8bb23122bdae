// Package erase is the cleaning agent's disk sanitization and its proof: it erases one disk (a
// block device, or a file standing in for one) by the best method this build can carry out on
// it, then reads back blocks sampled across the whole device and says whether they hold what
// the method leaves, not what was there before.
//
// Methods, best first: an NVMe controller's own Sanitize (crypto or block erase, through the
// kernel's admin ioctl), the kernel's discard and zero-out, an overwrite. ATA security erase
// and SCSI SANITIZE are not carried out yet: such disks get the kernel's methods.
//
// It owns the methods, their choice, the sampling and the per-disk Proof. It must not decide
// whether a server is cleaned (the controller does, from the proofs reported), must not shell
// out to nvme-cli, hdparm or sg_sanitize, and must not touch any device it was not given.
package erase
