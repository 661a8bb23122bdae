package metal

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
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
		if got, why := tolerates(tc.tols, tc.taints); got != tc.want {
			t.Errorf("%s: tolerates = %v (%s), want %v", tc.name, got, why, tc.want)
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
	if s := base(); !serverClaimable(s) {
		t.Fatalf("Available and off: not claimable (%s)", whyNotClaimable(s))
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
		"deleting":    func(s *metalv1alpha1.Server) { s.DeletionTimestamp = &now },
		"ignored": func(s *metalv1alpha1.Server) {
			s.Annotations[metalv1alpha1.OperationAnnotation] = metalv1alpha1.OperationIgnore
		},
	} {
		s := base()
		mutate(s)
		if serverClaimable(s) {
			t.Errorf("%s: claimable", name)
		}
		if why := whyNotClaimable(s); why == "is claimable" {
			t.Errorf("%s: no reason given", name)
		}
	}
}

// Which Server updates reach the claims: binding, claimability, labels and taints do; status
// churn of a server no claim waits on does not.
func TestClaimRelevant(t *testing.T) {
	base := freeServer("s", map[string]string{"rack": "r1"})
	claimedReserved := freeServer("s", nil, func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
		s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateReserved)
	})
	claimedMaint := freeServer("s", nil, func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
		s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateMaintenance)
	})
	cases := []struct {
		name   string
		old    *metalv1alpha1.Server
		change func(*metalv1alpha1.Server)
		want   bool
	}{
		{"nothing", base, func(*metalv1alpha1.Server) {}, false},
		{"inventory reported", base, func(s *metalv1alpha1.Server) { s.Status.Manufacturer = "Dell Inc." }, false},
		{"claimed", base, func(s *metalv1alpha1.Server) {
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "c"}
		}, true},
		{"no longer claimable (powered on)", base, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn }, true},
		{"relabelled", base, func(s *metalv1alpha1.Server) { s.Labels = map[string]string{"rack": "r2"} }, true},
		{"tainted", base, func(s *metalv1alpha1.Server) {
			s.Spec.Taints = []metalv1alpha1.Taint{{Key: "k", Effect: metalv1alpha1.TaintEffectNoBind}}
		}, true},
		{"state moved", base, func(s *metalv1alpha1.Server) {
			s.Annotations[lifecycle.StateAnnotation] = string(metalv1alpha1.ServerStateParked)
		}, true},
		{"power of a Reserved server (the claim shows it)", claimedReserved, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn }, true},
		{"inventory of a Reserved server", claimedReserved, func(s *metalv1alpha1.Server) { s.Status.BIOSVersion = "2.19.1" }, false},
		{"a Reserved server on its way to On (the claim shows settled power only)", claimedReserved, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStatePoweringOn }, false},
		{"power of a claimed server in maintenance", claimedMaint, func(s *metalv1alpha1.Server) { s.Status.PowerState = metalv1alpha1.PowerStateOn }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.old.DeepCopy()
			tc.change(s)
			if got := claimRelevant(tc.old, s); got != tc.want {
				t.Errorf("claimRelevant = %v, want %v", got, tc.want)
			}
		})
	}
}
