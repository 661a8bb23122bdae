package bmc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// siteCA signs the BMCs' certificate requests, as a site's CA would.
type siteCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newSiteCA(t *testing.T) *siteCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "metalhub site CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &siteCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *siteCA) sign(t *testing.T, csrPEM string, serial int64) string {
	t.Helper()
	b, _ := pem.Decode([]byte(csrPEM))
	if b == nil {
		t.Fatalf("not PEM: %q", csrPEM)
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: csr.Subject, DNSNames: csr.DNSNames, IPAddresses: csr.IPAddresses,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func csrFor(name string) bmc.CSRRequest {
	return bmc.CSRRequest{CommonName: name, AlternativeNames: []string{name, "127.0.0.1"}, Organization: "metalhub",
		OrganizationalUnit: "fleet", City: "Berlin", State: "Berlin", Country: "DE"}
}

// The operator's path: read the BMC's certificate, have it make a request, sign it, install
// it, and from then on reach the BMC trusting the site's CA alone.
func TestCertificateRollout(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1, TLS: true})
	b := e.BMC(0)
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	ep := endpoint(b)
	ep.CACert = e.CACertPEM()
	c := get(t, p, ep)

	list, err := c.Certificates(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("certificates %+v %v", list, err)
	}
	first := list[0]
	sum := sha256.Sum256(b.Certificate().Raw)
	if first.URI != b.CertificateURI() || first.Collection != b.CertificateCollectionURI() || first.X509 == nil ||
		!first.X509.Equal(b.Certificate()) || first.Subject.CommonName != "metalhub BMC emulator" ||
		first.Fingerprint != hex.EncodeToString(sum[:]) || first.NotAfter.IsZero() {
		t.Fatalf("first certificate %+v", first)
	}

	csrPEM, coll, err := c.GenerateCSR(ctx, csrFor("bmc-0.example.test"))
	if err != nil || coll != b.CertificateCollectionURI() {
		t.Fatalf("GenerateCSR: %q %v", coll, err)
	}
	blk, _ := pem.Decode([]byte(csrPEM))
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil || csr.Subject.CommonName != "bmc-0.example.test" || !slices.Equal(csr.DNSNames, []string{"bmc-0.example.test"}) ||
		len(csr.IPAddresses) != 1 || !slices.Equal(csr.Subject.Country, []string{"DE"}) {
		t.Fatalf("CSR %+v %v", csr, err)
	}
	ca := newSiteCA(t)
	signed := ca.sign(t, csrPEM, 0x5eed)

	onlySite := endpoint(b)
	onlySite.CACert = ca.pem
	// Another pool: a pool holds one connection per address.
	if _, err := get(t, pool(t, bmc.Options{}), onlySite).Systems(ctx); !errors.Is(err, bmc.ErrTLSVerificationFailed) {
		t.Fatalf("the site's CA is trusted before the certificate is installed: %v", err)
	}
	if err := c.ReplaceCertificate(ctx, first.URI, signed); err != nil {
		t.Fatalf("ReplaceCertificate: %v", err)
	}
	if _, err := get(t, pool(t, bmc.Options{}), onlySite).Systems(ctx); err != nil {
		t.Fatalf("the BMC does not verify against the site's CA after the install: %v", err)
	}
	list, err = c.Certificates(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("certificates after: %+v %v", list, err)
	}
	now := list[0]
	if now.Issuer.CommonName != "metalhub site CA" || now.Subject.CommonName != "bmc-0.example.test" || now.SerialNumber != "5eed" ||
		!slices.Contains(now.AlternativeNames, "127.0.0.1") || !slices.Contains(now.KeyUsage, "ServerAuthentication") {
		t.Fatalf("installed certificate %+v", now)
	}
	var got []string
	for _, r := range e.Records() {
		got = append(got, r.Action+":"+r.CommonName)
	}
	if want := "[GenerateCSR:bmc-0.example.test ReplaceCertificate:bmc-0.example.test]"; fmt.Sprint(got) != want {
		t.Fatalf("recorded %v, want %s", got, want)
	}
}

