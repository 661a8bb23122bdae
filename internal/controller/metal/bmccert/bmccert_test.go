package bmccert

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// The single-pass tests drive the controller pass by pass on a fake client, against BMCs of an
// emulated fleet that serves HTTPS with the certificates their CertificateService manages. The
// signer is the test's own CA, signing what the test lets it sign. The envtest beside them runs
// the controller in a manager against a real API server.

const testSigner = "example.com/bmc-serving"

var em *redfish.Emulator

func TestMain(m *testing.M) {
	var err error
	if em, err = redfish.Start(redfish.Options{BMCs: 13, TLS: true, PowerDelay: -1}); err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = em.Close()
	os.Exit(code)
}

var taken struct {
	sync.Mutex
	n int
}

// takeBMC gives a test a BMC of its own.
func takeBMC(t *testing.T) *redfish.BMC {
	t.Helper()
	taken.Lock()
	defer taken.Unlock()
	if taken.n >= len(em.BMCs()) {
		t.Fatal("the fleet is used up")
	}
	taken.n++
	return em.BMC(taken.n - 1)
}

// objects are what a BMC with a certificate asked needs: the BMC (insecure: it starts
// self-signed), its Secret, a Server of its machine (the proof), the CA bundle.
func objects(b *redfish.BMC, name string, ca *testenv.CA, mutate ...func(*metalv1alpha1.BMC)) []client.Object {
	port := 0
	fmt.Sscanf(b.URL()[strings.LastIndex(b.URL(), ":")+1:], "%d", &port)
	bmcObj := &metalv1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{bmcaccess.InsecureAnnotation: "true"}},
		Spec: metalv1alpha1.BMCSpec{
			Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"},
			BMCSecretRef: corev1.LocalObjectReference{Name: name},
			Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: "https"},
			Certificate: &metalv1alpha1.BMCCertificate{SignerName: testSigner,
				CABundleRef: &metalv1alpha1.CABundleReference{Namespace: "certs", Name: "ca-" + name}},
		},
	}
	for _, m := range mutate {
		m(bmcObj)
	}
	sec := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string][]byte{metalv1alpha1.BMCSecretUsernameKey: []byte("admin"), metalv1alpha1.BMCSecretPasswordKey: []byte("password")}}
	srv := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: name + "-1"},
		Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToLower(b.Systems()[0].UUID()), BMCRef: &corev1.LocalObjectReference{Name: name}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "certs", Name: "ca-" + name}, Data: map[string]string{"ca.crt": string(ca.PEM)}}
	return []client.Object{bmcObj, sec, srv, cm}
}

func fakeClient(objs ...client.Object) client.Client {
	fb := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).WithStatusSubresource(&metalv1alpha1.BMC{})
	for _, i := range index.All() {
		fb = fb.WithIndex(i.Obj, i.Name, i.Fn)
	}
	return fb.Build()
}

// setup gives a test a BMC of its own, a CA, and the rig for a BMC object named name asking for a
// certificate from that CA.
func setup(t *testing.T, name, caName string, mutate ...func(*metalv1alpha1.BMC)) (*redfish.BMC, *testenv.CA, client.Client, *rig) {
	t.Helper()
	b := takeBMC(t)
	ca := testenv.NewCA(t, caName)
	c := fakeClient(objects(b, name, ca, mutate...)...)
	return b, ca, c, newRig(t, c, name)
}

// rig is one BMC's controller on a fake client, passes driven by the test.
type rig struct {
	t    *testing.T
	c    client.Client
	r    *Reconciler
	rec  *lifecycle.Reconciler[*metalv1alpha1.BMC]
	name string
	now  time.Time
}

func newRig(t *testing.T, c client.Client, name string) *rig {
	return newRigWith(t, c, name, 5*time.Second, 0)
}

// newRigWith is newRig with the request and pass timeouts given.
func newRigWith(t *testing.T, c client.Client, name string, request, pass time.Duration) *rig {
	g := &rig{t: t, c: c, name: name, now: time.Now()}
	g.r = &Reconciler{Client: c, APIReader: c, Pool: bmc.NewPool(bmc.Options{RequestTimeout: request}), Recorder: events.NewFakeRecorder(100),
		RetryAfter: time.Second, Resync: time.Minute, RequestTimeout: request, PassTimeout: pass, Now: func() time.Time { return g.now }}
	g.rec = g.r.NewPasses()
	t.Cleanup(g.r.Pool.Close)
	return g
}

