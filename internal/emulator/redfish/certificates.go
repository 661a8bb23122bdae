package redfish

import (
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/certs"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/tlscert"
)

// Certificate actions in the recorder (Record.Certificate is the collection of a GenerateCSR,
// the certificate replaced by a ReplaceCertificate; Record.CommonName the subject's).
const (
	ActionGenerateCSR        = certs.ActionGenerateCSR
	ActionReplaceCertificate = certs.ActionReplaceCertificate
)

// Certificate is the HTTPS certificate the BMC serves to new TLS connections (with Options.TLS)
// and shows as its Certificate resource: first a self-signed one it makes itself, later the one
// ReplaceCertificate installed.
func (b *BMC) Certificate() *x509.Certificate {
	c, err := b.certs.Current()
	if err != nil {
		return nil
	}
	return c
}

// CertificatePEM is Certificate as PEM (the chain installed, leaf first).
func (b *BMC) CertificatePEM() string {
	p, _ := b.certs.CurrentPEM()
	return p
}

// StagedCertificate is a certificate installed that the BMC serves only from its next reset
// (Faults.CertificateNeedsReset); nil when none.
func (b *BMC) StagedCertificate() *x509.Certificate { return b.certs.Staged() }

// PendingCSRKey is the public key of the last GenerateCSR, still waiting for its certificate;
// nil when none.
func (b *BMC) PendingCSRKey() crypto.PublicKey { return b.certs.PendingKey() }

// CertificateURI is the @odata.id of the BMC's HTTPS certificate.
func (b *BMC) CertificateURI() string { return b.certs.CertificateURI() }

// CertificateCollectionURI is the @odata.id of the BMC's HTTPS certificate collection, the
// CertificateCollection a GenerateCSR names.
func (b *BMC) CertificateCollectionURI() string { return b.certs.Collection() }

// servingCertificate is what a new TLS connection to b's address gets: the certificate of the
// BMC that answers there (AnswerAs hands the whole address over, TLS included).
func (b *BMC) servingCertificate() (*tls.Certificate, error) {
	if o := b.answeredBy.Load(); o != nil && o != b {
		return o.servingCertificate()
	}
	return b.certs.Serving()
}

// tlsConfig serves b's current certificate, read for each new connection.
func (b *BMC) tlsConfig() *tls.Config { return tlscert.Config(b.servingCertificate) }

// certHost is the BMC as its CertificateService sees it.
type certHost struct{ b *BMC }

func (h certHost) Record(r *http.Request, action, certificate, commonName string) {
	h.b.em.rec.add(Record{Time: time.Now(), BMC: h.b.index, Address: h.b.url, Via: via(r, h.b), Action: action,
		Certificate: certificate, CommonName: commonName})
}

// routeCertificates serves the CertificateService, absent with NoCertificateService.
func (b *BMC) routeCertificates(w http.ResponseWriter, r *http.Request, segs []string, f *Faults) {
	if f.NoCertificateService {
		rfhttp.NotFound(w, r)
		return
	}
	b.certs.Route(w, r, segs, f)
}

// routeNetworkProtocol serves the manager's NetworkProtocol and, below it, its HTTPS
// certificates (segs after NetworkProtocol).
func (b *BMC) routeNetworkProtocol(w http.ResponseWriter, r *http.Request, segs []string, f *Faults) {
	np := v1 + "/Managers/" + b.managerID + "/NetworkProtocol"
	if len(segs) >= 2 && segs[0] == "HTTPS" && segs[1] == "Certificates" && !f.NoCertificateService {
		b.certs.RouteCollection(w, r, segs[2:])
		return
	}
	if len(segs) != 0 {
		rfhttp.NotFound(w, r)
		return
	}
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
	port := 0
	if u, err := url.Parse(b.url); err == nil {
		port, _ = strconv.Atoi(u.Port())
	}
	// The listener speaks one of the two, on the BMC's port.
	web := obj{"ProtocolEnabled": !b.em.opts.TLS}
	https := obj{"ProtocolEnabled": b.em.opts.TLS}
	if b.em.opts.TLS {
		https["Port"] = port
	} else {
		web["Port"] = port
	}
	if !f.NoCertificateService {
		https["Certificates"] = rfhttp.Link(np + "/HTTPS/Certificates")
	}
	ssh := obj{"ProtocolEnabled": b.SSHAddress() != ""}
	if p := b.sshPort(); p != 0 {
		ssh["Port"] = p
	}
	rfhttp.WriteJSON(w, http.StatusOK, obj{
		"@odata.type": "#ManagerNetworkProtocol.v1_5_0.ManagerNetworkProtocol", "@odata.id": np,
		"Id": "NetworkProtocol", "Name": "Manager Network Protocol", "HTTP": web, "HTTPS": https, "SSH": ssh,
	})
}

// CertificateState is the BMC's HTTPS certificate on the control API.
type CertificateState struct {
	Subject   string    `json:"subject"`
	Issuer    string    `json:"issuer"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	// Fingerprint is the SHA-256 of the certificate, hex.
	Fingerprint string `json:"fingerprint"`
	// Staged is the subject of a certificate installed for the BMC's next reset ("" when none).
	Staged string `json:"staged,omitempty"`
	// PendingKey says a GenerateCSR's key waits for its certificate.
	PendingKey bool   `json:"pendingKey"`
	PEM        string `json:"pem"`
}

// CertificateState snapshots the BMC's HTTPS certificate for the control API.
func (b *BMC) CertificateState() CertificateState {
	var st CertificateState
	if c := b.Certificate(); c != nil {
		sum := sha256.Sum256(c.Raw)
		st = CertificateState{Subject: c.Subject.String(), Issuer: c.Issuer.String(), NotBefore: c.NotBefore, NotAfter: c.NotAfter,
			Fingerprint: hex.EncodeToString(sum[:]), PEM: b.CertificatePEM()}
	}
	if s := b.StagedCertificate(); s != nil {
		st.Staged = s.Subject.String()
	}
	st.PendingKey = b.PendingCSRKey() != nil
	return st
}
