package server

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/claim"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Whether a Server may boot a boot configuration: one named for another server never, one the
// built-in provider has not judged yet by the provider's own rule, one an external provider has
// not judged yet not.
func TestBootConfigurationReady(t *testing.T) {
	const ns = "default"
	sbc := func(server string, state metalv1alpha1.ServerBootConfigurationState, ignition string) *metalv1alpha1.ServerBootConfiguration {
		b := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"},
			Spec:   metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: server}, Image: "os:1"},
			Status: metalv1alpha1.ServerBootConfigurationStatus{State: state}}
		if ignition != "" {
			b.Spec.IgnitionSecretRef = &corev1.LocalObjectReference{Name: ignition}
		}
		return b
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ign"}}
	cases := []struct {
		name     string
		external bool
		objects  []client.Object
		want     bool
	}{
		{"missing", false, nil, false},
		{"Ready", false, []client.Object{sbc("s", metalv1alpha1.ServerBootConfigurationStateReady, "")}, true},
		{"Ready, but for another server", false, []client.Object{sbc("other", metalv1alpha1.ServerBootConfigurationStateReady, "")}, false},
		{"Error", false, []client.Object{sbc("s", metalv1alpha1.ServerBootConfigurationStateError, "")}, false},
		{"built-in, not judged yet, input complete", false, []client.Object{sbc("s", "", "ign"), secret}, true},
		{"built-in, not judged yet, ignition Secret missing", false, []client.Object{sbc("s", "", "ign")}, false},
		{"built-in, not judged yet, for another server", false, []client.Object{sbc("other", "", "")}, false},
		{"external, not judged yet", true, []client.Object{sbc("s", "", "")}, false},
		{"external, Pending", true, []client.Object{sbc("s", metalv1alpha1.ServerBootConfigurationStatePending, "")}, false},
		{"external, Ready", true, []client.Object{sbc("s", metalv1alpha1.ServerBootConfigurationStateReady, "")}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
			c := metaltest.FakeClient(append([]client.Object{s}, tc.objects...)...)
			opts := testOpts
			opts.ExternalBootProvider = tc.external
			r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10), Options: opts}
			var got bool
			var why string
			rec := lifecycle.NewReconciler[*metalv1alpha1.Server](c, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} },
				func(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.Server]) (lifecycle.Result, error) {
					var err error
					got, why, _, err = r.bootConfigurationReady(ctx, &serverPass{Pass: lp, c: lp.Client()}, ns, "c")
					return lifecycle.Done(), err
				})
			if _, err := rec.Reconcile(ctx(), ctrl.Request{NamespacedName: client.ObjectKey{Name: "s"}}); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ready = %v (%s), want %v", got, why, tc.want)
			}
			if !got && why == "" {
				t.Error("not ready without a reason")
			}
		})
	}
}