// pass runs one pass and returns the BMC after it.
func (g *rig) pass() *metalv1alpha1.BMC {
	g.t.Helper()
	if _, err := g.rec.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Name: g.name}}); err != nil {
		g.t.Fatalf("pass: %v", err)
	}
	return g.bmc()
}

func (g *rig) bmc() *metalv1alpha1.BMC {
	g.t.Helper()
	b := &metalv1alpha1.BMC{}
	if err := g.c.Get(context.Background(), client.ObjectKey{Name: g.name}, b); err != nil {
		g.t.Fatal(err)
	}
	return b
}

// requests lists the BMC's certificate requests.
func (g *rig) requests() []certificatesv1.CertificateSigningRequest {
	g.t.Helper()
	list := &certificatesv1.CertificateSigningRequestList{}
	if err := g.c.List(context.Background(), list, client.MatchingLabels{BMCLabel: g.name}); err != nil {
		g.t.Fatal(err)
	}
	return list.Items
}

// signAll signs every request of the BMC not signed yet, as an approver and signer would.
func (g *rig) signAll(ca *testenv.CA, lifetime time.Duration) int {
	g.t.Helper()
	n := 0
	for _, csr := range g.requests() {
		if len(csr.Status.Certificate) > 0 {
			continue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test"})
		// From the earlier of the test's clock and the wall clock: valid for the controller and
		// for the TLS handshakes alike.
		from := g.now
		if now := time.Now(); now.Before(from) {
			from = now
		}
		csr.Status.Certificate = ca.Sign(g.t, csr.Spec.Request, from.Add(-time.Minute), lifetime)
		if err := g.c.Status().Update(context.Background(), &csr); err != nil {
			g.t.Fatal(err)
		}
		n++
	}
	return n
}

// settle runs passes until one changes nothing, the BMC's requests included (at most max).
func (g *rig) settle(max int) *metalv1alpha1.BMC {
	g.t.Helper()
	var b *metalv1alpha1.BMC
	prev := ""
	for i := 0; i < max; i++ {
		b = g.pass()
		state := b.ResourceVersion
		for _, r := range g.requests() {
			state += "," + r.Name + "@" + r.ResourceVersion
		}
		if g.r.CertManager {
			for _, r := range g.certificateRequests() {
				state += "," + r.GetName() + "@" + r.GetResourceVersion()
			}
		}
		if state == prev {
			return b
		}
		prev = state
	}
	g.t.Fatalf("no settled state after %d passes: %s", max, reason(b))
	return b
}

// outsider is a client of b of its own, beside the controller's (verification off, like the
// tools that change a BMC behind an operator's back).
func outsider(t *testing.T, b *redfish.BMC) bmc.BMC {
	t.Helper()
	pool := bmc.NewPool(bmc.Options{RequestTimeout: 5 * time.Second})
	t.Cleanup(pool.Close)
	conn, err := pool.Get(bmc.Endpoint{Address: b.URL(), Username: "admin", Password: "password", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func certActions(b *redfish.BMC, since int64) (gen, replace int) {
	for _, r := range em.Records() {
		if r.BMC != b.Index() || r.Seq <= since {
			continue
		}
		switch r.Action {
		case redfish.ActionGenerateCSR:
			gen++
		case redfish.ActionReplaceCertificate:
			replace++
		}
	}
	return gen, replace
}

func lastSeq() int64 {
	recs := em.Records()
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Seq
}

func reason(b *metalv1alpha1.BMC) string {
	if c := apimeta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionCertificateReady); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "(none)"
}

// verifiedConn connects to the BMC as every controller does (bmcaccess.Endpoint) and reads its
// systems: with the BMC pinned, TLS is verified against the CA alone.
func verifiedConn(t *testing.T, c client.Client, b *metalv1alpha1.BMC) error {
	t.Helper()
	ep, err := bmcaccess.Endpoint(context.Background(), c, b)
	if err != nil {
		t.Fatal(err)
	}
	if ep.InsecureSkipVerify || len(ep.CACert) == 0 {
		t.Fatalf("endpoint insecure %v with %d bytes of CA: not pinned", ep.InsecureSkipVerify, len(ep.CACert))
	}
	pool := bmc.NewPool(bmc.Options{RequestTimeout: 5 * time.Second})
	defer pool.Close()
	conn, err := pool.Get(ep)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Systems(context.Background())
	return err
}

// The whole flow: a request made with the BMC's own key, signed, installed once, seen served,
// pinned; from then on connections verify the BMC against the CA alone, and one verified
// against another CA is refused. No request is left behind.
func TestCertificateInstalledAndPinned(t *testing.T) {
	b, ca, c, g := setup(t, "pin", "bmc-ca")
	since := lastSeq()
	obj := g.settle(10)
	if got := len(g.requests()); got != 1 {
		t.Fatalf("%d requests, want 1 waiting for the signer; %s", got, reason(obj))
	}
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateRequested) {
		t.Fatalf("condition %s", reason(obj))
	}
	g.signAll(ca, time.Hour)
	obj = g.settle(10)
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateInstalled) {
		t.Fatalf("condition %s", reason(obj))
	}
	st := obj.Status.Certificate
	if st == nil || !st.Pinned || st.Issuer != "CN=bmc-ca" || st.NotAfter == nil || st.RenewAfter == nil {
		t.Fatalf("status %+v", st)
	}
	if got := b.Certificate().Issuer.CommonName; got != "bmc-ca" {
		t.Fatalf("the BMC serves a certificate from %q", got)
	}
	if gen, rep := certActions(b, since); gen != 1 || rep != 1 {
		t.Fatalf("GenerateCSR %d, ReplaceCertificate %d: want one each", gen, rep)
	}
	if got := len(g.requests()); got != 0 {
		t.Fatalf("%d requests left behind", got)
	}
	if err := verifiedConn(t, c, obj); err != nil {
		t.Fatalf("a connection verified against the CA: %v", err)
	}
	// Verification is really on: the same BMC pinned to another CA is refused.
	other := obj.DeepCopy()
	other.Annotations[bmcaccess.CertificateCAAnnotation] = string(testenv.NewCA(t, "other-ca").PEM)
	if err := verifiedConn(t, c, other); err == nil {
		t.Fatal("a connection pinned to another CA was accepted")
	}
}

// A pass makes several requests in turn: on a BMC that answers each within the request timeout,
// but not all of a pass's within one, the certificate is still asked for and installed (the
// pass timeout bounds the pass, as it does the BMC's and the Server's passes).
func TestCertificateOnASlowBMC(t *testing.T) {
	b := takeBMC(t)
	ca := testenv.NewCA(t, "slow-ca")
	c := fakeClient(objects(b, "slow", ca)...)
	const request = 400 * time.Millisecond
	g := newRigWith(t, c, "slow", request, 10*request)
	b.SetFaults(redfish.Faults{Latency: redfish.Duration(request * 3 / 4)})
	t.Cleanup(func() { b.SetFaults(redfish.Faults{}) })
	obj := g.settle(10)
	if got := len(g.requests()); got != 1 {
		t.Fatalf("%d requests, want 1 waiting for the signer; %s", got, reason(obj))
	}
	g.signAll(ca, time.Hour)
	if obj = g.settle(10); !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateInstalled) {
		t.Fatalf("condition %s", reason(obj))
	}
	if got := b.Certificate().Issuer.CommonName; got != "slow-ca" {
		t.Fatalf("the BMC serves a certificate from %q", got)
	}
}

