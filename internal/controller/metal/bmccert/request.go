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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	if p.Obj.Spec.Certificate.IssuerRef != nil && !r.CertManager {
		return r.failed(p, metalv1alpha1.ReasonCertificateUnsupported, errors.New("spec.certificate.issuerRef names a cert-manager issuer, but cert-manager's CertificateRequest API was not served when the operator started: install cert-manager and restart the operator, or use signerName"))
	}
	q, err := signerOf(p.Obj.Spec.Certificate).get(ctx, p.Client(), requestName(p.Obj.Name, p.rec.Attempt))
	if err != nil {
		return lifecycle.Result{}, err
	}
	p.req = q
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

// deleteRequests deletes the BMC's requests (of either API) but attempt keep's; it says
// whether it deleted any.
func (r *Reconciler) deleteRequests(ctx context.Context, p *certPass, keep int) (bool, error) {
	csrs := &certificatesv1.CertificateSigningRequestList{}
	if err := r.Client.List(ctx, csrs, client.MatchingLabels{BMCLabel: p.Obj.Name}); err != nil {
		return false, fmt.Errorf("listing the certificate requests of BMC %s: %w", p.Obj.Name, err)
	}
	var objs []client.Object
	for i := range csrs.Items {
		objs = append(objs, &csrs.Items[i])
	}
	if r.CertManager {
		crs := &unstructured.UnstructuredList{}
		crs.SetGroupVersionKind(CertificateRequestGVK.GroupVersion().WithKind("CertificateRequestList"))
		if err := r.Client.List(ctx, crs, client.MatchingLabels{BMCLabel: p.Obj.Name}); err != nil {
			return false, fmt.Errorf("listing the cert-manager requests of BMC %s: %w", p.Obj.Name, err)
		}
		for i := range crs.Items {
			objs = append(objs, &crs.Items[i])
		}
	}
	deleted := false
	for _, o := range objs {
		if o.GetName() == requestName(p.Obj.Name, keep) || o.GetDeletionTimestamp() != nil {
			continue
		}
		if err := p.Client().Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return deleted, fmt.Errorf("removing certificate request %s: %w", o.GetName(), err)
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
	case rec.Signer != signerID(spec):
		why = "signer changed: certificate requested"
	case !r.now().Before(renewAt(rec, spec)):
		why = "renewal requested"
	default:
		return lifecycle.Continue(), nil
	}
	rec.Attempt++
	rec.Requesting, rec.Denied, rec.Spec, rec.Signer = true, false, digest, signerID(spec)
	return r.writeRecord(ctx, p, rec, nil, why)
}

// requestStep carries the attempt under way one step on: a key and its request, then, once
// signed, the install.
func (r *Reconciler) requestStep(ctx context.Context, p *certPass) (lifecycle.Result, error) {
	if !p.rec.Requesting {
		return lifecycle.Continue(), nil
	}
	if p.req == nil {
		return r.requestKey(ctx, p)
	}
	if p.req.denied {
		rec := p.rec
		rec.Requesting, rec.Denied = false, true
		return r.writeRecord(ctx, p, rec, nil, "request denied")
	}
	if len(p.req.cert) == 0 {
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
	if err := signerOf(spec).create(ctx, p.Client(), b, requestName(b.Name, p.rec.Attempt), []byte(pemCSR), collection, p.rec.Attempt); err != nil {
		return lifecycle.Result{}, err
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
	b, q, spec := p.Obj, p.req, p.Obj.Spec.Certificate
	chain, err := parseChain(q.cert)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, fmt.Errorf("the certificate of %s %s: %w", q.kind, q.name(), err))
	}
	leaf := chain[0]
	if err := sameKey(q.csrPEM, leaf); err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, fmt.Errorf("the certificate of %s %s: %w", q.kind, q.name(), err))
	}
	ca, from, err := r.caBundle(ctx, spec, q)
	if err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, err)
	}
	if err := verify(ca, chain, r.now()); err != nil {
		return r.failed(p, metalv1alpha1.ReasonCertificateInvalid, fmt.Errorf("the certificate of %s %s is not signed by the CA of %s: %w", q.kind, q.name(), from, err))
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
	coll := q.collection
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
		err := conn.ReplaceCertificate(p.bctx, target, string(q.cert))
		if errors.Is(err, bmc.ErrCertificateRefused) {
			// The BMC holds another key now (asked by someone else, or reset): a new attempt.
			r.Recorder.Eventf(b, q.obj, corev1.EventTypeWarning, metalv1alpha1.ReasonCertificateFailed, "Install",
				"the BMC refused the certificate of %s %s (%v): a new request is made", q.kind, q.name(), err)
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
	rec.Signer = signerID(spec)
	rec.Fingerprint, rec.Serial = fp, fmt.Sprintf("%x", leaf.SerialNumber)
	rec.Issuer, rec.Subject = leaf.Issuer.String(), leaf.Subject.String()
	rec.NotBefore, rec.NotAfter = leaf.NotBefore.UTC(), leaf.NotAfter.UTC()
	// Still pinned only where the CA is the same one: a new CA pins once the BMC is seen
	// serving a certificate it signed.
	rec.Pinned = rec.Pinned && sameCA
	r.Recorder.Eventf(b, q.obj, corev1.EventTypeNormal, metalv1alpha1.ReasonCertificateInstalled, "Install",
		"certificate %s (until %s) installed from %s %s", rec.Serial, rec.NotAfter.Format("2006-01-02T15:04:05Z"), q.kind, q.name())
	return r.writeRecord(ctx, p, rec, ca, "certificate installed")
}

// caBundle is the CA the certificate must chain to, and where it came from: the ConfigMap the
// spec names, else the CA the signer reported with the certificate (cert-manager's status.ca).
func (r *Reconciler) caBundle(ctx context.Context, spec *metalv1alpha1.BMCCertificate, q *request) ([]byte, string, error) {
	ref := spec.CABundleRef
	if ref == nil {
		if len(q.ca) == 0 {
			return nil, "", fmt.Errorf("%s %s reports no CA with its certificate: name the issuer's CA in spec.certificate.caBundleRef", q.kind, q.name())
		}
		if _, err := parseChain(q.ca); err != nil {
			return nil, "", fmt.Errorf("the CA %s %s reports: %w", q.kind, q.name(), err)
		}
		return q.ca, q.kind + " " + q.name(), nil
	}
	from := "ConfigMap " + ref.Namespace + "/" + ref.Name
	cm := &corev1.ConfigMap{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, cm); err != nil {
		return nil, from, fmt.Errorf("reading the CA bundle %s: %w", from, err)
	}
	key := cmpStr(ref.Key, "ca.crt")
	v := cm.Data[key]
	if v == "" {
		return nil, from, fmt.Errorf("%s has no %s", from, key)
	}
	if _, err := parseChain([]byte(v)); err != nil {
		return nil, from, fmt.Errorf("%s key %s: %w", from, key, err)
	}
	return []byte(v), from, nil
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
