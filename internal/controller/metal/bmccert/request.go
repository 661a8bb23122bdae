package bmccert

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// requestName is the CertificateSigningRequest of a BMC's attempt.
func requestName(bmcName string, attempt int) string {
	return "bmc-" + bmcName + "-" + strconv.Itoa(attempt)
}

// loadRequest reads the request of the attempt under way.
func (r *Reconciler) loadRequest(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	if !p.rec.Requesting {
		return lifecycle.Continue(), nil
	}
	csr := &certificatesv1.CertificateSigningRequest{}
	err := p.Client().Get(ctx, client.ObjectKey{Name: requestName(p.Obj.Name, p.rec.Attempt)}, csr)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return lifecycle.Result{}, fmt.Errorf("reading CertificateSigningRequest %s: %w", requestName(p.Obj.Name, p.rec.Attempt), err)
	default:
		p.csr = csr
	}
	return lifecycle.Continue(), nil
}

// tidyRequests removes the requests made for the BMC other than the one under way: at most one
// is ever outstanding.
func (r *Reconciler) tidyRequests(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	keep := -1
	if p.rec.Requesting {
		keep = p.rec.Attempt
	}
	if deleted, err := r.deleteRequests(ctx, p, keep); err != nil || deleted {
		return lifecycle.Wrote("earlier requests removed"), err
	}
	return lifecycle.Continue(), nil
}

// deleteRequests deletes the BMC's requests but attempt keep's; it says whether it deleted any.
func (r *Reconciler) deleteRequests(ctx context.Context, p *certPass, keep int) (bool, error) {
	list := &certificatesv1.CertificateSigningRequestList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{BMCLabel: p.Obj.Name}); err != nil {
		return false, fmt.Errorf("listing the certificate requests of BMC %s: %w", p.Obj.Name, err)
	}
	deleted := false
	for i := range list.Items {
		csr := &list.Items[i]
		if csr.Name == requestName(p.Obj.Name, keep) || !csr.DeletionTimestamp.IsZero() {
			continue
		}
		if err := p.Client().Delete(ctx, csr); client.IgnoreNotFound(err) != nil {
			return deleted, fmt.Errorf("removing CertificateSigningRequest %s: %w", csr.Name, err)
		}
		deleted = true
	}
	return deleted, nil
}

// startStep begins an attempt when one is due: no certificate yet, the signer changed, or the
// renewal time passed. It only numbers it (one write): the BMC is asked for a key next pass.
func (r *Reconciler) startStep(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	rec, spec := p.rec, p.Obj.Spec.Certificate
	if rec.Requesting {
		return lifecycle.Continue(), nil
	}
	digest := specDigest(spec)
	if rec.Denied && rec.Spec == digest {
		return lifecycle.Continue(), nil
	}
	why := ""
	switch {
	case rec.Fingerprint == "":
		why = "certificate requested"
	case rec.Signer != spec.SignerName:
		why = "signer changed: certificate requested"
	case !r.now().Before(renewAt(rec, spec)):
		why = "renewal requested"
	default:
		return lifecycle.Continue(), nil
	}
	rec.Attempt++
	rec.Requesting, rec.Denied, rec.Spec, rec.Signer = true, false, digest, spec.SignerName
	return r.writeRecord(ctx, p, rec, nil, why)
}

// requestStep carries the attempt under way one step on: a key and its request, then, once
// signed, the install.
func (r *Reconciler) requestStep(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	if !p.rec.Requesting {
		return lifecycle.Continue(), nil
	}
	if p.csr == nil {
		return r.requestKey(ctx, p)
	}
	csr := p.csr
	for _, c := range csr.Status.Conditions {
		if (c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed) && c.Status == corev1.ConditionTrue {
			rec := p.rec
			rec.Requesting, rec.Denied = false, true
			return r.writeRecord(ctx, p, rec, nil, "request denied")
		}
	}
	if len(csr.Status.Certificate) == 0 {
		return lifecycle.Continue(), nil // the report says it waits; the request's change brings the next pass
	}
	return r.install(ctx, p)
}

