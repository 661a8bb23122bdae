package serverstate

import (
	"testing"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// The production Store: the annotation wins, a server restored without it gets the state
// its refs and the parked marker say, and values that are no Server state are ignored. Adoption
// of a status.state left by the reference operator is not covered here: it has tests of its own.
func TestServerStoreGet(t *testing.T) {
	claim := &metalv1alpha1.ImmutableObjectReference{Namespace: "ns", Name: "c"}
	maintenance := &metalv1alpha1.ObjectReference{Namespace: "ns", Name: "m"}
	type server struct {
		annotation  string // lifecycle.StateAnnotation; "-" for absent
		claim       bool
		maintenance bool
		parked      bool
		status      metalv1alpha1.ServerState
	}
	type testCase struct {
		name       string
		in         server
		want       metalv1alpha1.ServerState
		wantSource lifecycle.Source
	}
	tests := []testCase{
		{name: "annotation wins over refs, parked marker and status",
			in:   server{annotation: "Available", claim: true, maintenance: true, parked: true, status: "Discovery"},
			want: "Available", wantSource: lifecycle.FromAnnotation},
		{name: "wiped status, annotation kept", in: server{annotation: "Reserved"}, want: "Reserved", wantSource: lifecycle.FromAnnotation},
		{name: "restored, maintenance ref", in: server{annotation: "-", maintenance: true}, want: "Maintenance", wantSource: lifecycle.FromDerived},
		{name: "restored, claim ref", in: server{annotation: "-", claim: true}, want: "Reserved", wantSource: lifecycle.FromDerived},
		{name: "restored, maintenance of a claimed server", in: server{annotation: "-", claim: true, maintenance: true}, want: "Maintenance", wantSource: lifecycle.FromDerived},
		{name: "restored, parked", in: server{annotation: "-", parked: true}, want: "Parked", wantSource: lifecycle.FromDerived},
		// The user's "leave the box alone" wins: a restore without bookkeeping must not unpark.
		{name: "restored, parked with a claim ref", in: server{annotation: "-", claim: true, parked: true}, want: "Parked", wantSource: lifecycle.FromDerived},
		{name: "restored, parked with a maintenance ref", in: server{annotation: "-", claim: true, maintenance: true, parked: true}, want: "Parked", wantSource: lifecycle.FromDerived},
		{name: "derived beats a status that says otherwise", in: server{annotation: "-", claim: true, status: "Available"}, want: "Reserved", wantSource: lifecycle.FromDerived},
		{name: "invalid annotation ignored, derived", in: server{annotation: "Bogus", claim: true}, want: "Reserved", wantSource: lifecycle.FromDerived},
		{name: "empty annotation ignored, derived", in: server{annotation: "", maintenance: true}, want: "Maintenance", wantSource: lifecycle.FromDerived},
		{name: "invalid annotation, nothing else known", in: server{annotation: "Bogus"}, want: "Initial", wantSource: lifecycle.FromInitial},
		{name: "nothing known", in: server{annotation: "-"}, want: "Initial", wantSource: lifecycle.FromInitial},
	}
	// Every Server state is kept in the annotation as it is, whatever else the object says.
	for _, st := range []metalv1alpha1.ServerState{
		metalv1alpha1.ServerStateInitial, metalv1alpha1.ServerStateDiscovery, metalv1alpha1.ServerStateAvailable,
		metalv1alpha1.ServerStateReserved, metalv1alpha1.ServerStateReleased, metalv1alpha1.ServerStateError,
		metalv1alpha1.ServerStateMaintenance, metalv1alpha1.ServerStateParked,
	} {
		tests = append(tests, testCase{name: "annotation " + string(st), in: server{annotation: string(st), claim: true}, want: st, wantSource: lifecycle.FromAnnotation})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &metalv1alpha1.Server{}
			if tc.in.annotation != "-" {
				lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, tc.in.annotation)
			}
			if tc.in.claim {
				s.Spec.ServerClaimRef = claim
			}
			if tc.in.maintenance {
				s.Spec.ServerMaintenanceRef = maintenance
			}
			if tc.in.parked {
				lifecycle.SetAnnotation(s, metalv1alpha1.ParkedAnnotation, "true")
			}
			s.Status.State = tc.in.status
			got, src := Store.Get(s)
			if got != tc.want || src != tc.wantSource {
				t.Fatalf("Get = %s (%s), want %s (%s)", got, src, tc.want, tc.wantSource)
			}
		})
	}
}
