// Package certs puts a certificate on a BMC's HTTPS service through its CertificateService:
// reading the HTTPS certificates with their parsed fields, asking the BMC for a certificate
// signing request (GenerateCSR: the BMC makes the key and keeps it), and installing the
// certificate a CA signed for that request (ReplaceCertificate). The BMC keeps one pending key:
// only a certificate for the newest request fits, and the BMC refuses any other
// (ErrCertificateRefused).
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc.
package certs