// The Server's watches of claims and boot configurations pass what it acts on, and only that.
func TestServerWatchPredicates(t *testing.T) {
	cl := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOff, Image: "os:1"}}
	now := metav1.Now()
	claimCases := []struct {
		name   string
		change func(*metalv1alpha1.ServerClaim)
		want   bool
	}{
		{"power", func(c *metalv1alpha1.ServerClaim) { c.Spec.Power = metalv1alpha1.PowerOn }, true},
		{"deleted", func(c *metalv1alpha1.ServerClaim) { c.DeletionTimestamp = &now }, true},
		{"names its server", func(c *metalv1alpha1.ServerClaim) { c.Spec.ServerRef = &corev1.LocalObjectReference{Name: "s"} }, false},
		{"finalizer", func(c *metalv1alpha1.ServerClaim) { c.Finalizers = []string{claim.Finalizer} }, false},
		{"Bound", func(c *metalv1alpha1.ServerClaim) { c.Status.Phase = metalv1alpha1.PhaseBound }, false},
	}
	for _, tc := range claimCases {
		n := cl.DeepCopy()
		tc.change(n)
		if got := claimSpecChanged().Update(event.UpdateEvent{ObjectOld: cl, ObjectNew: n}); got != tc.want {
			t.Errorf("claim %s: passes = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !claimSpecChanged().Create(event.CreateEvent{Object: cl}) || !claimSpecChanged().Delete(event.DeleteEvent{Object: cl}) {
		t.Error("a claim's creation and removal must pass")
	}

	st := func(s metalv1alpha1.ServerBootConfigurationState) *metalv1alpha1.ServerBootConfiguration {
		return &metalv1alpha1.ServerBootConfiguration{Status: metalv1alpha1.ServerBootConfigurationStatus{State: s}}
	}
	const (
		none    = metalv1alpha1.ServerBootConfigurationState("")
		ready   = metalv1alpha1.ServerBootConfigurationStateReady
		failed  = metalv1alpha1.ServerBootConfigurationStateError
		pending = metalv1alpha1.ServerBootConfigurationStatePending
	)
	bootCases := []struct {
		name     string
		external bool
		old, new metalv1alpha1.ServerBootConfigurationState
		want     bool
	}{
		{"built-in, first verdict Ready (judged by the Server already)", false, none, ready, false},
		{"built-in, first verdict Error", false, none, failed, true},
		{"built-in, Error to Ready", false, failed, ready, true},
		{"built-in, unchanged", false, ready, ready, false},
		{"external, Pending to Ready", true, pending, ready, true},
		{"external, first verdict Ready", true, none, ready, true},
	}
	for _, tc := range bootCases {
		if got := bootStateChanged(tc.external).Update(event.UpdateEvent{ObjectOld: st(tc.old), ObjectNew: st(tc.new)}); got != tc.want {
			t.Errorf("boot configuration %s: passes = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A claim's change reaches the server that points at it even before the claim names the server
// (the server side of a binding is written first): a power flip in that window is not lost.
func TestClaimedServersBeforeTheClaimNamesIt(t *testing.T) {
	s := metaltest.FreeServer("s", nil, func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
	})
	c := metaltest.FakeClient(s, metaltest.FreeServer("other", nil))
	cl := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"}}
	reqs := claimedServers(c)(ctx(), cl)
	if len(reqs) != 1 || reqs[0].Name != "s" {
		t.Fatalf("requests %v, want the one server pointing at the claim", reqs)
	}
	cl.Spec.ServerRef = &corev1.LocalObjectReference{Name: "s"}
	if reqs := claimedServers(c)(ctx(), cl); len(reqs) != 1 {
		t.Errorf("requests %v: the server named and pointing at the cl, once", reqs)
	}
}

// The Server's own watch drops only its claim's binding write made ahead of the claim's boot
// configuration (whose creation brings the pass), and nothing else.
func TestClaimedAheadOfItsBootConfiguration(t *testing.T) {
	free := metaltest.FreeServer("s", nil)
	claimed := free.DeepCopy()
	claimed.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
	claimed.Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: "default", Name: "c"}
	sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"},
		Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: "s"}, Image: "os:1"}}
	relabelled := claimed.DeepCopy()
	relabelled.Labels = map[string]string{"rack": "r2"}
	cases := []struct {
		name     string
		old, new *metalv1alpha1.Server
		objects  []client.Object
		want     bool
	}{
		{"bound, boot configuration not there yet", free, claimed, nil, false},
		{"bound, boot configuration there", free, claimed, []client.Object{sbc}, true},
		{"a later change of a claimed server", claimed, relabelled, nil, true},
		{"claim ref removed", claimed, free, nil, true},
	}
	for _, tc := range cases {
		got := claimedAheadOfItsBootConfiguration(metaltest.FakeClient(tc.objects...)).Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new})
		if got != tc.want {
			t.Errorf("%s: passes = %v, want %v", tc.name, got, tc.want)
		}
	}
}
