package server

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// status.state is adopted once, from the reference operator; never from a status metalhub wrote
// (its mirror can lag the annotation it mirrors), nor next to bookkeeping of ours.
func TestStatusStateAdoptedOnlyFromTheReference(t *testing.T) {
	ours := metalv1alpha1.ServerStatus{}
	serverstate.Mirror(&ours, 1, metalv1alpha1.ServerStateDiscovery)
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		status  metalv1alpha1.ServerStatus
		want    metalv1alpha1.ServerState
		wantSrc lifecycle.Source
	}{
		{"reference status adopted", nil, metalv1alpha1.ServerStatus{State: metalv1alpha1.ServerStateAvailable}, metalv1alpha1.ServerStateAvailable, lifecycle.FromAdopted},
		{"our mirror after lost annotations starts over", nil, ours, metalv1alpha1.ServerStateInitial, lifecycle.FromInitial},
		{"our bookkeeping left, state annotation lost", map[string]string{serverstate.PowerAnnotation: "On@1"},
			metalv1alpha1.ServerStatus{State: metalv1alpha1.ServerStateAvailable}, metalv1alpha1.ServerStateInitial, lifecycle.FromInitial},
		{"annotation wins", map[string]string{lifecycle.StateAnnotation: "Reserved"}, ours, metalv1alpha1.ServerStateReserved, lifecycle.FromAnnotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: tc.ann}, Status: tc.status}
			got, src := serverstate.Store.Get(s)
			if got != tc.want || src != tc.wantSrc {
				t.Errorf("Get = %s (%s), want %s (%s)", got, src, tc.want, tc.wantSrc)
			}
		})
	}
}
