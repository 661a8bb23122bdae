package claimable

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func TestTolerates(t *testing.T) {
	noBind := metalv1alpha1.Taint{Key: "gpu", Value: "a100", Effect: metalv1alpha1.TaintEffectNoBind}
	evict := metalv1alpha1.Taint{Key: "broken", Effect: metalv1alpha1.TaintEffectEvict}
	defaulted := metalv1alpha1.Taint{Key: "rack", Value: "r1"} // effect left to the CRD default, NoBind
	for _, tc := range []struct {
		name   string
		tols   []metalv1alpha1.Toleration
		taints []metalv1alpha1.Taint
		want   bool
	}{
		{"no taints", nil, nil, true},
		{"untolerated NoBind", nil, []metalv1alpha1.Taint{noBind}, false},
		{"untolerated Evict keeps binding away too", nil, []metalv1alpha1.Taint{evict}, false},
		{"Equal with value", []metalv1alpha1.Toleration{{Key: "gpu", Value: "a100"}}, []metalv1alpha1.Taint{noBind}, true},
		{"Equal, other value", []metalv1alpha1.Toleration{{Key: "gpu", Value: "h100"}}, []metalv1alpha1.Taint{noBind}, false},
		{"Exists", []metalv1alpha1.Toleration{{Key: "gpu", Operator: metalv1alpha1.TolerationOpExists}}, []metalv1alpha1.Taint{noBind}, true},
		{"effect must match", []metalv1alpha1.Toleration{{Key: "gpu", Value: "a100", Effect: metalv1alpha1.TaintEffectEvict}}, []metalv1alpha1.Taint{noBind}, false},
		{"empty taint effect is NoBind", []metalv1alpha1.Toleration{{Key: "rack", Value: "r1", Effect: metalv1alpha1.TaintEffectNoBind}}, []metalv1alpha1.Taint{defaulted}, true},
		{"every taint needs a toleration", []metalv1alpha1.Toleration{{Key: "gpu", Operator: metalv1alpha1.TolerationOpExists}}, []metalv1alpha1.Taint{noBind, evict}, false},
	} {
		if got, why := Tolerates(tc.tols, tc.taints); got != tc.want {
			t.Errorf("%s: Tolerates = %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// Claimability reads the durable state, never status.state, and wants the box observed off.
func TestServerClaimable(t *testing.T) {
	base := func() *metalv1alpha1.Server {
		return &metalv1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateAvailable)}},
			Status:     metalv1alpha1.ServerStatus{PowerState: metalv1alpha1.PowerStateOff, State: metalv1alpha1.ServerStateAvailable},
		}
	}
	if s := base(); !Server(s) {
		t.Fatalf("Available and off: not claimable (%s)", WhyNot(s))
	}
	now := metav1.Now()
	for name, mutate := range map[string]func(*metalv1alpha1.Server){
		"status says Available, annotation Reserved": func(s *metalv1alpha1.Server) {
			s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateReserved)
		},
		"no annotation (state only derived or adopted)": func(s *metalv1alpha1.Server) { delete(s.Annotations, lifecycle.StateAnnotation) },
		"powered on":   func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn },
		"wiped status": func(s *metalv1alpha1.Server) { s.Status = metalv1alpha1.ServerStatus{} },
		"claimed": func(s *metalv1alpha1.Server) {
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "ns", Name: "c"}
		},
		"in maintenance": func(s *metalv1alpha1.Server) {
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "m"}
		},
		"unclaimable": func(s *metalv1alpha1.Server) { s.Spec.Unclaimable = true },
		"settings-only": func(s *metalv1alpha1.Server) {
			s.Annotations[metalv1alpha1.SettingsOnlyAnnotation] = "true"
		},
		"deleting": func(s *metalv1alpha1.Server) { s.DeletionTimestamp = &now },
		"ignored": func(s *metalv1alpha1.Server) {
			s.Annotations[metalv1alpha1.OperationAnnotation] = metalv1alpha1.OperationIgnore
		},
		"Available, but its last release not cleaned": func(s *metalv1alpha1.Server) {
			s.Annotations[serverstate.CleaningAnnotation] = string(metalv1alpha1.CleaningPolicyAllDisks)
		},
		"cleaning": func(s *metalv1alpha1.Server) {
			s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateCleaning)
		},
	} {
		s := base()
		mutate(s)
		if Server(s) {
			t.Errorf("%s: claimable", name)
		}
		if why := WhyNot(s); why == "is claimable" {
			t.Errorf("%s: no reason given", name)
		}
	}
}
