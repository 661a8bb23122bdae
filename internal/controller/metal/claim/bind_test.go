package claim

import (
	"context"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// One pass of the claim controller over a new claim, driven directly through the lifecycle
// Reconciler on a fake client with the controller's field indexes: which server it claims, or
// which reason it reports. The envtest suites cover the passes that follow.
func TestClaimBindingStep(t *testing.T) {
	rack := func(r string) map[string]string { return map[string]string{"rack": r} }
	claim := func(mutate ...func(*metalv1alpha1.ServerClaim)) *metalv1alpha1.ServerClaim {
		c := &metalv1alpha1.ServerClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "claim-uid"},
			Spec:       metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os:1"},
		}
		for _, m := range mutate {
			m(c)
		}
		return c
	}
	bySelector := func(r string) func(*metalv1alpha1.ServerClaim) {
		return func(c *metalv1alpha1.ServerClaim) {
			c.Spec.ServerSelector = &metav1.LabelSelector{MatchLabels: rack(r)}
		}
	}
	byName := func(n string) func(*metalv1alpha1.ServerClaim) {
		return func(c *metalv1alpha1.ServerClaim) { c.Spec.ServerRef = &corev1.LocalObjectReference{Name: n} }
	}
	taken := func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "other"}
		s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateReserved)
	}
	tainted := func(s *metalv1alpha1.Server) {
		s.Spec.Taints = []metalv1alpha1.Taint{{Key: "broken", Effect: metalv1alpha1.TaintEffectNoBind}}
	}
	// Settings-only: its own mark (out of the claimable index) or its BMC's (checked per
	// candidate: the index sees the server alone).
	settingsOnly := func(s *metalv1alpha1.Server) { s.Annotations[metalv1alpha1.SettingsOnlyAnnotation] = "true" }
	behindBMC := func(s *metalv1alpha1.Server) { s.Spec.BMCRef = &corev1.LocalObjectReference{Name: "owned"} }
	ownedBMC := &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "owned", Annotations: map[string]string{metalv1alpha1.SettingsOnlyAnnotation: "true"}}}
	cases := []struct {
		name    string
		claim   *metalv1alpha1.ServerClaim
		objects []client.Object
		// wantServer is the server whose claim ref the pass wrote; "" when it binds none, and
		// then wantReason is the Bound condition's reason.
		wantServer, wantReason string
	}{
		{"by selector: the free one in the rack", claim(bySelector("r1")), []client.Object{
			metaltest.FreeServer("a", rack("r2")), metaltest.FreeServer("b", rack("r1")), metaltest.FreeServer("c", rack("r1"), taken),
		}, "b", ""},
		{"by selector: none in the rack", claim(bySelector("r9")), []client.Object{metaltest.FreeServer("a", rack("r1"))},
			"", metalv1alpha1.ReasonNoMatchingServer},
		{"by selector: all in the rack taken", claim(bySelector("r1")), []client.Object{metaltest.FreeServer("a", rack("r1"), taken)},
			"", metalv1alpha1.ReasonAllMatchingServersTaken},
		{"any: a NoBind taint is not tolerated", claim(), []client.Object{metaltest.FreeServer("a", nil, tainted)},
			"", metalv1alpha1.ReasonNoClaimableServer},
		{"any: a NoBind taint tolerated", claim(func(c *metalv1alpha1.ServerClaim) {
			c.Spec.Tolerations = []metalv1alpha1.Toleration{{Key: "broken", Operator: metalv1alpha1.TolerationOpExists}}
		}), []client.Object{metaltest.FreeServer("a", nil, tainted)}, "a", ""},
		{"any: a server with a maintenance waiting is skipped", claim(), []client.Object{
			metaltest.FreeServer("a", nil),
			&metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "m"},
				Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: "a"}}},
		}, "", metalv1alpha1.ReasonNoClaimableServer},
		{"by name: free", claim(byName("a")), []client.Object{metaltest.FreeServer("a", nil)}, "a", ""},
		{"any: a settings-only server is never bound", claim(), []client.Object{metaltest.FreeServer("a", nil, settingsOnly)},
			"", metalv1alpha1.ReasonNoClaimableServer},
		{"any: a server behind a settings-only BMC is never bound", claim(), []client.Object{metaltest.FreeServer("a", nil, behindBMC), ownedBMC},
			"", metalv1alpha1.ReasonNoClaimableServer},
		{"any: the free one beside a settings-only one", claim(), []client.Object{
			metaltest.FreeServer("a", nil, settingsOnly), metaltest.FreeServer("b", nil, behindBMC), ownedBMC, metaltest.FreeServer("c", nil),
		}, "c", ""},
		{"by name: settings-only", claim(byName("a")), []client.Object{metaltest.FreeServer("a", nil, settingsOnly)},
			"", metalv1alpha1.ReasonServerNotClaimable},
		{"by name: behind a settings-only BMC", claim(byName("a")), []client.Object{metaltest.FreeServer("a", nil, behindBMC), ownedBMC},
			"", metalv1alpha1.ReasonServerNotClaimable},
		{"by name: missing", claim(byName("nope")), nil, "", metalv1alpha1.ReasonServerNotFound},
		{"by name: claimed by another", claim(byName("a")), []client.Object{metaltest.FreeServer("a", nil, taken)},
			"", metalv1alpha1.ReasonServerNotClaimable},
		{"by name: outside the selector", claim(byName("a"), bySelector("r2")), []client.Object{metaltest.FreeServer("a", rack("r1"))},
			"", metalv1alpha1.ReasonServerSelectorMismatch},
		{"no image", claim(func(c *metalv1alpha1.ServerClaim) { c.Spec.Image = " " }), []client.Object{metaltest.FreeServer("a", nil)},
			"", metalv1alpha1.ReasonImageMissing},
		{"ignition Secret missing", claim(func(c *metalv1alpha1.ServerClaim) {
			c.Spec.IgnitionSecretRef = &corev1.LocalObjectReference{Name: "ign"}
		}), []client.Object{metaltest.FreeServer("a", nil)}, "", metalv1alpha1.ReasonIgnitionSecretNotFound},
		{"invalid selector", claim(func(c *metalv1alpha1.ServerClaim) {
			c.Spec.ServerSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Bogus"}}}
		}), []client.Object{metaltest.FreeServer("a", nil)}, "", metalv1alpha1.ReasonInvalidSelector},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := metaltest.FakeClient(append([]client.Object{tc.claim}, tc.objects...)...)
			r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100)}
			r.init()
			rec := lifecycle.NewReconciler[*metalv1alpha1.ServerClaim](c, func() *metalv1alpha1.ServerClaim { return &metalv1alpha1.ServerClaim{} }, r.handle)
			if _, err := rec.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.claim)}); err != nil {
				t.Fatal(err)
			}
			list := &metalv1alpha1.ServerList{}
			if err := c.List(context.Background(), list); err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, s := range list.Items {
				if ref := s.Spec.ServerClaimRef; ref != nil && ref.Name == tc.claim.Name {
					if got != "" {
						t.Fatalf("claim bound to %s and %s", got, s.Name)
					}
					got = s.Name
					if s.Spec.BootConfigurationRef == nil || s.Spec.BootConfigurationRef.Name != tc.claim.Name {
						t.Errorf("server %s not pointed at the claim's boot configuration: %v", s.Name, s.Spec.BootConfigurationRef)
					}
				}
			}
			if got != tc.wantServer {
				t.Errorf("claimed server %q, want %q", got, tc.wantServer)
			}
			after := &metalv1alpha1.ServerClaim{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.claim), after); err != nil {
				t.Fatal(err)
			}
			reason := ""
			if cond := apimeta.FindStatusCondition(after.Status.Conditions, metalv1alpha1.ConditionBound); cond != nil {
				reason = cond.Reason
			}
			if reason != tc.wantReason {
				t.Errorf("Bound reason %q, want %q", reason, tc.wantReason)
			}
			if tc.wantReason != "" && after.Status.Phase != metalv1alpha1.PhaseUnbound {
				t.Errorf("phase %q, want Unbound", after.Status.Phase)
			}
			// The binding pass records the server in the claim and creates its boot
			// configuration with the lock: the next pass only reports Bound.
			sbcErr := c.Get(context.Background(), client.ObjectKeyFromObject(tc.claim), &metalv1alpha1.ServerBootConfiguration{})
			if tc.wantServer != "" {
				if after.Spec.ServerRef == nil || after.Spec.ServerRef.Name != tc.wantServer || !controllerutil.ContainsFinalizer(after, Finalizer) {
					t.Errorf("claim records %v (finalizers %v), want %s with the finalizer", after.Spec.ServerRef, after.Finalizers, tc.wantServer)
				}
				if sbcErr != nil {
					t.Errorf("boot configuration not created with the binding: %v", sbcErr)
				}
				if after.Status.Phase == metalv1alpha1.PhaseBound {
					t.Errorf("claim reports Bound in the binding pass")
				}
			} else if !apierrors.IsNotFound(sbcErr) {
				t.Errorf("boot configuration without a binding: %v", sbcErr)
			}
		})
	}
}

