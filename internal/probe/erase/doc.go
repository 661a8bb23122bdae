// Package erase is the cleaning agent's disk sanitization and its proof: it erases one disk (a
// block device, or a file standing in for one) by the best method this build can carry out on
// it, then reads back blocks sampled across the whole device and says whether they hold what
// the method leaves, not what was there before.
//
// Methods, best first: the drive's own sanitize, crypto erase before block erase (an NVMe
// controller's Sanitize through the kernel's admin ioctl; a SCSI disk's SANITIZE, or a SATA
// drive's SANITIZE DEVICE in ATA PASS-THROUGH, through SG_IO on whole sd disks); the drive's
// older erases (NVMe Format NVM with secure erase, also where a Sanitize failed; ATA SECURITY
// ERASE UNIT, enhanced first, only on a SATA drive without SANITIZE whose security is not
// frozen, under the published ATASecurityPassword, which lets a drive an interrupted erase left
// locked be unlocked); the kernel's discard and zero-out; an overwrite.
//
// It owns the methods, their choice, the sampling and the per-disk Proof. It must not decide
// whether a server is cleaned (the controller does, from the proofs reported), must not shell
// out to nvme-cli, hdparm or sg_sanitize, and must not touch any device it was not given.
package erase
