package maintenance

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// One pass of the maintenance controller, driven directly through the lifecycle Reconciler on a
// fake client with the controllers' field indexes: what the maintenance reports, whether it
// points the server at itself, and whether it asked the claim's owner. The envtest suite covers
// the passes that follow (entering, power, boot, handing back).
func TestMaintenanceStep(t *testing.T) {
	const ns = "default"
	maint := func(name string, policy metalv1alpha1.ServerMaintenancePolicy, prio int32, server string) *metalv1alpha1.ServerMaintenance {
		m := metaltest.NewMaintenance(ns, name, server, policy, "", prio)
		m.Finalizers = []string{Finalizer}
		m.CreationTimestamp = metav1.Unix(1000, 0)
		return m
	}
	enforced, approval := metalv1alpha1.ServerMaintenancePolicyEnforced, metalv1alpha1.ServerMaintenancePolicyOwnerApproval
	claimedBy := func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: ns, Name: "c"}
		s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateReserved)
	}
	claim := func(labels map[string]string) *metalv1alpha1.ServerClaim {
		return &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c", Labels: labels},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os:1"}}
	}
	needed := map[string]string{metalv1alpha1.MaintenanceNeededLabel: "true"}
	neededApproved := map[string]string{metalv1alpha1.MaintenanceNeededLabel: "true", metalv1alpha1.MaintenanceApprovedLabel: "true"}
	cases := []struct {
		name    string
		m       *metalv1alpha1.ServerMaintenance
		objects []client.Object
		// want is "<state>/<reason>"; wantRef whether the server points at the maintenance after
		// the pass; wantAsked whether the claim carries the maintenance-needed label.
		want      string
		wantRef   bool
		wantAsked bool
	}{
		{"no server named", maint("m", enforced, 0, ""), nil, "Failed/" + metalv1alpha1.ReasonInvalidSpec, false, false},
		{"server missing", maint("m", enforced, 0, "s"), nil, "Pending/" + metalv1alpha1.ReasonServerNotFound, false, false},
		{"unclaimed server: started", maint("m", approval, 0, "s"), []client.Object{metaltest.FreeServer("s", nil)},
			"Pending/" + metalv1alpha1.ReasonEnteringMaintenance, true, false},
		{"server held by another live maintenance: queued", maint("m", enforced, 0, "s"), []client.Object{
			metaltest.FreeServer("s", nil, func(s *metalv1alpha1.Server) {
				s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: ns, Name: "other"}
			}),
			maint("other", enforced, 0, "s"),
		}, "Pending/" + metalv1alpha1.ReasonQueued, false, false},
		{"server held by a maintenance that is gone: taken over", maint("m", enforced, 0, "s"), []client.Object{
			metaltest.FreeServer("s", nil, func(s *metalv1alpha1.Server) {
				s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: ns, Name: "gone"}
			}),
		}, "Pending/" + metalv1alpha1.ReasonEnteringMaintenance, true, false},
		{"behind a higher priority", maint("m", enforced, 0, "s"), []client.Object{metaltest.FreeServer("s", nil), maint("urgent", enforced, 10, "s")},
			"Pending/" + metalv1alpha1.ReasonQueued, false, false},
		{"server being deleted", maint("m", enforced, 0, "s"), []client.Object{metaltest.FreeServer("s", nil, func(s *metalv1alpha1.Server) {
			s.Finalizers = []string{"metal.ironcore.dev/server"}
			s.DeletionTimestamp = &metav1.Time{Time: metav1.Now().Time}
		})}, "Pending/" + metalv1alpha1.ReasonServerDeleting, false, false},
		{"claimed, owner not asked yet: asked (Enforced too)", maint("m", enforced, 0, "s"),
			[]client.Object{metaltest.FreeServer("s", nil, claimedBy), claim(nil)},
			"Pending/" + metalv1alpha1.ReasonWaitingForApproval, false, true},
		{"claimed, OwnerApproval, not approved: waits", maint("m", approval, 0, "s"),
			[]client.Object{metaltest.FreeServer("s", nil, claimedBy), claim(needed)},
			"Pending/" + metalv1alpha1.ReasonWaitingForApproval, false, true},
		{"claimed, OwnerApproval, approved: started", maint("m", approval, 0, "s"),
			[]client.Object{metaltest.FreeServer("s", nil, claimedBy), claim(neededApproved)},
			"Pending/" + metalv1alpha1.ReasonEnteringMaintenance, true, true},
		{"claimed, Enforced, owner told: started", maint("m", enforced, 0, "s"),
			[]client.Object{metaltest.FreeServer("s", nil, claimedBy), claim(needed)},
			"Pending/" + metalv1alpha1.ReasonEnteringMaintenance, true, true},
		{"server in Maintenance for it: in maintenance", maint("m", enforced, 0, "s"), []client.Object{
			metaltest.FreeServer("s", nil, func(s *metalv1alpha1.Server) {
				s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: ns, Name: "m"}
				s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateMaintenance)
			}),
		}, "InMaintenance/" + metalv1alpha1.ReasonInMaintenance, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := metaltest.FakeClient(append([]client.Object{tc.m}, tc.objects...)...)
			r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), RetryAfter: 500 * time.Millisecond}
			rec := lifecycle.NewReconciler[*metalv1alpha1.ServerMaintenance](c, func() *metalv1alpha1.ServerMaintenance { return &metalv1alpha1.ServerMaintenance{} }, r.handle)
			if _, err := rec.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.m)}); err != nil {
				t.Fatal(err)
			}
			after := &metalv1alpha1.ServerMaintenance{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(tc.m), after); err != nil {
				t.Fatal(err)
			}
			if got := metaltest.MaintenanceStatus(after); got != tc.want {
				t.Errorf("maintenance %s, want %s", got, tc.want)
			}
			s := &metalv1alpha1.Server{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: "s"}, s); err == nil {
				ref := s.Spec.ServerMaintenanceRef
				if got := ref != nil && ref.Namespace == ns && ref.Name == tc.m.Name; got != tc.wantRef {
					t.Errorf("server points at the maintenance: %v, want %v (ref %v)", got, tc.wantRef, ref)
				}
			} else if tc.wantRef {
				t.Errorf("no server: %v", err)
			}
			cl := &metalv1alpha1.ServerClaim{}
			asked := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "c"}, cl) == nil && cl.Labels[metalv1alpha1.MaintenanceNeededLabel] == "true"
			if asked != tc.wantAsked {
				t.Errorf("claim's owner asked: %v, want %v", asked, tc.wantAsked)
			}
		})
	}
}
