package bmccert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// pinStep pins a BMC whose installed certificate is not yet seen served: a TLS handshake
// verified against the CA it was installed with must present exactly that certificate. Many
// BMCs serve a new certificate only after a reset (the graceful-restart-bmc operation): until
// then the condition says so and connections are verified as before.
func (r *Reconciler) pinStep(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	b, rec := p.Obj, p.rec
	if rec.Fingerprint == "" {
		return lifecycle.Continue(), nil
	}
	host, err := bmcaccess.Host(ctx, p.Client(), b)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, err)
	}
	addr, serverName, err := tlsTarget(b, host)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, err)
	}
	if addr == "" {
		return r.failed(p, metalv1alpha1.ReasonCertificateNotServed, errors.New("the certificate is installed, but the BMC is reached over plain HTTP (spec.protocol): switch it to HTTPS to verify it"))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(b.Annotations[bmcaccess.CertificateCAAnnotation])) {
		// The bundle is written with the install it verified: lost, the certificate is asked
		// for again (and the bundle with it).
		rec.Fingerprint = ""
		return r.writeRecord(ctx, p, rec, nil, "CA bundle lost: certificate requested again")
	}
	served, verr := handshake(p.bctx, addr, &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if rec.Pinned {
		// Pinned: a BMC that stops serving the certificate (a factory reset, a replaced BMC, or
		// another machine at its address) is not unpinned here, which would hand the address
		// to whatever answers; it is reported, and a person re-enrolls it.
		if verr == nil && bmcaccess.Fingerprint(served.Raw) == rec.Fingerprint {
			return lifecycle.Continue(), nil
		}
		what := "a certificate the CA did not sign"
		if verr == nil {
			what = fmt.Sprintf("certificate %x, also from the CA", served.SerialNumber)
		} else if leaf, err := handshake(p.bctx, addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}); err == nil { //nolint:gosec // read only, to report what is served
			what = fmt.Sprintf("certificate %x from %s", leaf.SerialNumber, leaf.Issuer)
		} else {
			return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("verifying the BMC's TLS against its CA: %w", verr))
		}
		return r.failed(p, metalv1alpha1.ReasonCertificateNotServed, fmt.Errorf("the BMC no longer serves certificate %s but %s: connections to it are refused. If it was reset to factory settings or replaced, remove spec.certificate (which unpins it) and add it again to enroll it anew", rec.Serial, what))
	}
	if verr != nil {
		// What does it serve? A second look, unverified, only to say so.
		if leaf, err := handshake(p.bctx, addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}); err == nil { //nolint:gosec // read only, to report what is served
			return r.failed(p, metalv1alpha1.ReasonCertificateNotServed, fmt.Errorf("certificate %s is installed, but the BMC serves %x from %s (many BMCs serve a new certificate from their next reset: the operation graceful-restart-bmc)",
				rec.Serial, leaf.SerialNumber, leaf.Issuer))
		}
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("verifying the BMC's TLS against its CA: %w", verr))
	}
	if bmcaccess.Fingerprint(served.Raw) != rec.Fingerprint {
		return r.failed(p, metalv1alpha1.ReasonCertificateNotServed, fmt.Errorf("certificate %s is installed, but the BMC serves %x (also from the CA)", rec.Serial, served.SerialNumber))
	}
	rec.Pinned = true
	return r.writeRecord(ctx, p, rec, nil, "certificate served: pinned")
}

// handshake makes a TLS handshake with addr and returns the leaf presented.
func handshake(ctx context.Context, addr string, cfg *tls.Config) (*x509.Certificate, error) {
	d := &tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("no certificate presented")
	}
	return certs[0], nil
}

// expiry is the installed certificate's notAfter per BMC, for alerts (expiry - time()).
var expiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "metalhub_bmc_certificate_expiry_seconds",
	Help: "When the certificate metalhub installed on a BMC expires (Unix time of its notAfter).",
}, []string{"bmc"})

func init() { metrics.Registry.MustRegister(expiry) }
