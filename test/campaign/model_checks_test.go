package campaign

import (
	"maps"
	"slices"
	"sort"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// holder names what holds a server in a snapshot: a live claim pointing at it (or that it was
// seen bound to, even if the Server object was re-created without the ref), or a maintenance.
type holder struct {
	kind, key, uid string
	power          metalv1alpha1.Power
}

func (m *model) holders(s *snapshot, name string, v *srvView) []holder {
	var out []holder
	if v != nil && v.ClaimRef != "" {
		if c := s.Claims[v.ClaimRef]; c != nil && !c.Deleting {
			out = append(out, holder{"claim", v.ClaimRef, c.UID, c.Power})
		}
	}
	for key, c := range s.Claims {
		if c.Deleting || c.ServerRef != name || (v != nil && v.ClaimRef == key) {
			continue
		}
		if m.bound[c.UID] == name {
			out = append(out, holder{"claim", key, c.UID, c.Power})
		}
	}
	if v != nil && v.MaintRef != "" {
		if mt := s.Maints[v.MaintRef]; mt != nil && !mt.Deleting {
			out = append(out, holder{"maintenance", v.MaintRef, mt.UID, mt.Power})
		}
	}
	return out
}

func (s *snapshot) stillThere(h holder) bool {
	switch h.kind {
	case "claim":
		c := s.Claims[h.key]
		return c != nil && c.UID == h.uid && !c.Deleting
	default:
		mt := s.Maints[h.key]
		return mt != nil && mt.UID == h.uid && !mt.Deleting
	}
}

// checkHeld: a server held in prev that is gone, re-created or without its finalizer in s, while
// its holder is still there, was let go under a live claim or maintenance.
func (m *model) checkHeld(prev, s *snapshot) {
	names := slices.Sorted(maps.Keys(prev.Servers))
	for _, name := range names {
		pv := prev.Servers[name]
		hs := m.holders(prev, name, pv)
		if len(hs) == 0 {
			continue
		}
		m.checks[invHeld]++
		cv := s.Servers[name]
		what := ""
		switch {
		case cv == nil:
			what = "deleted"
		case cv.UID != pv.UID:
			what = "deleted and re-created"
		case pv.Finalizer && !cv.Finalizer:
			what = "stripped of its finalizer " + server.Finalizer
		default:
			continue
		}
		for _, h := range hs {
			if s.stillThere(h) {
				m.breach(invHeld, name, "server %s %s between +%s and +%s while %s %s still holds it (state %s, claimRef %q, maintenanceRef %q)",
					name, what, m.since(prev.End), m.since(s.Start), h.kind, h.key, pv.State, pv.ClaimRef, pv.MaintRef)
				break
			}
		}
	}
}

// checkUnique: one Server per system UUID, one server per claim, one claim per server.
func (m *model) checkUnique(s *snapshot) {
	m.checks[invUnique]++
	byUUID, byClaim := map[string][]string{}, map[string][]string{}
	for name, v := range s.Servers {
		if m.twins[name] == nil {
			// A hand-made twin is the user's second Server, not one the operator made.
			byUUID[v.UUID] = append(byUUID[v.UUID], name)
		}
		if v.ClaimRef != "" {
			byClaim[v.ClaimRef] = append(byClaim[v.ClaimRef], name)
		}
	}
	for uuid, names := range byUUID {
		if len(names) > 1 {
			sort.Strings(names)
			m.breach(invUnique, "uuid "+uuid, "system %s has %d Servers: %v", uuid, len(names), names)
		}
	}
	for claim, names := range byClaim {
		if len(names) > 1 {
			sort.Strings(names)
			m.breach(invUnique, "claim "+claim, "claim %s is bound to %d servers: %v", claim, len(names), names)
		}
	}
	reported := map[string][]string{}
	for key, c := range s.Claims {
		if !c.Deleting && c.Phase == string(metalv1alpha1.PhaseBound) && c.ServerRef != "" {
			reported[c.ServerRef] = append(reported[c.ServerRef], key)
		}
	}
	for server, claims := range reported {
		if len(claims) < 2 {
			delete(m.twoSince, server)
			continue
		}
		since, ok := m.twoSince[server]
		if !ok {
			m.twoSince[server] = s.Start
			continue
		}
		if s.Start.Sub(since) > twoClaimsGrace {
			sort.Strings(claims)
			m.breach(invUnique, "server "+server, "server %s is reported Bound by %d claims %v since +%s", server, len(claims), claims, m.since(since))
		}
	}
	for server := range m.twoSince {
		if len(reported[server]) < 2 {
			delete(m.twoSince, server)
		}
	}
}

// registerOp records an operation annotation the harness set at setAt (just before its write).
func (m *model) registerOp(server, uid, uuid, op string, setAt time.Time) {
	cls := opClass(op)
	if cls == clsNone || cls == clsBMC {
		return // graceful-restart-bmc on a Server is refused and removed: nothing is owed
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops = append(m.ops, &opInstance{Server: server, ServerUID: uid, UUID: uuid, Op: op, Class: cls, SetAt: setAt, BMC: -1})
}

// registerBMCOp records an operation annotation the harness set on BMC object name (emulated
// BMC index i).
func (m *model) registerBMCOp(name, uid string, i int, op string, setAt time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if op == metalv1alpha1.OperationRotateCredentials {
		m.rotations = append(m.rotations, rotationAsk{BMC: i, SetAt: setAt})
		return
	}
	if opClass(op) != clsBMC {
		return
	}
	m.ops = append(m.ops, &opInstance{Server: name, ServerUID: uid, Op: op, Class: clsBMC, SetAt: setAt, BMC: i})
}

// annotated returns the UID and operation annotation of the object an operation is on.
func (s *snapshot) annotated(op *opInstance) (uid, annotation string, deleting, ok bool) {
	if op.BMC >= 0 {
		if v := s.BMCs[op.Server]; v != nil {
			return v.UID, v.Op, v.Deleting, true
		}
		return "", "", false, false
	}
	if v := s.Servers[op.Server]; v != nil {
		return v.UID, v.Op, v.Deleting, true
	}
	return "", "", false, false
}

// disturbOps marks the pending operations of a server (all of them when server is "") as ones
// whose execution cannot be demanded any more: their server was deleted, restored or stripped of
// the controller's bookkeeping.
func (m *model) disturbOps(server, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range m.ops {
		if (server == "" || op.Server == server) && op.Disturbed == "" && len(op.Done) == 0 {
			op.Disturbed = why
		}
	}
}

func (m *model) trackOps(s *snapshot) {
	if s.Restoring {
		return
	}
	for _, op := range m.ops {
		if !op.Gone.IsZero() || s.Start.Before(op.SetAt) {
			continue
		}
		switch p := s.Power[op.UUID]; {
		case op.Class == clsOff && (p == redfish.PowerOff || p == redfish.PowerPoweringOff),
			op.Class == clsOn && (p == redfish.PowerOn || p == redfish.PowerPoweringOn):
			op.Moot = true
		}
		uid, annotation, deleting, ok := s.annotated(op)
		switch {
		case !ok || uid != op.ServerUID:
			op.Gone = s.End
			if op.Disturbed == "" && len(op.Done) == 0 {
				op.Disturbed = "deleted"
			}
		case annotation != op.Op:
			op.Gone = s.End
		case deleting && op.Disturbed == "" && len(op.Done) == 0:
			op.Disturbed = "server being deleted" // a deleted server is finalized, not operated
		}
	}
}
