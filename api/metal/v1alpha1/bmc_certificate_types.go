package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BMCCertificate asks metalhub to put a certificate on the BMC's HTTPS service and renew it
// (metalhub's own field; metal-operator has none). The BMC makes the key (Redfish GenerateCSR),
// the request is signed through a Kubernetes CertificateSigningRequest for SignerName, and the
// certificate goes back with ReplaceCertificate. Once the BMC serves it, the operator verifies
// the BMC's TLS against CABundleRef alone (pinned per BMC), whatever the insecure annotation says.
// +kubebuilder:validation:XValidation:rule="has(self.signerName) != has(self.issuerRef)",message="exactly one of signerName or issuerRef must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.signerName) || has(self.caBundleRef)",message="caBundleRef is required with signerName"
type BMCCertificate struct {
	// SignerName of the Kubernetes CertificateSigningRequests made for the BMC (an approver and
	// a signer for it must run: the request waits for them). Exactly one of SignerName and
	// IssuerRef.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-z0-9.-]+/[a-zA-Z0-9._/-]+$`
	SignerName string `json:"signerName,omitempty"`
	// IssuerRef names a cert-manager Issuer or ClusterIssuer: the request is a cert-manager
	// CertificateRequest (cert-manager must be installed when the operator starts; it is
	// detected, not required otherwise).
	// +optional
	IssuerRef *CertManagerIssuerRef `json:"issuerRef,omitempty"`
	// CABundleRef names the signer's CA certificates (PEM) in a ConfigMap key; required with
	// SignerName. With IssuerRef it defaults to the CA cert-manager reports with the certificate.
	// The bundle in use is kept with the BMC's bookkeeping when the certificate is installed, so
	// a ConfigMap edited or gone does not unpin a BMC: a new bundle takes effect with the next
	// certificate.
	// +optional
	CABundleRef *CABundleReference `json:"caBundleRef,omitempty"`
	// Duration asked of the signer (the request's expirationSeconds); the signer may give less.
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
	// RenewBeforePercent renews the certificate when this share of its lifetime is left.
	// +optional
	// +kubebuilder:default=33
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=90
	RenewBeforePercent int32 `json:"renewBeforePercent,omitempty"`
	// CommonName of the certificate; the BMC's hostname or address when empty. The BMC's
	// hostname and address are always among its alternative names.
	// +optional
	CommonName string `json:"commonName,omitempty"`
	// Organization, OrganizationalUnit, City, State and Country of the subject: many BMCs refuse
	// a GenerateCSR without them (defaults: "metalhub", "BMC", "-", "-", "US").
	// +optional
	Organization string `json:"organization,omitempty"`
	// +optional
	OrganizationalUnit string `json:"organizationalUnit,omitempty"`
	// +optional
	City string `json:"city,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Z]{2}$`
	Country string `json:"country,omitempty"`
}

// CertManagerIssuerRef names the cert-manager issuer a BMC's CertificateRequests go to.
type CertManagerIssuerRef struct {
	// Name of the Issuer or ClusterIssuer.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Kind is Issuer (default) or ClusterIssuer.
	// +optional
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	Kind string `json:"kind,omitempty"`
	// Group of the issuer (default cert-manager.io; external issuers have their own).
	// +optional
	Group string `json:"group,omitempty"`
	// Namespace the CertificateRequests are made in: the Issuer's; any for a ClusterIssuer.
	// +required
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
}

// CABundleReference names a key of a ConfigMap.
type CABundleReference struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Key defaults to ca.crt.
	// +optional
	Key string `json:"key,omitempty"`
}

// BMCCertificateStatus reports the certificate metalhub installed on the BMC (metalhub's own
// field). It is a report: the bookkeeping lives on the object's annotations.
type BMCCertificateStatus struct {
	// SignerName that signed it.
	// +optional
	SignerName string `json:"signerName,omitempty"`
	// Issuer and Subject of the certificate (distinguished names).
	// +optional
	Issuer string `json:"issuer,omitempty"`
	// +optional
	Subject string `json:"subject,omitempty"`
	// SerialNumber, hex.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// RenewAfter is when the next certificate is requested.
	// +optional
	RenewAfter *metav1.Time `json:"renewAfter,omitempty"`
	// Pinned says the operator verifies the BMC's TLS against the signer's CA.
	// +optional
	Pinned bool `json:"pinned,omitempty"`
	// Request names the CertificateSigningRequest under way, if any.
	// +optional
	Request string `json:"request,omitempty"`
}

// ConditionCertificateReady on a BMC with spec.certificate: True while the certificate
// metalhub installed is served and not expired.
const ConditionCertificateReady = "CertificateReady"

// Reasons of ConditionCertificateReady.
const (
	// ReasonCertificateRequested: a CertificateSigningRequest waits for its approver and signer.
	ReasonCertificateRequested = "CertificateRequested"
	// ReasonCertificateDenied: the request was denied or failed; a new one is made when
	// spec.certificate changes.
	ReasonCertificateDenied = "CertificateDenied"
	// ReasonCertificateInstalled: installed, served and verified against the CA.
	ReasonCertificateInstalled = "CertificateInstalled"
	// ReasonCertificateNotServed: installed, but the BMC still serves another certificate (many
	// serve a new one only after a reset: the graceful-restart-bmc operation).
	ReasonCertificateNotServed = "CertificateNotServed"
	// ReasonCertificateExpiring: past its renewal time and not renewed yet.
	ReasonCertificateExpiring = "CertificateExpiring"
	// ReasonCertificateExpired: past its notAfter.
	ReasonCertificateExpired = "CertificateExpired"
	// ReasonCertificateUnsupported: the BMC has no CertificateService.
	ReasonCertificateUnsupported = "CertificateUnsupported"
	// ReasonCertificateInvalid: the CA bundle or the signed certificate is not usable (not PEM,
	// not for the BMC's key, not signed by the CA).
	ReasonCertificateInvalid = "CertificateInvalid"
	// ReasonCertificateFailed: a step failed on the BMC; it is tried again.
	ReasonCertificateFailed = "CertificateFailed"
)