// A crash after the BMC made a key but before the request was recorded asks again under the same
// name; a crash after the install but before it was recorded finds it served and records it
// without a second install; a wiped status asks for nothing. Exactly one request at a time, one
// certificate installed.
func TestCertificateSurvivesCrashesAndWipes(t *testing.T) {
	b, ca, c, g := setup(t, "crash", "crash-ca")
	since := lastSeq()
	g.pass() // numbers the attempt
	// The pass that asks for the key dies after the BMC answered: the BMC holds that key.
	conn := outsider(t, b)
	if _, _, err := conn.GenerateCSR(context.Background(), bmc.CSRRequest{CommonName: "127.0.0.1", Organization: "o", OrganizationalUnit: "u", City: "c", State: "s", Country: "US"}); err != nil {
		t.Fatal(err)
	}
	obj := g.settle(10)
	reqs := g.requests()
	if len(reqs) != 1 || reqs[0].Name != requestName("crash", 1) {
		t.Fatalf("requests %v, want the one of attempt 1", names(reqs))
	}
	// Signed; the install pass dies after the BMC took the certificate.
	g.signAll(ca, time.Hour)
	signed := g.requests()[0]
	certs, err := conn.Certificates(context.Background())
	if err != nil || len(certs) == 0 {
		t.Fatalf("certificates: %v %v", certs, err)
	}
	if err := conn.ReplaceCertificate(context.Background(), certs[0].URI, string(signed.Status.Certificate)); err != nil {
		t.Fatal(err)
	}
	obj = g.settle(10)
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateInstalled) {
		t.Fatalf("condition %s", reason(obj))
	}
	if gen, rep := certActions(b, since); gen != 2 || rep != 1 {
		t.Fatalf("GenerateCSR %d (the crashed one and its retry), ReplaceCertificate %d: want 2 and 1", gen, rep)
	}
	installed := obj.Status.Certificate.SerialNumber
	// A wiped status: rebuilt from the bookkeeping, nothing asked of the BMC or the signer.
	obj.Status = metalv1alpha1.BMCStatus{}
	if err := c.Status().Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	before := lastSeq()
	obj = g.settle(10)
	if gen, rep := certActions(b, before); gen != 0 || rep != 0 || len(g.requests()) != 0 {
		t.Fatalf("after a wiped status: GenerateCSR %d, ReplaceCertificate %d, requests %d", gen, rep, len(g.requests()))
	}
	if obj.Status.Certificate == nil || obj.Status.Certificate.SerialNumber != installed || !obj.Status.Certificate.Pinned {
		t.Fatalf("status not rebuilt: %+v", obj.Status.Certificate)
	}
}

