// Package certs is one emulated BMC's CertificateService and the certificate of its HTTPS
// service, as BMCs keep them: a self-signed certificate made at first use; GenerateCSR makes a
// real key pair and a PKCS#10 request for it, keeping the key as the one pending key (a second
// GenerateCSR replaces it, so a certificate signed for the first request no longer fits);
// ReplaceCertificate installs a certificate for the pending key (or one whose private key comes
// with it) and the BMC's TLS listener serves it from the next connection on, or, on BMCs that
// need it (faults.CertificateNeedsReset), from the BMC's next reset.
//
// What it needs of its BMC comes through Host; it must not import the emulator package.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/faults"
	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"github.com/metalhub/metalhub/internal/emulator/redfish/tlscert"
)

const v1 = rfhttp.V1

// Certificate actions in the recorder (Record.Certificate is the certificate collection of a
// GenerateCSR, the certificate replaced by a ReplaceCertificate; Record.CommonName the subject's).
const (
	ActionGenerateCSR        = "GenerateCSR"
	ActionReplaceCertificate = "ReplaceCertificate"
)

// Service is the URI of the CertificateService.
const Service = v1 + "/CertificateService"

// Host is what the CertificateService needs of its BMC.
type Host interface {
	// Record records a certificate action carried out for the request r.
	Record(r *http.Request, action, certificate, commonName string)
}

// cert is a certificate with its key, as served.
type cert struct {
	tls  tls.Certificate
	leaf *x509.Certificate
	pem  string // the chain, leaf first
}

// Store is one BMC's CertificateService and HTTPS certificate.
type Store struct {
	host       Host
	collection string // the HTTPS certificate collection
	hostName   string // what the first, self-signed certificate names

	mu      sync.Mutex
	current *cert         // served now (nil until first use)
	staged  *cert         // installed, served from the next reset (CertificateNeedsReset)
	pending crypto.Signer // the key of the last GenerateCSR, until a certificate for it is installed
	// failSet and failed count the GenerateCSRFailures spent of the faults in force.
	failSet *faults.Faults
	failed  int
}

// Init readies the store of a BMC whose manager is at managerPath and whose listener is on
// hostName (the host its first certificate names).
func (s *Store) Init(host Host, managerPath, hostName string) {
	s.host, s.hostName = host, hostName
	s.collection = managerPath + "/NetworkProtocol/HTTPS/Certificates"
}

// Collection is the URI of the HTTPS certificate collection.
func (s *Store) Collection() string { return s.collection }

// CertificateURI is the URI of the HTTPS certificate (one, kept across replacements).
func (s *Store) CertificateURI() string { return s.collection + "/1" }

// ensure makes the first, self-signed certificate; s.mu held.
func (s *Store) ensure() (*cert, error) {
	if s.current != nil {
		return s.current, nil
	}
	c, p, err := tlscert.SelfSigned(s.hostName)
	if err != nil {
		return nil, fmt.Errorf("generate the BMC's certificate: %w", err)
	}
	s.current = &cert{tls: c, leaf: c.Leaf, pem: string(p)}
	return s.current, nil
}

// Serving is the certificate the BMC's TLS listener presents to a new connection.
func (s *Store) Serving() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.ensure()
	if err != nil {
		return nil, err
	}
	return &c.tls, nil
}

// Current is the certificate served now, parsed.
func (s *Store) Current() (*x509.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.ensure()
	if err != nil {
		return nil, err
	}
	return c.leaf, nil
}

// CurrentPEM is the certificate served now, PEM (its chain, leaf first).
func (s *Store) CurrentPEM() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.ensure()
	if err != nil {
		return "", err
	}
	return c.pem, nil
}

// Staged is the certificate installed to be served from the BMC's next reset (nil when none).
func (s *Store) Staged() *x509.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staged == nil {
		return nil
	}
	return s.staged.leaf
}