// requestKey asks the proven BMC for a key and makes the attempt's request with it. A crash
// between the two asks again under the same name: the BMC keeps only its newest key, and that
// is the one the request carries.
func (r *Reconciler) requestKey(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	b, spec := p.Obj, p.Obj.Spec.Certificate
	host, err := bmcaccess.Host(ctx, p.Client(), b)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, err)
	}
	conn, err := bmcaccess.ProvenBMC(p.bctx, p.Client(), r.Pool, b)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("reaching the BMC: %w", err))
	}
	req := csrRequest(b, spec, host)
	pemCSR, collection, err := conn.GenerateCSR(p.bctx, req)
	if errors.Is(err, bmc.ErrNoCertificateService) {
		return r.failed(p, metalv1alpha1.ReasonCertificateUnsupported, err)
	}
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("GenerateCSR: %w", err))
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:            requestName(b.Name, p.rec.Attempt),
			Labels:          map[string]string{BMCLabel: b.Name},
			Annotations:     map[string]string{attemptAnnotation: strconv.Itoa(p.rec.Attempt), collectionAnnotation: collection},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(b, metalv1alpha1.GroupVersion.WithKind("BMC"))},
		},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    []byte(pemCSR),
			SignerName: spec.SignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth},
		},
	}
	if spec.Duration != nil && spec.Duration.Duration > 0 {
		secs := int32(spec.Duration.Seconds())
		csr.Spec.ExpirationSeconds = &secs
	}
	if err := p.Client().Create(ctx, csr); err != nil && !apierrors.IsAlreadyExists(err) {
		return lifecycle.Result{}, fmt.Errorf("creating CertificateSigningRequest %s: %w", csr.Name, err)
	}
	return lifecycle.Wrote("certificate request made"), nil
}

// csrRequest is what the BMC is asked to make a key and request for: its hostname and address
// as names, the subject the spec gives (with the fields many BMCs insist on).
func csrRequest(b *metalv1alpha1.BMC, spec *metalv1alpha1.BMCCertificate, host string) bmc.CSRRequest {
	names := []string{}
	if b.Spec.Hostname != nil && *b.Spec.Hostname != "" {
		names = append(names, *b.Spec.Hostname)
	}
	if h := strings.Trim(host, "[]"); h != "" && (len(names) == 0 || names[0] != h) {
		names = append(names, h)
	}
	cn := spec.CommonName
	if cn == "" && len(names) > 0 {
		cn = names[0]
	}
	return bmc.CSRRequest{
		CommonName:         cn,
		AlternativeNames:   names,
		Organization:       cmpStr(spec.Organization, "metalhub"),
		OrganizationalUnit: cmpStr(spec.OrganizationalUnit, "BMC"),
		City:               cmpStr(spec.City, "-"),
		State:              cmpStr(spec.State, "-"),
		Country:            cmpStr(spec.Country, "US"),
	}
}

