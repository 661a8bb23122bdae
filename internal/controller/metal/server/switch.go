package server

import (
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// What "metalhub migrate plan" asks of the Server controller: the rules it applies, read
// without acting.

// StateOnStart is the state the Server controller starts s in, and where it comes from: our
// annotation, derived from refs and markers, adopted from another operator's status, or Initial.
func StateOnStart(s *metalv1alpha1.Server) (metalv1alpha1.ServerState, lifecycle.Source) {
	return serverstate.Store.Get(s)
}

// AsOnStart is s as the Server controller's first pass leaves its bookkeeping: a recovered
// (adopted or derived) state persisted with what goes with it (recoveredBookkeeping). s is not
// changed.
func AsOnStart(s *metalv1alpha1.Server) *metalv1alpha1.Server {
	c := s.DeepCopy()
	if state, src := serverstate.Store.Get(c); src == lifecycle.FromAdopted || src == lifecycle.FromDerived {
		lifecycle.SetAnnotation(c, lifecycle.StateAnnotation, string(state))
		recoveredBookkeeping(c, state)
	}
	return c
}

// MaintenanceBooted reports whether s (as AsOnStart leaves it) already runs the boot
// configuration of its maintenance m, given the box's power and the configuration's readiness:
// the rule the Server controller applies (maintenanceBooted).
func MaintenanceBooted(s *metalv1alpha1.Server, m *metalv1alpha1.ServerMaintenance, on, configReady bool) bool {
	record := s.Annotations[serverstate.MaintenanceBootAnnotation]
	if state, _ := serverstate.Store.Get(s); state == metalv1alpha1.ServerStateError && record == "" && s.Annotations[serverstate.PreviousStateAnnotation] == "" {
		record = maintenanceBootAdopted // entering Maintenance from an Error found, not entered
	}
	return maintenanceBooted(record, m, on, configReady)
}

// ErrorExit is where s (as AsOnStart leaves it) in Error goes once its BMC answers, at power,
// and whether it goes now (errorExit).
func ErrorExit(s *metalv1alpha1.Server, power metalv1alpha1.PowerState) (metalv1alpha1.ServerState, bool) {
	to, _, ok := errorExit(s, bmc.PowerState(power))
	return to, ok
}

// PreviousState is the state a server returns to after Maintenance (or an Error it entered).
func PreviousState(s *metalv1alpha1.Server) metalv1alpha1.ServerState { return previousState(s) }

// DiscoveryOfOurs reports whether s in Discovery runs a discovery round of metalhub's (one
// without is the reference's, discovered again once the server is Off and unclaimed).
func DiscoveryOfOurs(s *metalv1alpha1.Server) bool {
	return s.Annotations[discovery.RoundAnnotation] != ""
}