// PendingKey is the public key of the last GenerateCSR still waiting for its certificate (nil
// when none).
func (s *Store) PendingKey() crypto.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return nil
	}
	return s.pending.Public()
}

// Reset is the BMC coming out of a reset: a staged certificate is served from now on.
func (s *Store) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staged != nil {
		s.current, s.staged = s.staged, nil
	}
}

// Route serves the CertificateService below /redfish/v1/CertificateService (segs after it):
// the service, its CertificateLocations and its two actions.
func (s *Store) Route(w http.ResponseWriter, r *http.Request, segs []string, f *faults.Faults) {
	switch {
	case len(segs) == 0:
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, s.serviceBody())
		}
	case len(segs) == 1 && segs[0] == "CertificateLocations":
		if rfhttp.MethodIs(w, r, http.MethodGet) {
			rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
				"@odata.type": "#CertificateLocations.v1_0_2.CertificateLocations", "@odata.id": Service + "/CertificateLocations",
				"Id": "CertificateLocations", "Name": "Certificate Locations",
				"Links": rfhttp.Obj{"Certificates": []rfhttp.Obj{rfhttp.Link(s.CertificateURI())}},
			})
		}
	case len(segs) == 2 && segs[0] == "Actions" && segs[1] == "CertificateService.GenerateCSR":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			s.generateCSR(w, r, f)
		}
	case len(segs) == 2 && segs[0] == "Actions" && segs[1] == "CertificateService.ReplaceCertificate":
		if rfhttp.MethodIs(w, r, http.MethodPost) {
			s.replace(w, r, f)
		}
	default:
		rfhttp.NotFound(w, r)
	}
}

// Key algorithms GenerateCSR takes, as TCG names them.
var (
	keyAlgorithms = []string{"TPM_ALG_ECDSA", "TPM_ALG_RSA"}
	keyCurves     = []string{"TPM_ECC_NIST_P256", "TPM_ECC_NIST_P384"}
	keyBits       = []int{2048, 3072, 4096}
)

func (s *Store) serviceBody() rfhttp.Obj {
	return rfhttp.Obj{
		"@odata.type": "#CertificateService.v1_0_4.CertificateService", "@odata.id": Service,
		"Id": "CertificateService", "Name": "Certificate Service",
		"CertificateLocations": rfhttp.Link(Service + "/CertificateLocations"),
		"Actions": rfhttp.Obj{
			"#CertificateService.GenerateCSR": rfhttp.Obj{
				"target": Service + "/Actions/CertificateService.GenerateCSR",
				"CertificateCollection@Redfish.AllowableValues": []string{s.collection},
				"KeyPairAlgorithm@Redfish.AllowableValues":      keyAlgorithms,
				"KeyCurveId@Redfish.AllowableValues":            keyCurves,
				"KeyBitLength@Redfish.AllowableValues":          keyBits,
			},
			"#CertificateService.ReplaceCertificate": rfhttp.Obj{
				"target": Service + "/Actions/CertificateService.ReplaceCertificate",
				"CertificateType@Redfish.AllowableValues": []string{"PEM"},
				"CertificateUri@Redfish.AllowableValues":  []string{s.CertificateURI()},
			},
		},
	}
}

// link reads a parameter that is a reference ({"@odata.id": ...}), as the schema has
// CertificateCollection and CertificateUri; a plain string is refused, as strict services do.
func link(w http.ResponseWriter, raw json.RawMessage, param, action string) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterMissing", "The action "+action+" requires the parameter "+param+" to be present in the request body.")
		return "", false
	}
	var l struct {
		ID string `json:"@odata.id"`
	}
	if err := json.Unmarshal(raw, &l); err != nil || l.ID == "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterValueTypeError", "The value "+string(raw)+" for the parameter "+param+
			" in the action "+action+` is of a different type than the parameter can accept: a reference {"@odata.id": "..."}.`)
		return "", false
	}
	return strings.TrimRight(l.ID, "/"), true
}

