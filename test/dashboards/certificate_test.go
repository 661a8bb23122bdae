package dashboards

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	dto "github.com/prometheus/client_model/go"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccert"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// certificateScrape puts a certificate on an emulated BMC through the certificate controller
// (a test CA signing its request) and returns the certificate metrics it exported.
func certificateScrape(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	em, err := redfish.Start(redfish.Options{BMCs: 1, TLS: true, PowerDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = em.Close() })
	b := em.BMC(0)
	port, _ := strconv.Atoi(b.URL()[strings.LastIndex(b.URL(), ":")+1:])
	ca := testenv.NewCA(t, "dashboard-ca")
	objs := []client.Object{
		&metalv1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Name: "dash", Annotations: map[string]string{bmcaccess.InsecureAnnotation: "true"}},
			Spec: metalv1alpha1.BMCSpec{
				Access: &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"}, BMCSecretRef: corev1.LocalObjectReference{Name: "dash"},
				Protocol:    metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: "https"},
				Certificate: &metalv1alpha1.BMCCertificate{SignerName: "example.com/bmc", CABundleRef: &metalv1alpha1.CABundleReference{Namespace: "pki", Name: "ca"}},
			}},
		&metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "dash"},
			Data: map[string][]byte{metalv1alpha1.BMCSecretUsernameKey: []byte("admin"), metalv1alpha1.BMCSecretPasswordKey: []byte("password")}},
		&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "dash-1"},
			Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToLower(b.Systems()[0].UUID()), BMCRef: &corev1.LocalObjectReference{Name: "dash"}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "pki", Name: "ca"}, Data: map[string]string{"ca.crt": string(ca.PEM)}},
	}
	fb := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(&metalv1alpha1.BMC{})
	for _, i := range index.All() {
		fb = fb.WithIndex(i.Obj, i.Name, i.Fn)
	}
	c := fb.Build()
	pool := bmc.NewPool(bmc.Options{RequestTimeout: 5 * time.Second})
	t.Cleanup(pool.Close)
	passes := (&bmccert.Reconciler{Client: c, APIReader: c, Pool: pool, Recorder: events.NewFakeRecorder(100),
		RetryAfter: time.Second, Resync: time.Minute, RequestTimeout: 5 * time.Second}).NewPasses()
	ctx := context.Background()
	for i := 0; ; i++ {
		if i == 20 {
			t.Fatal("the certificate was not installed within 20 passes")
		}
		if _, err := passes.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "dash"}}); err != nil {
			t.Fatal(err)
		}
		obj := &metalv1alpha1.BMC{}
		if err := c.Get(ctx, client.ObjectKey{Name: "dash"}, obj); err != nil {
			t.Fatal(err)
		}
		if obj.Status.Certificate != nil && obj.Status.Certificate.Pinned {
			break
		}
		list := &certificatesv1.CertificateSigningRequestList{}
		if err := c.List(ctx, list); err != nil {
			t.Fatal(err)
		}
		for k := range list.Items {
			if r := &list.Items[k]; len(r.Status.Certificate) == 0 {
				r.Status.Certificate = ca.Sign(t, r.Spec.Request, time.Now().Add(-time.Minute), 90*24*time.Hour)
				if err := c.Status().Update(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.MetricFamily
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "metalhub_bmc_certificate_") {
			out = append(out, mf)
		}
	}
	if len(out) == 0 {
		t.Fatal("no certificate metric was exported")
	}
	return out
}
