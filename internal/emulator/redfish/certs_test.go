package redfish_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// testCA signs certificate requests as a site's CA would.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "metalhub test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &testCA{cert: c, key: key, pool: pool}
}

// sign issues a server certificate for the PEM request csrPEM, with its subject and names.
func (ca *testCA) sign(t *testing.T, csrPEM string, serial int64) string {
	t.Helper()
	b, _ := pem.Decode([]byte(csrPEM))
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("not a PEM certificate request: %q", csrPEM)
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		t.Fatalf("request signature: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: csr.Subject, DNSNames: csr.DNSNames, IPAddresses: csr.IPAddresses,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(90 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// rf sends one authenticated request to b, each on a new connection (so on TLS it meets the
// certificate served now), trusting roots (nil: any certificate).
func rf(t *testing.T, b *redfish.BMC, roots *x509.CertPool, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	u, p := b.Credentials()
	req.SetBasicAuth(u, p)
	tr := &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: roots, InsecureSkipVerify: roots == nil}} //nolint:gosec // test
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out
}

// served is the certificate b's listener presents to a new connection, verified against roots
// for serverName ("": the host of its URL); the error is the verification's.
func served(t *testing.T, b *redfish.BMC, roots *x509.CertPool, serverName string) (*x509.Certificate, error) {
	t.Helper()
	u, _ := url.Parse(b.URL())
	if serverName == "" {
		serverName = u.Hostname()
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots, ServerName: serverName})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func csrRequest(b *redfish.BMC, cn string, alt ...string) map[string]any {
	return map[string]any{
		"CertificateCollection": map[string]string{"@odata.id": b.CertificateCollectionURI()},
		"CommonName":            cn, "AlternativeNames": alt, "Organization": "metalhub", "OrganizationalUnit": "fleet",
		"City": "Berlin", "State": "Berlin", "Country": "DE", "KeyPairAlgorithm": "TPM_ALG_ECDSA", "KeyCurveId": "TPM_ECC_NIST_P256",
	}
}

func generateCSR(t *testing.T, b *redfish.BMC, roots *x509.CertPool, body map[string]any) string {
	t.Helper()
	code, out := rf(t, b, roots, http.MethodPost, "/redfish/v1/CertificateService/Actions/CertificateService.GenerateCSR", body)
	if code != http.StatusOK {
		t.Fatalf("GenerateCSR: %d %v", code, out)
	}
	if coll, _ := out["CertificateCollection"].(map[string]any); coll["@odata.id"] != b.CertificateCollectionURI() {
		t.Fatalf("GenerateCSR answered collection %v", out["CertificateCollection"])
	}
	s, _ := out["CSRString"].(string)
	return s
}

func replace(t *testing.T, b *redfish.BMC, roots *x509.CertPool, certPEM string) (int, map[string]any) {
	t.Helper()
	return rf(t, b, roots, http.MethodPost, "/redfish/v1/CertificateService/Actions/CertificateService.ReplaceCertificate", map[string]any{
		"CertificateString": certPEM, "CertificateType": "PEM", "CertificateUri": map[string]string{"@odata.id": b.CertificateURI()},
	})
}

func message(out map[string]any) string {
	raw, _ := json.Marshal(out)
	return string(raw)
}

