package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestEnsureCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	now := time.Now()
	ca, generated, err := EnsureCerts(dir, []string{"localhost", "127.0.0.1", "webhook.example"}, now)
	if err != nil || !generated {
		t.Fatalf("generated=%v err=%v", generated, err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("ca.crt holds no certificate")
	}
	for _, host := range []string{"localhost", "127.0.0.1", "webhook.example"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate not valid for %s: %v", host, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, KeyFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", fi.Mode().Perm())
	}

	// A second start keeps them.
	again, generated, err := EnsureCerts(dir, nil, now.Add(time.Hour))
	if err != nil || generated || string(again) != string(ca) {
		t.Fatalf("second start: generated=%v err=%v", generated, err)
	}
	// Close to expiry, our own certificate is replaced.
	if _, generated, err := EnsureCerts(dir, []string{"localhost"}, now.Add(certValidity-time.Hour)); err != nil || !generated {
		t.Fatalf("expiring certificate: generated=%v err=%v", generated, err)
	}
}

// A mounted Secret (someone else's certificate, no ca.crt) is used as it is, even expired; half
// a pair is an error rather than something to overwrite.
func TestEnsureCertsLeavesOthersAlone(t *testing.T) {
	_, _, key, err := generate([]string{"svc.example"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mounted := t.TempDir()
	if err := os.WriteFile(filepath.Join(mounted, CertFile), []byte("-----BEGIN CERTIFICATE-----\nnot ours\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mounted, KeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	ca, generated, err := EnsureCerts(mounted, nil, time.Now())
	if err != nil || generated || ca != nil {
		t.Fatalf("mounted certificate: ca=%q generated=%v err=%v", ca, generated, err)
	}

	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, KeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := EnsureCerts(half, nil, time.Now()); err == nil {
		t.Fatal("half a pair accepted")
	}
}