// The pass after the binding comes on the claim's own watch event, often before its boot
// configuration's: on a cache that does not show the configuration yet it reports Bound without
// creating it a second time (a write the API server would only refuse). A replica that did not
// make it (restarted, say) creates it; one whose claim now wants another configuration updates it
// once the cache shows it.
func TestClaimBoundPassDoesNotRemakeItsBootConfiguration(t *testing.T) {
	cases := []struct {
		name string
		// restart drops the reconciler's memory between the passes; change edits the claim's
		// image between them.
		restart, change bool
		wantCreates     int
	}{
		{"made by this replica, not in the cache yet", false, false, 0},
		{"made before a restart", true, false, 1},
		{"the claim changed since", false, true, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			claim := &metalv1alpha1.ServerClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "claim-uid"},
				Spec:       metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os:1"},
			}
			base := metaltest.FakeClient(claim, metaltest.FreeServer("a", nil))
			lagging, creates := false, 0
			c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
				Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if _, ok := obj.(*metalv1alpha1.ServerBootConfiguration); ok && lagging {
						return apierrors.NewNotFound(metalv1alpha1.GroupVersion.WithResource("serverbootconfigurations").GroupResource(), key.Name)
					}
					return cl.Get(ctx, key, obj, opts...)
				},
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					if _, ok := obj.(*metalv1alpha1.ServerBootConfiguration); ok && lagging {
						creates++
					}
					return cl.Create(ctx, obj, opts...)
				},
			})
			newReconciler := func() reconcile.Reconciler {
				r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100)}
				r.init()
				return r.reconciler()
			}
			rec := newReconciler()
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)}
			if _, err := rec.Reconcile(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			if err := base.Get(context.Background(), req.NamespacedName, &metalv1alpha1.ServerBootConfiguration{}); err != nil {
				t.Fatalf("binding pass made no boot configuration: %v", err)
			}
			if tc.restart {
				rec = newReconciler()
			}
			if tc.change {
				cur := &metalv1alpha1.ServerClaim{}
				if err := base.Get(context.Background(), req.NamespacedName, cur); err != nil {
					t.Fatal(err)
				}
				cur.Spec.Image = "os:2"
				if err := base.Update(context.Background(), cur); err != nil {
					t.Fatal(err)
				}
			}
			lagging = true
			res, err := rec.Reconcile(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if creates != tc.wantCreates {
				t.Errorf("boot configuration created %d times by the second pass, want %d", creates, tc.wantCreates)
			}
			after := &metalv1alpha1.ServerClaim{}
			if err := base.Get(context.Background(), req.NamespacedName, after); err != nil {
				t.Fatal(err)
			}
			if after.Status.Phase != metalv1alpha1.PhaseBound {
				t.Errorf("phase %q after the second pass, want Bound", after.Status.Phase)
			}
			if tc.wantCreates == 0 && res.RequeueAfter == 0 {
				t.Errorf("a pass that trusted its own record does not look again")
			}
			if tc.change {
				// The cache shows it now: the next pass brings it to the claim's spec.
				lagging = false
				if _, err := rec.Reconcile(context.Background(), req); err != nil {
					t.Fatal(err)
				}
				sbc := &metalv1alpha1.ServerBootConfiguration{}
				if err := base.Get(context.Background(), req.NamespacedName, sbc); err != nil {
					t.Fatal(err)
				}
				if sbc.Spec.Image != "os:2" {
					t.Errorf("boot configuration image %q, want os:2", sbc.Spec.Image)
				}
			}
		})
	}
}