func TestGenerateCSRAndReplaceCertificateServeIt(t *testing.T) {
	e := start(t, redfish.Options{TLS: true})
	b := e.BMC(0)
	factory := x509.NewCertPool()
	if !factory.AppendCertsFromPEM(e.CACertPEM()) {
		t.Fatal("CACertPEM holds no certificate")
	}
	first, err := served(t, b, factory, "")
	if err != nil {
		t.Fatalf("the BMC's own certificate does not verify: %v", err)
	}
	if !first.Equal(b.Certificate()) {
		t.Fatal("the listener serves another certificate than the BMC reports")
	}

	csrPEM := generateCSR(t, b, factory, csrRequest(b, "bmc-0.example.test", "bmc-0.example.test", "127.0.0.1"))
	blk, _ := pem.Decode([]byte(csrPEM))
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		t.Fatalf("CSR does not parse: %v (%q)", err, csrPEM)
	}
	if err := csr.CheckSignature(); err != nil {
		t.Fatalf("CSR signature: %v", err)
	}
	if csr.Subject.CommonName != "bmc-0.example.test" || !slices.Equal(csr.Subject.Country, []string{"DE"}) ||
		!slices.Equal(csr.Subject.Organization, []string{"metalhub"}) || !slices.Equal(csr.Subject.Locality, []string{"Berlin"}) {
		t.Errorf("CSR subject %v", csr.Subject)
	}
	if !slices.Equal(csr.DNSNames, []string{"bmc-0.example.test"}) || len(csr.IPAddresses) != 1 || !csr.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("CSR names %v %v", csr.DNSNames, csr.IPAddresses)
	}
	if _, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("CSR key %T, want ECDSA", csr.PublicKey)
	}

	ca := newTestCA(t)
	certPEM := ca.sign(t, csrPEM, 4242)
	if _, err := served(t, b, ca.pool, ""); err == nil {
		t.Fatal("the BMC verifies against the CA before it got its certificate")
	}
	if code, out := replace(t, b, factory, certPEM); code != http.StatusOK {
		t.Fatalf("ReplaceCertificate: %d %s", code, message(out))
	}
	for _, name := range []string{"", "bmc-0.example.test"} {
		got, err := served(t, b, ca.pool, name)
		if err != nil {
			t.Fatalf("after ReplaceCertificate the BMC does not verify against the CA as %q: %v", name, err)
		}
		if got.SerialNumber.Int64() != 4242 {
			t.Fatalf("serves serial %v", got.SerialNumber)
		}
	}
	code, c := rf(t, b, ca.pool, http.MethodGet, b.CertificateURI(), nil)
	subject, _ := c["Subject"].(map[string]any)
	issuer, _ := c["Issuer"].(map[string]any)
	if code != http.StatusOK || subject["CommonName"] != "bmc-0.example.test" || issuer["CommonName"] != "metalhub test CA" ||
		c["SerialNumber"] != "10:92" || c["CertificateString"] != certPEM || c["FingerprintHashAlgorithm"] != "TPM_ALG_SHA256" ||
		!strings.HasPrefix(c["ValidNotAfter"].(string), time.Now().Add(90*24*time.Hour).UTC().Format("2006-01-02")) {
		t.Errorf("Certificate resource %d %s", code, message(c))
	}
	if b.PendingCSRKey() != nil {
		t.Error("the pending key was not consumed")
	}
	// Consumed: the same certificate again has no key to go with.
	if code, out := replace(t, b, ca.pool, certPEM); code != http.StatusBadRequest || !strings.Contains(message(out), "no certificate signing request is pending") {
		t.Errorf("a second install of the same certificate: %d %s", code, message(out))
	}
	var got []string
	for _, r := range e.Records() {
		got = append(got, r.Action+":"+r.Certificate+":"+r.CommonName)
	}
	want := []string{"GenerateCSR:" + b.CertificateCollectionURI() + ":bmc-0.example.test", "ReplaceCertificate:" + b.CertificateURI() + ":bmc-0.example.test"}
	if !slices.Equal(got, want) {
		t.Errorf("records %v, want %v", got, want)
	}
}

func TestSecondGenerateCSRReplacesThePendingKey(t *testing.T) {
	e := start(t, redfish.Options{})
	b := e.BMC(0)
	ca := newTestCA(t)
	before := b.Certificate()
	firstCSR := generateCSR(t, b, nil, csrRequest(b, "bmc-0.example.test"))
	secondCSR := generateCSR(t, b, nil, csrRequest(b, "bmc-0.example.test"))
	code, out := replace(t, b, nil, ca.sign(t, firstCSR, 1))
	if code != http.StatusBadRequest || !strings.Contains(message(out), "a later GenerateCSR replaces the key") {
		t.Fatalf("a certificate for the replaced key: %d %s", code, message(out))
	}
	if !b.Certificate().Equal(before) {
		t.Fatal("a refused certificate was installed")
	}
	if code, out := replace(t, b, nil, ca.sign(t, secondCSR, 2)); code != http.StatusOK {
		t.Fatalf("the certificate for the newest key: %d %s", code, message(out))
	}
	if b.Certificate().SerialNumber.Int64() != 2 {
		t.Fatalf("serves %v", b.Certificate().SerialNumber)
	}

	// Parameters are references, as the schema has them; other shapes are refused.
	bad := csrRequest(b, "x")
	bad["CertificateCollection"] = b.CertificateCollectionURI()
	if code, _ := rf(t, b, nil, http.MethodPost, "/redfish/v1/CertificateService/Actions/CertificateService.GenerateCSR", bad); code != http.StatusBadRequest {
		t.Errorf("CertificateCollection as a string: %d", code)
	}
	bad["CertificateCollection"] = map[string]string{"@odata.id": "/redfish/v1/AccountService/LDAP/Certificates"}
	if code, _ := rf(t, b, nil, http.MethodPost, "/redfish/v1/CertificateService/Actions/CertificateService.GenerateCSR", bad); code != http.StatusBadRequest {
		t.Errorf("a collection the service does not have: %d", code)
	}
	if b.PendingCSRKey() != nil {
		t.Error("a refused request left a pending key")
	}
}