// install puts the signed certificate on the BMC, once it is proven to be for the key the
// request carries and signed by the CA; one the BMC already serves (a crash after the install)
// is recorded without a second install. One the BMC refuses (it holds another key now) starts a
// new attempt.
func (r *Reconciler) install(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	b, csr, spec := p.Obj, p.csr, p.Obj.Spec.Certificate
	chain, err := parseChain(csr.Status.Certificate)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, fmt.Errorf("the certificate of %s: %w", csr.Name, err))
	}
	leaf := chain[0]
	if err := sameKey(csr.Spec.Request, leaf); err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, fmt.Errorf("the certificate of %s: %w", csr.Name, err))
	}
	ca, err := r.caBundle(ctx, spec.CABundleRef)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, err)
	}
	if err := verify(ca, chain, r.now()); err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, fmt.Errorf("the certificate of %s is not signed by the CA of %s/%s: %w", csr.Name, spec.CABundleRef.Namespace, spec.CABundleRef.Name, err))
	}
	conn, err := bmcaccess.ProvenBMC(p.bctx, p.Client(), r.Pool, b)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("reaching the BMC: %w", err))
	}
	fp := bmcaccess.Fingerprint(leaf.Raw)
	certs, err := conn.Certificates(p.bctx)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("reading the BMC's certificates: %w", err))
	}
	target, already := "", false
	coll := csr.Annotations[collectionAnnotation]
	for _, c := range certs {
		if c.Fingerprint == fp {
			already = true
		}
		if target == "" && (coll == "" || c.Collection == coll) {
			target = c.URI
		}
	}
	if !already {
		if target == "" {
			return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("the BMC shows no HTTPS certificate to replace in %s", coll))
		}
		err := conn.ReplaceCertificate(p.bctx, target, string(csr.Status.Certificate))
		if errors.Is(err, bmc.ErrCertificateRefused) {
			// The BMC holds another key now (asked by someone else, or reset): a new attempt.
			r.Recorder.Eventf(b, csr, corev1.EventTypeWarning, metalv1alpha1.ReasonCertificateFailed, "Install",
				"the BMC refused the certificate of %s (%v): a new request is made", csr.Name, err)
			rec := p.rec
			rec.Attempt++
			return r.writeRecord(ctx, p, rec, nil, "certificate refused: new attempt")
		}
		if err != nil {
			return r.failed(p, metalv1alpha1.ReasonCertificateFailed, fmt.Errorf("ReplaceCertificate: %w", err))
		}
	}
	rec := p.rec
	sameCA := string(ca) == b.Annotations[bmcaccess.CertificateCAAnnotation]
	rec.Requesting, rec.Denied = false, false
	rec.Signer = spec.SignerName
	rec.Fingerprint, rec.Serial = fp, fmt.Sprintf("%x", leaf.SerialNumber)
	rec.Issuer, rec.Subject = leaf.Issuer.String(), leaf.Subject.String()
	rec.NotBefore, rec.NotAfter = leaf.NotBefore.UTC(), leaf.NotAfter.UTC()
	// Still pinned only where the CA is the same one: a new CA pins once the BMC is seen
	// serving a certificate it signed.
	rec.Pinned = rec.Pinned && sameCA
	r.Recorder.Eventf(b, csr, corev1.EventTypeNormal, metalv1alpha1.ReasonCertificateInstalled, "Install",
		"certificate %s (until %s) installed from %s", rec.Serial, rec.NotAfter.Format("2006-01-02T15:04:05Z"), csr.Name)
	return r.writeRecord(ctx, p, rec, ca, "certificate installed")
}

// caBundle reads the signer's CA bundle.
func (r *Reconciler) caBundle(ctx context.Context, ref metalv1alpha1.CABundleReference) ([]byte, error) {
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cm); err != nil {
		return nil, fmt.Errorf("reading the CA bundle ConfigMap %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	key := cmpStr(ref.Key, "ca.crt")
	v := cm.Data[key]
	if v == "" {
		return nil, fmt.Errorf("ConfigMap %s/%s has no %s", ref.Namespace, ref.Name, key)
	}
	if _, err := parseChain([]byte(v)); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", ref.Namespace, ref.Name, key, err)
	}
	return []byte(v), nil
}

// parseChain parses PEM certificates, leaf first.
func parseChain(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, data = pem.Decode(data)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing a certificate: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// sameKey checks that leaf certifies the key of the PEM request.
func sameKey(request []byte, leaf *x509.Certificate) error {
	blk, _ := pem.Decode(request)
	if blk == nil {
		return errors.New("the request is not PEM")
	}
	req, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return fmt.Errorf("parsing the request: %w", err)
	}
	if k, ok := req.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !k.Equal(leaf.PublicKey) {
		return errors.New("it is not for the key the BMC made")
	}
	return nil
}

// verify checks chain against the CA bundle, for server authentication.
func verify(ca []byte, chain []*x509.Certificate, now time.Time) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return errors.New("the CA bundle holds no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// tlsTarget is the host:port and server name a BMC's HTTPS is reached at ("" for plain HTTP).
func tlsTarget(b *metalv1alpha1.BMC, host string) (addr, serverName string, err error) {
	u, err := url.Parse(index.Address(b.Spec.Protocol, host))
	if err != nil {
		return "", "", fmt.Errorf("parsing the BMC's address: %w", err)
	}
	if u.Scheme != "https" {
		return "", "", nil
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), u.Hostname(), nil
}
