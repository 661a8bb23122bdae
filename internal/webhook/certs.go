package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names in the certificate directory: those of a kubernetes.io/tls Secret as cert-manager
// writes it, so the directory can be a mounted Secret.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// certValidity is how long a generated serving certificate lasts; a restart after that
// generates a new one.
const certValidity = 365 * 24 * time.Hour

// EnsureCerts makes sure dir holds a serving certificate and key. When it holds neither, or a
// certificate this function generated earlier that expires within a day, it generates a
// self-signed CA (ca.crt; its key is not kept) and a serving certificate signed by it for hosts
// (DNS names or IPs), and reports generated. A directory with a certificate of someone else's
// (a mounted cert-manager Secret) is left as it is. It returns the CA certificate (PEM) clients
// must trust, or nil if the directory has no ca.crt.
func EnsureCerts(dir string, hosts []string, now time.Time) (caPEM []byte, generated bool, err error) {
	certPath, keyPath, caPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile), filepath.Join(dir, CAFile)
	haveCert, haveKey := exists(certPath), exists(keyPath)
	switch {
	case haveCert != haveKey:
		return nil, false, fmt.Errorf("webhook certificate directory %s holds only one of %s and %s", dir, CertFile, KeyFile)
	case haveCert && !ownExpiring(certPath, now):
		ca, err := os.ReadFile(caPath)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, false, err
		}
		return ca, false, nil
	}
	ca, cert, key, err := generate(hosts, now)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("creating webhook certificate directory: %w", err)
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{caPath, ca, 0o644}, {keyPath, key, 0o600}, {certPath, cert, 0o644}} {
		if err := writeFile(f.path, f.data, f.mode); err != nil {
			return nil, false, fmt.Errorf("writing webhook certificate: %w", err)
		}
	}
	return ca, true, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ownExpiring reports whether the certificate at path is one EnsureCerts generated (its issuer
// is our CA's name) and expires within a day. Anything else, unreadable files included, is
// left to the server to load (and to complain about).
func ownExpiring(path string, now time.Time) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	return cert.Issuer.CommonName == caCommonName && now.Add(24*time.Hour).After(cert.NotAfter)
}

const caCommonName = "metalhub webhook self-signed CA"

// generate makes a CA and a serving certificate for hosts signed by it (ECDSA P-256), in PEM.
func generate(hosts []string, now time.Time) (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	notBefore := now.Add(-time.Hour) // tolerate clocks a little behind
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: caCommonName},
		NotBefore:             notBefore,
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	ca, err = x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "metalhub webhook"},
		NotBefore:    notBefore,
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else if h != "" {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// writeFile writes through a temporary file and a rename, so that the server's certificate
// watcher never reads half a file.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
