package bmccert

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// certManagerClient is fakeClient with cert-manager's CertificateRequest served.
func certManagerClient(objs ...client.Object) client.Client {
	sch := scheme.New()
	mapper := meta.NewDefaultRESTMapper(nil)
	for gvk := range sch.AllKnownTypes() {
		mapper.Add(gvk, meta.RESTScopeRoot)
	}
	mapper.Add(CertificateRequestGVK, meta.RESTScopeNamespace)
	fb := fake.NewClientBuilder().WithScheme(sch).WithRESTMapper(mapper).WithObjects(objs...).WithStatusSubresource(&metalv1alpha1.BMC{})
	for _, i := range index.All() {
		fb = fb.WithIndex(i.Obj, i.Name, i.Fn)
	}
	return fb.Build()
}

func issuerSpec(o *metalv1alpha1.BMC) {
	o.Spec.Certificate.SignerName, o.Spec.Certificate.CABundleRef = "", nil
	o.Spec.Certificate.IssuerRef = &metalv1alpha1.CertManagerIssuerRef{Name: "bmc-issuer", Kind: "ClusterIssuer", Namespace: "pki"}
}

// certificateRequests lists the BMC's cert-manager requests.
func (g *rig) certificateRequests() []unstructured.Unstructured {
	g.t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(CertificateRequestGVK.GroupVersion().WithKind("CertificateRequestList"))
	if err := g.c.List(context.Background(), list, client.MatchingLabels{BMCLabel: g.name}); err != nil {
		g.t.Fatal(err)
	}
	return list.Items
}

// With an issuerRef the request is a cert-manager CertificateRequest in the issuer's namespace,
// and the CA to pin to is the one cert-manager reports with the certificate: no CA bundle to
// name. Without cert-manager served, such a BMC says so and asks nothing of anyone.
func TestCertificateThroughCertManager(t *testing.T) {
	b := takeBMC(t)
	ca := testenv.NewCA(t, "cert-manager-ca")
	c := certManagerClient(objects(b, "cm", ca, issuerSpec)...)
	g := newRig(t, c, "cm")

	g.r.CertManager = false
	obj := g.settle(10)
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateUnsupported) || len(g.certificateRequests()) != 0 {
		t.Fatalf("without cert-manager: %s, %d requests", reason(obj), len(g.certificateRequests()))
	}

	g.r.CertManager = true
	since := lastSeq()
	obj = g.settle(10)
	crs := g.certificateRequests()
	if len(crs) != 1 || crs[0].GetNamespace() != "pki" {
		t.Fatalf("requests %v; %s", crs, reason(obj))
	}
	cr := crs[0]
	if kind, _, _ := unstructured.NestedString(cr.Object, "spec", "issuerRef", "kind"); kind != "ClusterIssuer" {
		t.Fatalf("issuerRef kind %q", kind)
	}
	// cert-manager issues it, with its CA.
	raw, _, _ := unstructured.NestedString(cr.Object, "spec", "request")
	csrPEM, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		t.Fatal(err)
	}
	cert := ca.Sign(t, csrPEM, time.Now().Add(-time.Minute), time.Hour)
	_ = unstructured.SetNestedField(cr.Object, base64.StdEncoding.EncodeToString(cert), "status", "certificate")
	_ = unstructured.SetNestedField(cr.Object, base64.StdEncoding.EncodeToString(ca.PEM), "status", "ca")
	_ = unstructured.SetNestedSlice(cr.Object, []any{map[string]any{"type": "Ready", "status": "True", "reason": "Issued"}}, "status", "conditions")
	if err := c.Update(context.Background(), &cr); err != nil {
		t.Fatal(err)
	}
	if got := g.certificateRequests(); len(got) != 1 || got[0].Object["status"] == nil {
		t.Fatalf("the issued request reads back as %v", got)
	}
	obj = g.settle(10)
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateInstalled) || !obj.Status.Certificate.Pinned {
		t.Fatalf("condition %s, status %+v", reason(obj), obj.Status.Certificate)
	}
	if got := obj.Status.Certificate.SignerName; got != "cert-manager.io/ClusterIssuer/pki/bmc-issuer" {
		t.Fatalf("signer %q", got)
	}
	if gen, rep := certActions(b, since); gen != 1 || rep != 1 {
		t.Fatalf("GenerateCSR %d, ReplaceCertificate %d", gen, rep)
	}
	if len(g.certificateRequests()) != 0 {
		t.Fatal("the CertificateRequest was left behind")
	}
	if err := verifiedConn(t, c, obj); err != nil {
		t.Fatalf("a connection verified against cert-manager's CA: %v", err)
	}
}