// Renewal comes at the configured share of the lifetime, well before expiry, with a new key; the
// BMC stays pinned across it (same CA). Past the renewal time with the signer silent, the
// condition warns before the certificate runs out.
func TestCertificateRenewedBeforeExpiry(t *testing.T) {
	b, ca, c, g := setup(t, "renew", "renew-ca", func(o *metalv1alpha1.BMC) { o.Spec.Certificate.RenewBeforePercent = 50 })
	g.settle(10)
	g.signAll(ca, 10*time.Minute)
	first := g.settle(10)
	if !first.Status.Certificate.Pinned {
		t.Fatalf("not pinned: %s", reason(first))
	}
	// Before the renewal time: nothing.
	g.now = first.Status.Certificate.RenewAfter.Add(-time.Second)
	if obj := g.settle(5); len(g.requests()) != 0 || obj.Status.Certificate.SerialNumber != first.Status.Certificate.SerialNumber {
		t.Fatalf("renewed early: %s", reason(obj))
	}
	// Past it: a new request; the signer does not answer for a while.
	g.now = first.Status.Certificate.RenewAfter.Add(time.Second)
	obj := g.settle(10)
	if len(g.requests()) != 1 || !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateInstalled) {
		t.Fatalf("requests %d, condition %s", len(g.requests()), reason(obj))
	}
	g.now = first.Status.Certificate.NotAfter.Add(-time.Minute)
	if obj = g.settle(5); !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateExpiring) {
		t.Fatalf("condition %s, want the expiry warned", reason(obj))
	}
	g.signAll(ca, 10*time.Minute)
	obj = g.settle(10)
	if obj.Status.Certificate.SerialNumber == first.Status.Certificate.SerialNumber || !obj.Status.Certificate.Pinned {
		t.Fatalf("not renewed: %+v, %s", obj.Status.Certificate, reason(obj))
	}
	if got := b.Certificate().SerialNumber.Text(16); got != obj.Status.Certificate.SerialNumber {
		t.Fatalf("the BMC serves %s, status says %s", got, obj.Status.Certificate.SerialNumber)
	}
	if err := verifiedConn(t, c, obj); err != nil {
		t.Fatalf("a connection after the renewal: %v", err)
	}
}

// A request the BMC no longer holds the key for (someone asked it for another) is refused by the
// BMC and a new one is made; a denied request is not asked again until the spec changes.
func TestCertificateRefusedAndDenied(t *testing.T) {
	b, ca, c, g := setup(t, "refuse", "refuse-ca")
	g.settle(10)
	g.signAll(ca, time.Hour)
	// Someone else asks the BMC for a key before the install.
	conn := outsider(t, b)
	if _, _, err := conn.GenerateCSR(context.Background(), bmc.CSRRequest{CommonName: "x", Organization: "o", OrganizationalUnit: "u", City: "c", State: "s", Country: "US"}); err != nil {
		t.Fatal(err)
	}
	obj := g.settle(10)
	reqs := g.requests()
	if len(reqs) != 1 || reqs[0].Name != requestName("refuse", 2) {
		t.Fatalf("requests %v, want attempt 2's alone; %s", names(reqs), reason(obj))
	}
	if b.Certificate().Issuer.CommonName == "refuse-ca" {
		t.Fatal("a certificate for a key the BMC no longer held was installed")
	}
	// Denied: no new request until the spec changes.
	reqs[0].Status.Conditions = append(reqs[0].Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "Test"})
	if err := c.Status().Update(context.Background(), &reqs[0]); err != nil {
		t.Fatal(err)
	}
	obj = g.settle(10)
	if len(g.requests()) != 0 || !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateDenied) {
		t.Fatalf("requests %v, condition %s", names(g.requests()), reason(obj))
	}
	obj.Spec.Certificate.Organization = "asked again"
	if err := c.Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	g.settle(10)
	if reqs := g.requests(); len(reqs) != 1 || reqs[0].Name != requestName("refuse", 3) {
		t.Fatalf("requests %v after the spec changed", names(reqs))
	}
}

