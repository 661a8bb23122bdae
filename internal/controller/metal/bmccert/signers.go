package bmccert

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificaterequests,verbs=get;list;watch;create;delete

// A BMC's request goes to one of two signers: a Kubernetes CertificateSigningRequest for a
// signer name, or a cert-manager CertificateRequest for an issuer (read as unstructured: no
// dependency on cert-manager's module, and none on it being installed unless a BMC asks).

// CertificateRequestGVK is cert-manager's CertificateRequest.
var CertificateRequestGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "CertificateRequest"}

// request is a signing request as the controller reads it, whichever API carries it.
type request struct {
	obj  client.Object
	kind string
	// csrPEM is what the BMC made; collection is its certificate collection.
	csrPEM     []byte
	collection string
	denied     bool
	// cert (PEM, leaf first) once signed; ca the issuer's CA where the signer reports it.
	cert, ca []byte
}

func (q *request) name() string { return q.obj.GetName() }

// signer makes and reads a BMC's requests.
type signer interface {
	get(ctx context.Context, c client.Reader, name string) (*request, error)
	create(ctx context.Context, c client.Writer, b *metalv1alpha1.BMC, name string, csrPEM []byte, collection string, attempt int) error
	String() string
}

// signerID names the signer a spec asks for, as the record keeps it: the signer name, or the
// issuer as group/kind/namespace/name.
func signerID(spec *metalv1alpha1.BMCCertificate) string {
	if ref := spec.IssuerRef; ref != nil {
		group := ref.Group
		if group == "" {
			group = "cert-manager.io"
		}
		return group + "/" + kindOr(ref.Kind) + "/" + ref.Namespace + "/" + ref.Name
	}
	return spec.SignerName
}

func signerOf(spec *metalv1alpha1.BMCCertificate) signer {
	if spec.IssuerRef != nil {
		return certManager{ref: *spec.IssuerRef}
	}
	return kubeCSR{signerName: spec.SignerName}
}

// requestMeta is the metadata every request of a BMC carries.
func requestMeta(b *metalv1alpha1.BMC, name, namespace, collection string, attempt int) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: namespace,
		Labels:          map[string]string{BMCLabel: b.Name},
		Annotations:     map[string]string{attemptAnnotation: strconv.Itoa(attempt), collectionAnnotation: collection},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(b, metalv1alpha1.GroupVersion.WithKind("BMC"))},
	}
}

// usages a BMC's serving certificate is asked for, in the spelling both APIs share.
var usages = []string{"digital signature", "key encipherment", "server auth"}

// kubeCSR is the Kubernetes CertificateSigningRequest API.
type kubeCSR struct{ signerName string }

func (k kubeCSR) String() string { return "signer " + k.signerName }

func (k kubeCSR) get(ctx context.Context, c client.Reader, name string) (*request, error) {
	csr := &certificatesv1.CertificateSigningRequest{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, csr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading CertificateSigningRequest %s: %w", name, err)
	}
	q := &request{obj: csr, kind: "CertificateSigningRequest", csrPEM: csr.Spec.Request, collection: csr.Annotations[collectionAnnotation], cert: csr.Status.Certificate}
	for _, cond := range csr.Status.Conditions {
		if (cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed) && cond.Status == "True" {
			q.denied = true
		}
	}
	return q, nil
}

func (k kubeCSR) create(ctx context.Context, c client.Writer, b *metalv1alpha1.BMC, name string, csrPEM []byte, collection string, attempt int) error {
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: requestMeta(b, name, "", collection, attempt),
		Spec:       certificatesv1.CertificateSigningRequestSpec{Request: csrPEM, SignerName: k.signerName},
	}
	for _, u := range usages {
		csr.Spec.Usages = append(csr.Spec.Usages, certificatesv1.KeyUsage(u))
	}
	if d := b.Spec.Certificate.Duration; d != nil && d.Duration > 0 {
		secs := int32(d.Seconds())
		csr.Spec.ExpirationSeconds = &secs
	}
	if err := c.Create(ctx, csr); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CertificateSigningRequest %s: %w", name, err)
	}
	return nil
}

// certManager is cert-manager's CertificateRequest API.
type certManager struct {
	ref metalv1alpha1.CertManagerIssuerRef
}

func (m certManager) String() string {
	return fmt.Sprintf("cert-manager %s %s", kindOr(m.ref.Kind), m.ref.Name)
}

func kindOr(k string) string {
	if k == "" {
		return "Issuer"
	}
	return k
}

func newCertificateRequest() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(CertificateRequestGVK)
	return u
}

func (m certManager) get(ctx context.Context, c client.Reader, name string) (*request, error) {
	u := newCertificateRequest()
	if err := c.Get(ctx, client.ObjectKey{Namespace: m.ref.Namespace, Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading CertificateRequest %s/%s: %w", m.ref.Namespace, name, err)
	}
	q := &request{obj: u, kind: "CertificateRequest", collection: u.GetAnnotations()[collectionAnnotation]}
	var err error
	if q.csrPEM, err = b64Field(u, "spec", "request"); err != nil {
		return nil, err
	}
	if q.cert, err = b64Field(u, "status", "certificate"); err != nil {
		return nil, err
	}
	if q.ca, err = b64Field(u, "status", "ca"); err != nil {
		return nil, err
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, raw := range conds {
		cond, _ := raw.(map[string]any)
		typ, _ := cond["type"].(string)
		status, _ := cond["status"].(string)
		reason, _ := cond["reason"].(string)
		switch {
		case (typ == "Denied" || typ == "InvalidRequest") && status == "True":
			q.denied = true
		case typ == "Ready" && status == "False" && (reason == "Failed" || reason == "Denied"):
			q.denied = true
		}
	}
	return q, nil
}

// b64Field reads a base64 field ([]byte in cert-manager's types); absent is nil.
func b64Field(u *unstructured.Unstructured, path ...string) ([]byte, error) {
	v, ok, _ := unstructured.NestedString(u.Object, path...)
	if !ok || v == "" {
		return nil, nil
	}
	out, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("CertificateRequest %s/%s: %v: %w", u.GetNamespace(), u.GetName(), path, err)
	}
	return out, nil
}

func (m certManager) create(ctx context.Context, c client.Writer, b *metalv1alpha1.BMC, name string, csrPEM []byte, collection string, attempt int) error {
	u := newCertificateRequest()
	meta := requestMeta(b, name, m.ref.Namespace, collection, attempt)
	u.SetName(meta.Name)
	u.SetNamespace(meta.Namespace)
	u.SetLabels(meta.Labels)
	u.SetAnnotations(meta.Annotations)
	u.SetOwnerReferences(meta.OwnerReferences)
	group := m.ref.Group
	if group == "" {
		group = "cert-manager.io"
	}
	spec := map[string]any{
		"request":   base64.StdEncoding.EncodeToString(csrPEM),
		"issuerRef": map[string]any{"name": m.ref.Name, "kind": kindOr(m.ref.Kind), "group": group},
		"usages":    append([]any{}, usages[0], usages[1], usages[2]),
	}
	if d := b.Spec.Certificate.Duration; d != nil && d.Duration > 0 {
		spec["duration"] = d.Duration.String()
	}
	u.Object["spec"] = spec
	if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CertificateRequest %s/%s: %w", m.ref.Namespace, name, err)
	}
	return nil
}
