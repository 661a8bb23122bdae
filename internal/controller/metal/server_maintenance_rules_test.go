package metal

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// What counts as "the box already runs its maintenance's boot configuration".
func TestMaintenanceBooted(t *testing.T) {
	m := &metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fw", UID: types.UID("uid-1")}}
	moved := m.DeepCopy()
	moved.UID = "uid-copy"
	moved.Annotations = map[string]string{lifecycle.MovedFromAnnotation: "uid-1"}
	recreated := m.DeepCopy()
	recreated.UID = "uid-2"
	for _, tc := range []struct {
		name      string
		record    string
		m         *metalv1alpha1.ServerMaintenance
		on, ready bool
		want      bool
	}{
		{"no record: metalhub entered Maintenance and has not booted", "", m, true, true, false},
		{"our record", "ns/fw/uid-1", m, false, false, true},
		{"a moved copy of the maintenance", "ns/fw/uid-1", moved, true, true, true},
		{"a moved copy, box off: still booted (kept on)", "ns/fw/uid-1", moved, false, true, true},
		{"a new maintenance of the same name", "ns/fw/uid-1", recreated, true, true, false},
		{"another maintenance's record", "ns/other/uid-1", m, true, true, false},
		{"another namespace's record", "other/fw/uid-1", m, true, true, false},
		{"a record without a UID", "ns/fw/", m, true, true, false},
		{"a bare UID (older records)", "uid-1", m, true, true, true},
		{"a bare UID of another", "uid-0", m, true, true, false},
		{"adopted, on, configuration Ready: the reference booted it", maintenanceBootAdopted, m, true, true, true},
		{"adopted, off: boot it", maintenanceBootAdopted, m, false, true, false},
		{"adopted, on, configuration not Ready: not yet", maintenanceBootAdopted, m, true, false, false},
		{"adopted copy of a moved maintenance, on, Ready", maintenanceBootAdopted, moved, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := maintenanceBooted(tc.record, tc.m, tc.on, tc.ready); got != tc.want {
				t.Errorf("maintenanceBooted(%q, %s, on %v, ready %v) = %v, want %v", tc.record, tc.m.UID, tc.on, tc.ready, got, tc.want)
			}
		})
	}
}

// A state found (adopted or derived) is persisted with the bookkeeping metalhub would have
// written itself.
func TestRecoveredBookkeeping(t *testing.T) {
	s := &metalv1alpha1.Server{Spec: metalv1alpha1.ServerSpec{SystemUUID: "u"}}
	recoveredBookkeeping(s, metalv1alpha1.ServerStateMaintenance)
	if got := s.Annotations[MaintenanceBootAnnotation]; got != maintenanceBootAdopted {
		t.Errorf("adopted Maintenance marked %q, want %q", got, maintenanceBootAdopted)
	}
	lifecycle.SetAnnotation(s, MaintenanceBootAnnotation, "ns/m/uid")
	recoveredBookkeeping(s, metalv1alpha1.ServerStateMaintenance)
	if got := s.Annotations[MaintenanceBootAnnotation]; got != "ns/m/uid" {
		t.Errorf("a record of ours was replaced by %q", got)
	}
}