func (s *Store) generateCSR(w http.ResponseWriter, r *http.Request, f *faults.Faults) {
	const action = "GenerateCSR"
	var req struct {
		CertificateCollection                                               json.RawMessage
		CommonName, City, State, Country, Organization, Email               string
		OrganizationalUnit, KeyPairAlgorithm, KeyCurveId, ChallengePassword string
		AlternativeNames                                                    []string
		KeyBitLength                                                        int
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if s.failGenerate(f) {
		rfhttp.WriteError(w, http.StatusInternalServerError, "InternalError", "The request failed due to an internal service error.")
		return
	}
	coll, ok := link(w, req.CertificateCollection, "CertificateCollection", action)
	if !ok {
		return
	}
	if coll != s.collection {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterValueNotInList", "The value "+coll+" for the parameter CertificateCollection in the action "+
			action+" is not in the list of acceptable values: "+s.collection+".")
		return
	}
	if req.CommonName == "" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterMissing", "The action "+action+" requires the parameter CommonName to be present in the request body.")
		return
	}
	if req.Country != "" && len(req.Country) != 2 {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterValueFormatError", "The value "+req.Country+" for the parameter Country in the action "+
			action+" is of a different format than the parameter can accept: a two-letter ISO 3166 code.")
		return
	}
	key, msg := newKey(req.KeyPairAlgorithm, req.KeyCurveId, req.KeyBitLength)
	if key == nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterNotSupported", msg)
		return
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: req.CommonName,
		Organization: nonEmpty(req.Organization), OrganizationalUnit: nonEmpty(req.OrganizationalUnit),
		Locality: nonEmpty(req.City), Province: nonEmpty(req.State), Country: nonEmpty(req.Country)}}
	if req.Email != "" {
		tmpl.EmailAddresses = []string{req.Email}
	}
	for _, n := range req.AlternativeNames {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if n != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		rfhttp.WriteError(w, http.StatusInternalServerError, "InternalError", "The certificate signing request could not be made: "+err.Error())
		return
	}
	s.mu.Lock()
	s.pending = key // the key of any earlier request is gone
	s.mu.Unlock()
	s.host.Record(r, ActionGenerateCSR, coll, req.CommonName)
	if f.ErrorAfterEffect != 0 {
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed due to an internal service error.")
		return
	}
	rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Obj{
		"CSRString":             string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})),
		"CertificateCollection": rfhttp.Link(s.collection),
	})
}

// failGenerate spends one of the GenerateCSRFailures of the faults in force: each setting of the
// faults fails that many requests, then lets them through.
func (s *Store) failGenerate(f *faults.Faults) bool {
	if f.GenerateCSRFailures <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failSet != f {
		s.failSet, s.failed = f, 0
	}
	if s.failed >= f.GenerateCSRFailures {
		return false
	}
	s.failed++
	return true
}

func nonEmpty(v string) []string {
	if v == "" {
		return nil
	}
	return []string{v}
}

// newKey makes the key GenerateCSR asked for (ECDSA P-256 when unsaid), or says why not.
func newKey(alg, curve string, bits int) (crypto.Signer, string) {
	switch alg {
	case "", "TPM_ALG_ECDSA", "TPM_ALG_ECC":
		var c elliptic.Curve
		switch curve {
		case "", "TPM_ECC_NIST_P256":
			c = elliptic.P256()
		case "TPM_ECC_NIST_P384":
			c = elliptic.P384()
		default:
			return nil, "The parameter KeyCurveId value " + curve + " is not supported: " + strings.Join(keyCurves, ", ") + "."
		}
		k, err := ecdsa.GenerateKey(c, rand.Reader)
		if err != nil {
			return nil, err.Error()
		}
		return k, ""
	case "TPM_ALG_RSA":
		if bits == 0 {
			bits = 2048
		}
		if !slices.Contains(keyBits, bits) {
			return nil, fmt.Sprintf("The parameter KeyBitLength value %d is not supported: %v.", bits, keyBits)
		}
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			return nil, err.Error()
		}
		return k, ""
	}
	return nil, "The parameter KeyPairAlgorithm value " + alg + " is not supported: " + strings.Join(keyAlgorithms, ", ") + "."
}

