package bmcaccess

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// The certificate metalhub put on a BMC is bookkeeping on the BMC object (status is the report):
// which request is under way, what was installed, and whether the BMC's TLS is verified against
// the CA it was installed with. The Endpoint of a pinned BMC trusts that CA alone.
const (
	// CertificateAnnotation holds CertificateRecord as JSON.
	CertificateAnnotation = "lifecycle.metalhub.io/certificate"
	// CertificateCAAnnotation holds the CA bundle (PEM) the installed certificate was verified
	// against: the one a pinned BMC's TLS is verified against. Kept apart from the ConfigMap
	// that named it so an edit there does not unpin a BMC mid-flight.
	CertificateCAAnnotation = "lifecycle.metalhub.io/certificate-ca"
)

// CertificateRecord is the certificate bookkeeping of a BMC.
type CertificateRecord struct {
	// Attempt numbers the newest request (its CertificateSigningRequest is named for it). It is
	// written before the BMC is asked for a key, so a crash between the two asks again under the
	// same name and never leaves two requests outstanding.
	Attempt int `json:"attempt,omitempty"`
	// Requesting says attempt's request is under way (key, signature, install).
	Requesting bool `json:"requesting,omitempty"`
	// Signer is the signer of the attempt under way, or of the one installed.
	Signer string `json:"signer,omitempty"`
	// Spec is a digest of spec.certificate when the attempt began: a denied request is not
	// asked again until the spec changes.
	Spec   string `json:"spec,omitempty"`
	Denied bool   `json:"denied,omitempty"`
	// The certificate installed (none before the first install).
	Fingerprint string    `json:"fingerprint,omitempty"`
	Serial      string    `json:"serial,omitempty"`
	Issuer      string    `json:"issuer,omitempty"`
	Subject     string    `json:"subject,omitempty"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	NotAfter    time.Time `json:"notAfter,omitzero"`
	// Pinned: the BMC was seen serving the installed certificate, verified against the CA.
	Pinned bool `json:"pinned,omitempty"`
}

// CertificateRecordOf reads b's record (zero when none or unreadable: an unreadable record pins
// nothing and is written anew by the next attempt).
func CertificateRecordOf(b *metalv1alpha1.BMC) CertificateRecord {
	var rec CertificateRecord
	if v := b.Annotations[CertificateAnnotation]; v != "" {
		if err := json.Unmarshal([]byte(v), &rec); err != nil {
			return CertificateRecord{}
		}
	}
	return rec
}

// String is the annotation's value.
func (r CertificateRecord) String() string {
	out, _ := json.Marshal(r)
	return string(out)
}

// PinnedCA is the CA bundle b's TLS is verified against, nil when b is not pinned.
func PinnedCA(b *metalv1alpha1.BMC) []byte {
	ca := b.Annotations[CertificateCAAnnotation]
	if ca == "" || !CertificateRecordOf(b).Pinned {
		return nil
	}
	return []byte(ca)
}

// Fingerprint is the SHA-256 of a DER certificate, lower-case hex.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}