// A BMC that serves an installed certificate only after a reset says so and is not pinned (its
// connections stay as they were) until it serves it.
func TestCertificateNotServedUntilReset(t *testing.T) {
	b := takeBMC(t)
	f := b.Faults()
	f.CertificateNeedsReset = true
	b.SetFaults(f)
	ca := testenv.NewCA(t, "reset-ca")
	c := fakeClient(objects(b, "reset", ca)...)
	g := newRig(t, c, "reset")
	g.settle(10)
	g.signAll(ca, time.Hour)
	obj := g.settle(10)
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateNotServed) || obj.Status.Certificate.Pinned {
		t.Fatalf("condition %s, pinned %v", reason(obj), obj.Status.Certificate.Pinned)
	}
	if ep, _ := bmcaccess.Endpoint(context.Background(), c, obj); !ep.InsecureSkipVerify || len(ep.CACert) != 0 {
		t.Fatal("pinned before the BMC served the certificate")
	}
	// The user's graceful-restart-bmc operation.
	conn := outsider(t, b)
	if err := conn.ResetManager(context.Background()); err != nil {
		t.Fatal(err)
	}
	obj = g.settle(10)
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateInstalled) || !obj.Status.Certificate.Pinned {
		t.Fatalf("after the reset: %s", reason(obj))
	}
}

func names(reqs []certificatesv1.CertificateSigningRequest) []string {
	out := make([]string, 0, len(reqs))
	for _, r := range reqs {
		out = append(out, r.Name)
	}
	return out
}

// A pinned BMC that stops serving its certificate (here: someone put another CA's on it) is not
// unpinned, which would hand its address to whatever answers: it is reported, and nothing is
// asked of it.
func TestPinnedBMCServingAnotherCertificateIsReported(t *testing.T) {
	b, ca, _, g := setup(t, "swap", "pinned-ca")
	g.settle(10)
	g.signAll(ca, time.Hour)
	obj := g.settle(10)
	if !obj.Status.Certificate.Pinned {
		t.Fatalf("not pinned: %s", reason(obj))
	}
	// Someone else installs a certificate from another CA, over a connection of their own.
	conn := outsider(t, b)
	csrPEM, _, err := conn.GenerateCSR(context.Background(), bmc.CSRRequest{CommonName: "127.0.0.1", AlternativeNames: []string{"127.0.0.1"}, Organization: "o", OrganizationalUnit: "u", City: "c", State: "s", Country: "US"})
	if err != nil {
		t.Fatal(err)
	}
	certs, _ := conn.Certificates(context.Background())
	if err := conn.ReplaceCertificate(context.Background(), certs[0].URI, string(testenv.NewCA(t, "rogue-ca").Sign(t, []byte(csrPEM), time.Now().Add(-time.Minute), time.Hour))); err != nil {
		t.Fatal(err)
	}
	before := lastSeq()
	obj = g.settle(10)
	if !strings.HasPrefix(reason(obj), metalv1alpha1.ReasonCertificateNotServed) || !strings.Contains(reason(obj), "rogue-ca") {
		t.Fatalf("condition %s", reason(obj))
	}
	if !obj.Status.Certificate.Pinned || bmcaccess.PinnedCA(obj) == nil {
		t.Fatal("unpinned: the address would be trusted again")
	}
	if gen, rep := certActions(b, before); gen != 0 || rep != 0 || len(g.requests()) != 0 {
		t.Fatalf("asked the BMC for more: GenerateCSR %d, ReplaceCertificate %d, requests %d", gen, rep, len(g.requests()))
	}
}