func (s *Store) replace(w http.ResponseWriter, r *http.Request, f *faults.Faults) {
	const action = "ReplaceCertificate"
	var req struct {
		CertificateString, CertificateType string
		CertificateUri                     json.RawMessage
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	uri, ok := link(w, req.CertificateUri, "CertificateUri", action)
	if !ok {
		return
	}
	if uri != s.CertificateURI() {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterValueNotInList", "The value "+uri+" for the parameter CertificateUri in the action "+
			action+" is not in the list of acceptable values: "+s.CertificateURI()+".")
		return
	}
	if req.CertificateType != "PEM" {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterNotSupported", "The parameter CertificateType value "+req.CertificateType+
			" is not supported by the action "+action+": PEM.")
		return
	}
	c, key, err := parsePEM(req.CertificateString)
	if err != nil {
		rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterValueFormatError", "The value for the parameter CertificateString in the action "+
			action+" is of a different format than the parameter can accept: "+err.Error()+".")
		return
	}
	s.mu.Lock()
	if key == nil {
		if s.pending == nil || !samePublic(s.pending.Public(), c.leaf.PublicKey) {
			s.mu.Unlock()
			why := "no certificate signing request is pending (GenerateCSR makes one)"
			if s.pending != nil {
				why = "it was not signed for the key of the last certificate signing request: a later GenerateCSR replaces the key of an earlier one"
			}
			rfhttp.WriteError(w, http.StatusBadRequest, "ActionParameterValueError", "The certificate in the parameter CertificateString of the action "+
				action+" does not match a private key of this service: "+why+".")
			return
		}
		key, s.pending = s.pending, nil
	}
	c.tls.PrivateKey = key
	if f.CertificateNeedsReset {
		s.staged = c
	} else {
		s.current, s.staged = c, nil
	}
	s.mu.Unlock()
	s.host.Record(r, ActionReplaceCertificate, uri, c.leaf.Subject.CommonName)
	if f.ErrorAfterEffect != 0 {
		rfhttp.WriteError(w, f.ErrorAfterEffect, "InternalError", "The request failed due to an internal service error.")
		return
	}
	// The answer is the certificate installed, whether it is served yet or not.
	w.Header().Set("Location", uri)
	rfhttp.WriteJSON(w, http.StatusOK, body(uri, c))
}

// parsePEM reads a certificate chain, leaf first, and the leaf's private key where one comes
// with it.
func parsePEM(s string) (*cert, crypto.Signer, error) {
	rest := []byte(s)
	c := &cert{}
	var key crypto.Signer
	var chain []string
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			x, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("a certificate that does not parse (%v)", err)
			}
			if c.leaf == nil {
				c.leaf = x
			}
			c.tls.Certificate = append(c.tls.Certificate, b.Bytes)
			chain = append(chain, string(pem.EncodeToMemory(b)))
		case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
			k, err := parseKey(b)
			if err != nil {
				return nil, nil, fmt.Errorf("a private key that does not parse (%v)", err)
			}
			key = k
		}
	}
	if c.leaf == nil {
		return nil, nil, errors.New("no PEM certificate")
	}
	if key != nil && !samePublic(key.Public(), c.leaf.PublicKey) {
		return nil, nil, errors.New("the private key given is not the certificate's")
	}
	c.tls.Leaf, c.pem = c.leaf, strings.Join(chain, "")
	return c, key, nil
}

func parseKey(b *pem.Block) (crypto.Signer, error) {
	switch b.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("not a signing key")
	}
	return signer, nil
}