func TestCertificateNeedsReset(t *testing.T) {
	e := start(t, redfish.Options{TLS: true})
	b := e.BMC(0)
	factory := x509.NewCertPool()
	factory.AppendCertsFromPEM(e.CACertPEM())
	b.SetFaults(redfish.Faults{CertificateNeedsReset: true})
	ca := newTestCA(t)
	csrPEM := generateCSR(t, b, factory, csrRequest(b, "bmc-0.example.test", "127.0.0.1"))
	if code, out := replace(t, b, factory, ca.sign(t, csrPEM, 7)); code != http.StatusOK {
		t.Fatalf("ReplaceCertificate: %d %s", code, message(out))
	}
	if _, err := served(t, b, ca.pool, ""); err == nil {
		t.Fatal("the new certificate is served before the BMC's reset")
	}
	if _, err := served(t, b, factory, ""); err != nil {
		t.Fatalf("the old certificate is no longer served: %v", err)
	}
	if _, c := rf(t, b, factory, http.MethodGet, b.CertificateURI(), nil); c["SerialNumber"] == "07" {
		t.Error("the Certificate resource shows the certificate before it is served")
	}
	if b.StagedCertificate() == nil || b.PendingCSRKey() != nil {
		t.Fatal("nothing staged, or the key still pending")
	}
	if code, out := rf(t, b, factory, http.MethodPost, "/redfish/v1/Managers/"+managerID(t, b, factory)+"/Actions/Manager.Reset", map[string]string{"ResetType": "GracefulRestart"}); code != http.StatusNoContent {
		t.Fatalf("Manager.Reset: %d %s", code, message(out))
	}
	got, err := served(t, b, ca.pool, "")
	if err != nil || got.SerialNumber.Int64() != 7 {
		t.Fatalf("after the reset: %v %v", got, err)
	}
	if _, c := rf(t, b, ca.pool, http.MethodGet, b.CertificateURI(), nil); c["SerialNumber"] != "07" {
		t.Errorf("the Certificate resource after the reset: %s", message(c))
	}
}

func managerID(t *testing.T, b *redfish.BMC, roots *x509.CertPool) string {
	t.Helper()
	_, out := rf(t, b, roots, http.MethodGet, "/redfish/v1/Managers", nil)
	ms, _ := out["Members"].([]any)
	if len(ms) == 0 {
		t.Fatalf("no managers: %v", out)
	}
	id, _ := ms[0].(map[string]any)["@odata.id"].(string)
	return id[strings.LastIndex(id, "/")+1:]
}

func TestNoCertificateServiceAndGenerateCSRFailure(t *testing.T) {
	e := start(t, redfish.Options{})
	b := e.BMC(0)
	mid := managerID(t, b, nil)
	b.SetFaults(redfish.Faults{NoCertificateService: true})
	if _, root := rf(t, b, nil, http.MethodGet, "/redfish/v1", nil); root["CertificateService"] != nil {
		t.Errorf("service root links a CertificateService: %v", root["CertificateService"])
	}
	for _, p := range []string{"/redfish/v1/CertificateService", b.CertificateCollectionURI(), b.CertificateURI()} {
		if code, _ := rf(t, b, nil, http.MethodGet, p, nil); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	if _, np := rf(t, b, nil, http.MethodGet, "/redfish/v1/Managers/"+mid+"/NetworkProtocol", nil); np["HTTPS"].(map[string]any)["Certificates"] != nil {
		t.Errorf("NetworkProtocol links certificates: %v", np)
	}

	b.SetFaults(redfish.Faults{})
	if _, np := rf(t, b, nil, http.MethodGet, "/redfish/v1/Managers/"+mid+"/NetworkProtocol", nil); np["HTTPS"].(map[string]any)["Certificates"] == nil {
		t.Errorf("NetworkProtocol links no certificates: %v", np)
	}
	gen := "/redfish/v1/CertificateService/Actions/CertificateService.GenerateCSR"
	for range 2 { // each setting of the fault fails one request, then lets them through
		b.SetFaults(redfish.Faults{GenerateCSRFailures: 1})
		before := b.PendingCSRKey()
		if code, _ := rf(t, b, nil, http.MethodPost, gen, csrRequest(b, "x")); code != http.StatusInternalServerError {
			t.Fatalf("first GenerateCSR: %d, want 500", code)
		}
		if b.PendingCSRKey() != before {
			t.Fatal("a failed GenerateCSR made a key")
		}
		if code, _ := rf(t, b, nil, http.MethodPost, gen, csrRequest(b, "x")); code != http.StatusOK {
			t.Fatalf("second GenerateCSR: %d, want 200", code)
		}
	}
}