// Every write of a binding claim's pass goes first at the API server, the Bound status the
// Reconciler writes after the handler included: held back behind other controllers' writes, it
// kept the claim workers waiting while the binding writes they would make next had slots free.
// A deleted claim's are not urgent.
func TestClaimPassWritesAreUrgent(t *testing.T) {
	claim := &metalv1alpha1.ServerClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "claim-uid"},
		Spec:       metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os:1"},
	}
	base := metaltest.FakeClient(claim, metaltest.FreeServer("a", nil))
	var mu sync.Mutex
	writes := map[string]bool{} // write -> urgent
	note := func(ctx context.Context, what string) {
		mu.Lock()
		defer mu.Unlock()
		writes[what] = apilimit.IsUrgent(ctx)
	}
	c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			note(ctx, fmt.Sprintf("create %T", obj))
			return cl.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			note(ctx, fmt.Sprintf("patch %T", obj))
			return cl.Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			note(ctx, fmt.Sprintf("update %T/%s", obj, sub))
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100)}
	r.init()
	passes := r.reconciler()
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)}
	for range 2 {
		if _, err := passes.Reconcile(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"patch *v1alpha1.Server", "create *v1alpha1.ServerBootConfiguration", "patch *v1alpha1.ServerClaim",
		"update *v1alpha1.ServerClaim/status"} {
		urgent, ok := writes[want]
		switch {
		case !ok:
			t.Errorf("no %s in the binding's writes %v", want, writes)
		case !urgent:
			t.Errorf("%s is not urgent", want)
		}
	}

	// Released: the Server's writes do the work, the claim's report must not go ahead of them.
	if err := base.Delete(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	clear(writes)
	if _, err := passes.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(writes) == 0 {
		t.Fatal("a deleted claim's pass wrote nothing")
	}
	for what, urgent := range writes {
		if urgent {
			t.Errorf("%s of a deleted claim is urgent", what)
		}
	}
}

// The claim's boot fields, the root volume with them, reach its boot configuration as asked.
func TestBootSpecCarriesTheRootVolume(t *testing.T) {
	rv := &metalv1alpha1.RootVolume{RAIDType: "RAID1", Drives: []string{"Disk.Bay.2", "S3ZNNX0K"}, Name: "os"}
	c := &metalv1alpha1.ServerClaim{Spec: metalv1alpha1.ServerClaimSpec{Image: "os:1", BootMethod: metalv1alpha1.BootMethodHTTP, RootVolume: rv}}
	spec := bootSpecOf(c, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s1"}})
	if spec.RootVolume == nil || spec.RootVolume.Name != "os" || len(spec.RootVolume.Drives) != 2 || spec.ServerRef.Name != "s1" || spec.BootMethod != metalv1alpha1.BootMethodHTTP {
		t.Fatalf("boot configuration spec %+v", spec)
	}
}

// Root device hints reach the boot configuration as asked.
func TestBootSpecCarriesTheRootDeviceHints(t *testing.T) {
	rot := false
	h := &metalv1alpha1.RootDeviceHints{Model: "PM9A3", MinSizeGigabytes: 400, Rotational: &rot}
	c := &metalv1alpha1.ServerClaim{Spec: metalv1alpha1.ServerClaimSpec{Image: "os:1", RootDeviceHints: h}}
	spec := bootSpecOf(c, &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s1"}})
	if spec.RootDeviceHints == nil || spec.RootDeviceHints.Model != "PM9A3" || spec.RootDeviceHints.MinSizeGigabytes != 400 ||
		spec.RootDeviceHints.Rotational == nil || *spec.RootDeviceHints.Rotational || spec.RootVolume != nil {
		t.Fatalf("boot configuration spec %+v", spec)
	}
}