func samePublic(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// RouteCollection serves the HTTPS certificate collection and its one member (segs after the
// collection's URI). A certificate is replaced through the CertificateService, never POSTed.
func (s *Store) RouteCollection(w http.ResponseWriter, r *http.Request, segs []string) {
	if !rfhttp.MethodIs(w, r, http.MethodGet) {
		return
	}
	switch {
	case len(segs) == 0:
		rfhttp.WriteJSON(w, http.StatusOK, rfhttp.Collection(s.collection, "CertificateCollection", "HTTPS Certificates", []string{s.CertificateURI()}))
	case len(segs) == 1 && segs[0] == "1":
		s.mu.Lock()
		c, err := s.ensure()
		s.mu.Unlock()
		if err != nil {
			rfhttp.WriteError(w, http.StatusInternalServerError, "InternalError", err.Error())
			return
		}
		rfhttp.WriteJSON(w, http.StatusOK, body(s.CertificateURI(), c))
	default:
		rfhttp.NotFound(w, r)
	}
}

// body is the Certificate resource of c at uri.
func body(uri string, c *cert) rfhttp.Obj {
	x := c.leaf
	subject := identifier(x.Subject)
	var alt []string
	alt = append(alt, x.DNSNames...)
	for _, ip := range x.IPAddresses {
		alt = append(alt, ip.String())
	}
	if len(alt) > 0 {
		subject["AlternativeNames"] = alt
	}
	sum := sha256.Sum256(x.Raw)
	return rfhttp.Obj{
		"@odata.type": "#Certificate.v1_5_0.Certificate", "@odata.id": uri, "Id": "1", "Name": "HTTPS Certificate",
		"CertificateString": c.pem, "CertificateType": "PEM", "CertificateUsageTypes": []string{"Web"},
		"Subject": subject, "Issuer": identifier(x.Issuer),
		"ValidNotBefore": x.NotBefore.UTC().Format(time.RFC3339), "ValidNotAfter": x.NotAfter.UTC().Format(time.RFC3339),
		"SerialNumber": colonHex(x.SerialNumber.Bytes()), "Fingerprint": colonHex(sum[:]), "FingerprintHashAlgorithm": "TPM_ALG_SHA256",
		"KeyUsage": keyUsage(x),
	}
}

func identifier(n pkix.Name) rfhttp.Obj {
	o := rfhttp.Obj{"CommonName": n.CommonName}
	for k, v := range map[string][]string{"Organization": n.Organization, "OrganizationalUnit": n.OrganizationalUnit,
		"City": n.Locality, "State": n.Province, "Country": n.Country} {
		if len(v) > 0 {
			o[k] = v[0]
		}
	}
	return o
}

// colonHex writes bytes as BMCs show serials and fingerprints: 3A:0F:...
func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i := range b {
		parts[i] = strings.ToUpper(hex.EncodeToString(b[i : i+1]))
	}
	return strings.Join(parts, ":")
}

func keyUsage(x *x509.Certificate) []string {
	var out []string
	for _, u := range []struct {
		bit  x509.KeyUsage
		name string
	}{
		{x509.KeyUsageDigitalSignature, "DigitalSignature"}, {x509.KeyUsageContentCommitment, "NonRepudiation"},
		{x509.KeyUsageKeyEncipherment, "KeyEncipherment"}, {x509.KeyUsageDataEncipherment, "DataEncipherment"},
		{x509.KeyUsageKeyAgreement, "KeyAgreement"}, {x509.KeyUsageCertSign, "KeyCertSign"}, {x509.KeyUsageCRLSign, "CRLSigning"},
	} {
		if x.KeyUsage&u.bit != 0 {
			out = append(out, u.name)
		}
	}
	for _, u := range x.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			out = append(out, "ServerAuthentication")
		case x509.ExtKeyUsageClientAuth:
			out = append(out, "ClientAuthentication")
		}
	}
	return out
}
