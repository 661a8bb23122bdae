package work

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Once the maintenance exists, holdMaintenance only reads: held, or why not yet, in words a
// user can act on (a parked server is named as parked, not as slow to enter).
func TestHoldMaintenanceSaysWhyItWaits(t *testing.T) {
	ref := &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "m"}
	maint := func(policy metalv1alpha1.ServerMaintenancePolicy) *maintenancev1alpha1.ServerMaintenance {
		return &maintenancev1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"},
			Spec: maintenancev1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: "s"}, Policy: policy}}
	}
	server := func(mut func(*metalv1alpha1.Server)) *metalv1alpha1.Server {
		s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{}}}
		mut(s)
		return s
	}
	claimed := func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "t", Name: "c"}
	}
	for _, tc := range []struct {
		name    string
		policy  metalv1alpha1.ServerMaintenancePolicy
		server  func(*metalv1alpha1.Server)
		held    bool
		waiting string
	}{
		{"in it", metalv1alpha1.ServerMaintenancePolicyEnforced, func(s *metalv1alpha1.Server) {
			s.Spec.ServerMaintenanceRef = ref
			s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateMaintenance)
		}, true, ""},
		{"parked", metalv1alpha1.ServerMaintenancePolicyEnforced, func(s *metalv1alpha1.Server) {
			claimed(s)
			s.Annotations[metalv1alpha1.ParkedAnnotation] = "2026-12-05T00:00:00Z"
		}, false, "server s is parked"},
		{"claimed, owner approval", metalv1alpha1.ServerMaintenancePolicyOwnerApproval, claimed, false, "waiting for its owner to approve"},
		{"claimed, enforced", metalv1alpha1.ServerMaintenancePolicyEnforced, claimed, false, "waiting for server s to enter"},
	} {
		r := ref
		h, err := holdMaintenance(context.Background(), nil, &systemv1alpha1.BIOSVersion{}, &r, maint(tc.policy), server(tc.server), "m", "ns", tc.policy, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if h.held != tc.held || !strings.Contains(h.waiting, tc.waiting) || (tc.waiting == "") != (h.waiting == "") {
			t.Errorf("%s: held %v waiting %q; want held %v waiting containing %q", tc.name, h.held, h.waiting, tc.held, tc.waiting)
		}
	}
}