func TestReplaceCertificateRefused(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	ctx := context.Background()
	ca := newSiteCA(t)

	if err := c.ReplaceCertificate(ctx, b.CertificateURI(), "not a certificate"); bmc.ReasonOf(err) != bmc.ReasonInvalidConfig {
		t.Fatalf("not PEM: %v", err)
	}
	earlier, _, err := c.GenerateCSR(ctx, csrFor("bmc-0.example.test"))
	if err != nil {
		t.Fatal(err)
	}
	newest, _, err := c.GenerateCSR(ctx, csrFor("bmc-0.example.test"))
	if err != nil {
		t.Fatal(err)
	}
	err = c.ReplaceCertificate(ctx, b.CertificateURI(), ca.sign(t, earlier, 1))
	if !errors.Is(err, bmc.ErrCertificateRefused) || bmc.ReasonOf(err) != bmc.ReasonRejected ||
		!strings.Contains(err.Error(), "a later GenerateCSR replaces the key") || strings.Contains(err.Error(), "{") {
		t.Fatalf("a certificate for the replaced key: (%s) %v", bmc.ReasonOf(err), err)
	}
	// "" replaces the BMC's HTTPS certificate.
	if err := c.ReplaceCertificate(ctx, "", ca.sign(t, newest, 2)); err != nil {
		t.Fatalf("the newest request's certificate: %v", err)
	}
	if b.Certificate().SerialNumber.Int64() != 2 {
		t.Fatalf("serves %v", b.Certificate().SerialNumber)
	}
	if _, _, err := c.GenerateCSR(ctx, bmc.CSRRequest{}); bmc.ReasonOf(err) != bmc.ReasonInvalidConfig {
		t.Fatalf("no common name: %v", err)
	}
	var n int
	for _, r := range e.Records() {
		if r.Action == redfish.ActionReplaceCertificate {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d certificates installed, want 1", n)
	}
}

func TestCertificateFaults(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 1})
	b := e.BMC(0)
	c := get(t, pool(t, bmc.Options{}), endpoint(b))
	ctx := context.Background()
	ca := newSiteCA(t)

	if _, err := c.Certificates(ctx); err != nil { // connected: the service root links a CertificateService
		t.Fatal(err)
	}
	b.SetFaults(redfish.Faults{NoCertificateService: true})
	_, err := c.Certificates(ctx)
	if !errors.Is(err, bmc.ErrNoCertificateService) || bmc.ReasonOf(err) != bmc.ReasonUnsupported {
		t.Fatalf("Certificates without a CertificateService: (%s) %v", bmc.ReasonOf(err), err)
	}
	if _, _, err := c.GenerateCSR(ctx, csrFor("x")); !errors.Is(err, bmc.ErrNoCertificateService) || !errors.Is(err, bmc.ErrNotSent) {
		t.Fatalf("GenerateCSR without a CertificateService: %v", err)
	}
	if err := c.ReplaceCertificate(ctx, b.CertificateURI(), b.CertificatePEM()); !errors.Is(err, bmc.ErrNoCertificateService) {
		t.Fatalf("ReplaceCertificate without a CertificateService: %v", err)
	}
	// A BMC that never had one: nothing in its service root.
	fresh := get(t, pool(t, bmc.Options{}), endpoint(b))
	if _, _, err := fresh.GenerateCSR(ctx, csrFor("x")); !errors.Is(err, bmc.ErrNoCertificateService) {
		t.Fatalf("GenerateCSR, no CertificateService in the root: %v", err)
	}

	b.SetFaults(redfish.Faults{GenerateCSRFailures: 1})
	if _, _, err := c.GenerateCSR(ctx, csrFor("x")); bmc.ReasonOf(err) != bmc.ReasonUnavailable {
		t.Fatalf("GenerateCSR answered 500: (%s) %v", bmc.ReasonOf(err), err)
	}
	csrPEM, _, err := c.GenerateCSR(ctx, csrFor("bmc-0.example.test"))
	if err != nil {
		t.Fatalf("GenerateCSR after the failure: %v", err)
	}

	// Installed for the next reset: the BMC says yes and serves the old one until then.
	b.SetFaults(redfish.Faults{CertificateNeedsReset: true})
	before := b.Certificate()
	if err := c.ReplaceCertificate(ctx, b.CertificateURI(), ca.sign(t, csrPEM, 9)); err != nil {
		t.Fatalf("ReplaceCertificate: %v", err)
	}
	if list, err := c.Certificates(ctx); err != nil || !list[0].X509.Equal(before) {
		t.Fatalf("before the reset: %+v %v", list, err)
	}
	if err := c.ResetManager(ctx); err != nil {
		t.Fatal(err)
	}
	if list, err := c.Certificates(ctx); err != nil || list[0].SerialNumber != "09" {
		t.Fatalf("after the reset: %+v %v", list, err)
	}
}
