package campaign

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
)

// claimable is the controllers' own notion (claimable.Server), read from a view: a server whose
// last release was not cleaned yet (its mark) is not.
func claimable(v *srvView) bool {
	return !v.Deleting && v.State == string(metalv1alpha1.ServerStateAvailable) && !v.Unclaimable && v.ClaimRef == "" &&
		v.MaintRef == "" && v.Power == string(metalv1alpha1.PowerStateOff) && v.Op != metalv1alpha1.OperationIgnore && !uncleaned(v)
}

func pendingMaintenance(s *snapshot, server string) bool {
	for _, mt := range s.Maints {
		if mt.ServerRef == server && !mt.Deleting {
			return true
		}
	}
	return false
}

func tolerated(tols []metalv1alpha1.Toleration, taints []metalv1alpha1.Taint) bool {
	for _, t := range taints {
		effect := t.Effect
		if effect == "" {
			effect = metalv1alpha1.TaintEffectNoBind
		}
		ok := false
		for _, tol := range tols {
			if tol.Effect != "" && tol.Effect != effect {
				continue
			}
			if tol.Operator == metalv1alpha1.TolerationOpExists && (tol.Key == "" || tol.Key == t.Key) ||
				tol.Key == t.Key && tol.Value == t.Value {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// couldBind names a server a pending claim could bind right now, if there is one.
func couldBind(s *snapshot, c *claimView) string {
	names := slices.Sorted(maps.Keys(s.Servers))
	for _, name := range names {
		v := s.Servers[name]
		if (c.ServerRef != "" && name != c.ServerRef) || !claimable(v) || !tolerated(c.Tolerations, v.Taints) || pendingMaintenance(s, name) {
			continue
		}
		if c.Selector != nil {
			sel, err := metav1.LabelSelectorAsSelector(c.Selector)
			if err != nil || !sel.Matches(labels.Set(v.Labels)) {
				continue
			}
		}
		return name
	}
	return ""
}

// converge waits until the fleet is settled (twice, 2 s apart) or convergeBound has passed.
func (w *world) converge(healed time.Time) {
	deadline := healed.Add(convergeBound)
	var stable, applied time.Time
	var seen *snapshot
	for {
		if time.Since(applied) > 2*time.Second {
			// As GitOps keeps applying the fleet's manifests: a BMC whose deletion only finished
			// after the heal comes back too.
			for i := range w.sch.BMCs {
				if out, err := w.ensureBMC(i); err != nil {
					w.note("converge: %s: %v", out, err)
				}
				if out, err := w.acceptBoardBack(i); err != nil || out != "" {
					w.note("converge: %s %v", out, err)
				}
			}
			applied = time.Now()
		}
		s := w.m.last()
		if s != nil && s != seen && s.Start.After(healed) {
			seen = s
			problems := w.convergence(s)
			w.m.mu.Lock()
			w.m.checks[invConverge]++
			w.m.mu.Unlock()
			switch {
			case len(problems) > 0:
				stable = time.Time{}
				if time.Now().After(deadline) {
					w.m.mu.Lock()
					w.m.breach(invConverge, "fleet", "not settled %s after the faults stopped: %s", convergeBound, strings.Join(problems, "; "))
					w.m.mu.Unlock()
					return
				}
			case stable.IsZero():
				stable = time.Now()
			case time.Since(stable) >= 2*time.Second:
				w.note("converged %s after the heal", time.Since(healed).Round(100*time.Millisecond))
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// convergence lists what is not settled in a snapshot: every system one Server, in the state its
// refs say with the power they ask for and a status mirroring its durable state; claims Bound or
// pending for a reason that holds; maintenances reporting what they hold; BMCs ready.
func (w *world) convergence(s *snapshot) []string {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var p []string
	power := map[string]string{}
	for i := range w.sch.BMCs {
		u := w.uuid(i)
		power[u] = w.fleet.BMC(i).Systems()[0].PowerState()
		if names := s.serversOf(u); len(names) != 1 {
			p = append(p, fmt.Sprintf("system of %s has Servers %v", w.bmcName(i), names))
		}
	}
	names := slices.Sorted(maps.Keys(s.Servers))
	for _, name := range names {
		v := s.Servers[name]
		if v.Deleting {
			if len(m.holders(s, name, v)) == 0 {
				p = append(p, name+" is being deleted but nothing holds it")
			}
			continue
		}
		want, wantPower := metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerOff
		switch {
		case v.Parked:
			// Parked until unparked, whatever else points at it: the box is left alone.
			want, wantPower = metalv1alpha1.ServerStateParked, ""
		case v.MaintRef != "":
			want, wantPower = metalv1alpha1.ServerStateMaintenance, ""
			if mt := s.Maints[v.MaintRef]; mt == nil {
				p = append(p, fmt.Sprintf("%s points at maintenance %s, which does not exist", name, v.MaintRef))
			} else {
				wantPower = mt.Power
			}
		case v.ClaimRef != "":
			want = metalv1alpha1.ServerStateReserved
			if c := s.Claims[v.ClaimRef]; c == nil || c.Deleting {
				p = append(p, fmt.Sprintf("%s points at claim %s, which is gone or going", name, v.ClaimRef))
			} else {
				wantPower = c.Power
			}
		}
		switch {
		case v.State == string(metalv1alpha1.ServerStateCleaning) && want == metalv1alpha1.ServerStateAvailable:
			// On its way to Available: settled only once there.
			p = append(p, fmt.Sprintf("%s is still Cleaning (mark %q, round %q, cleaned %q)", name, v.Mark, v.Round, v.Cleaned))
		case v.State != string(want):
			p = append(p, fmt.Sprintf("%s is %q, its refs say %s (cleaning mark %q, failed %q)", name, v.State, want, v.Mark, v.Failed))
		case want == metalv1alpha1.ServerStateAvailable && uncleaned(v):
			// Sent to Cleaning by its next pass; claimable only once cleaned.
			p = append(p, fmt.Sprintf("%s is Available with the mark %q of a release not cleaned", name, v.Mark))
		}
		if v.Mirror != v.State {
			p = append(p, fmt.Sprintf("%s status.state %q does not mirror its state %q", name, v.Mirror, v.State))
		}
		if wantPower != "" && (v.Power != string(wantPower) || power[v.UUID] != string(wantPower)) {
			p = append(p, fmt.Sprintf("%s power: status %q, BMC %q, want %s", name, v.Power, power[v.UUID], wantPower))
		}
		if want != metalv1alpha1.ServerStateParked && v.Ready != string(metav1.ConditionTrue) {
			p = append(p, fmt.Sprintf("%s Ready is %q", name, v.Ready))
		}
		if v.Op != "" && !v.Parked {
			p = append(p, fmt.Sprintf("%s operation %q still pending", name, v.Op))
		}
	}
	keys := slices.Sorted(maps.Keys(s.Claims))
	for _, key := range keys {
		c := s.Claims[key]
		if c.Deleting {
			p = append(p, "claim "+key+" is being deleted and not gone")
			continue
		}
		var holds []string
		for _, name := range names {
			if s.Servers[name].ClaimRef == key {
				holds = append(holds, name)
			}
		}
		switch c.Phase {
		case string(metalv1alpha1.PhaseBound):
			if len(holds) != 1 || c.ServerRef != holds[0] {
				p = append(p, fmt.Sprintf("claim %s reports Bound to %q, servers pointing at it: %v", key, c.ServerRef, holds))
			}
		case string(metalv1alpha1.PhaseUnbound):
			if c.Bound != string(metav1.ConditionFalse) || c.Why == "" {
				p = append(p, fmt.Sprintf("claim %s is Unbound without a reason (Bound %q %q)", key, c.Bound, c.Why))
			} else if could := couldBind(s, c); could != "" {
				p = append(p, fmt.Sprintf("claim %s is Unbound (%s) while %s is free for it", key, c.Why, could))
			}
		default:
			p = append(p, fmt.Sprintf("claim %s has phase %q", key, c.Phase))
		}
	}
	keys = slices.Sorted(maps.Keys(s.Maints))
	for _, key := range keys {
		mt := s.Maints[key]
		if mt.Deleting {
			p = append(p, "maintenance "+key+" is being deleted and not gone")
			continue
		}
		v := s.Servers[mt.ServerRef]
		// A parked server enters nothing, nor does one deleted before it got there (kept for its
		// holders only); one deleted while in Maintenance stays in it.
		active := v != nil && v.MaintRef == key && !v.Parked &&
			(!v.Deleting || v.State == string(metalv1alpha1.ServerStateMaintenance))
		switch {
		case active && mt.State != string(metalv1alpha1.ServerMaintenanceStateInMaintenance) && mt.State != string(metalv1alpha1.ServerMaintenanceStateFailed):
			p = append(p, fmt.Sprintf("maintenance %s holds %s but reports %q", key, mt.ServerRef, mt.State))
		case !active && (mt.State != string(metalv1alpha1.ServerMaintenanceStatePending) || mt.Reason == ""):
			p = append(p, fmt.Sprintf("maintenance %s waits but reports %q (%q)", key, mt.State, mt.Reason))
		case active && mt.Template && mt.Power != metalv1alpha1.PowerOff:
			// From the last poll that showed the server not yet taken (else the maintenance's
			// creation, in whole seconds): the boot may come before the first poll that shows it.
			since, ok := m.maintBefore[mt.UID]
			if !ok {
				since = mt.Created.Add(-time.Second)
			}
			acts := m.actions(v.UUID, since)
			if !slices.Contains(acts, clsBoot) || !(slices.Contains(acts, clsRestart) || slices.Contains(acts, clsOn)) {
				p = append(p, fmt.Sprintf("maintenance %s holds %s (seen from +%s) but its boot configuration was never booted (actions on it since it was taken: %v)",
					key, mt.ServerRef, m.since(m.maintSince[mt.UID]), acts))
			}
		}
	}
	bmcs := slices.Sorted(maps.Keys(s.BMCs))
	for _, name := range bmcs {
		b := s.BMCs[name]
		if b.Deleting {
			// A BMC's deletion waits for its servers; one held by a claim or maintenance blocks it.
			blocked := false
			for _, srv := range names {
				v := s.Servers[srv]
				blocked = blocked || (v.BMC == name && len(m.holders(s, srv, v)) > 0)
			}
			if !blocked {
				p = append(p, fmt.Sprintf("BMC %s is being deleted, none of its servers is held, and it is not gone", name))
			}
			continue
		}
		if b.State != string(metalv1alpha1.BMCStateEnabled) || b.Ready != string(metav1.ConditionTrue) {
			p = append(p, fmt.Sprintf("BMC %s: state %q, Ready %q", name, b.State, b.Ready))
		}
		if b.Op != "" {
			p = append(p, fmt.Sprintf("BMC %s operation %q still pending", name, b.Op))
		}
	}
	return append(p, w.firmwareSettled()...)
}

// firmwareSettled: every BIOSVersion the schedule made has ended (Completed or Failed) or, once
// deleted, is gone, or waits for a held server (heldServers) and says so; and no
// maintenance.metal.ironcore.dev ServerMaintenance is left without a
// BIOSVersion under way: the box is back in service.
func (w *world) firmwareSettled() []string {
	var p []string
	vs := &systemv1alpha1.BIOSVersionList{}
	ms := &maintenancev1alpha1.ServerMaintenanceList{}
	if err := w.c.List(w.ctx, vs); err != nil {
		return []string{err.Error()}
	}
	if err := w.c.List(w.ctx, ms); err != nil {
		return []string{err.Error()}
	}
	servers := &metalv1alpha1.ServerList{}
	if err := w.c.List(w.ctx, servers); err != nil {
		return []string{err.Error()}
	}
	held := heldServers(servers.Items, ms.Items)
	busy := map[types.UID]bool{}
	for _, v := range vs.Items {
		switch {
		case v.DeletionTimestamp != nil:
			p = append(p, fmt.Sprintf("BIOSVersion %s is being deleted and not gone (%s)", v.Name, v.Annotations[record.Annotation]))
			busy[v.UID] = true
		case waitsForHeldServer(&v, held):
			busy[v.UID] = true
		case v.Status.State != systemv1alpha1.VersionStateCompleted && v.Status.State != systemv1alpha1.VersionStateFailed:
			p = append(p, fmt.Sprintf("BIOSVersion %s is %q (%s)", v.Name, v.Status.State, v.Annotations[record.Annotation]))
			busy[v.UID] = true
		}
	}
	for _, m := range ms.Items {
		if c := metav1.GetControllerOf(&m); c != nil && c.Kind == "BIOSVersion" && !busy[c.UID] {
			p = append(p, fmt.Sprintf("ServerMaintenance %s/%s of BIOSVersion %s outlives its upgrade", m.Namespace, m.Name, c.Name))
		}
	}
	return p
}

// heldServers: the servers that enter no upgrade's maintenance for a reason the schedule left in
// place: parked, in a maintenance a user made (rather than one an upgrade made), or being
// deleted (a claim holds the deletion; such a server enters no maintenance).
func heldServers(servers []metalv1alpha1.Server, ms []maintenancev1alpha1.ServerMaintenance) map[string]bool {
	upgrades := map[string]bool{} // by namespace/name
	for _, m := range ms {
		if c := metav1.GetControllerOf(&m); c != nil && c.Kind == "BIOSVersion" {
			upgrades[m.Namespace+"/"+m.Name] = true
		}
	}
	held := map[string]bool{}
	for _, s := range servers {
		ref := s.Spec.ServerMaintenanceRef
		held[s.Name] = s.Annotations[metalv1alpha1.ParkedAnnotation] != "" || (ref != nil && !upgrades[ref.Namespace+"/"+ref.Name]) ||
			s.DeletionTimestamp != nil
	}
	return held
}

// waitsForHeldServer: an upgrade of a server parked, or held by another maintenance, waits for
// the maintenance it needs (one maintenance at a time; a parked
// server enters none until unparked) and says so. That is settled, not stuck.
func waitsForHeldServer(v *systemv1alpha1.BIOSVersion, held map[string]bool) bool {
	if v.Spec.ServerRef == nil || !held[v.Spec.ServerRef.Name] {
		return false
	}
	c := meta.FindStatusCondition(v.Status.Conditions, systemv1alpha1.ConditionUpgraded)
	return c != nil && c.Status == metav1.ConditionFalse && c.Reason == systemv1alpha1.ReasonAwaitingMaintenance
}

// acceptBoardBack answers, as the operator the IdentityMismatch event asks, for a Server of BMC i
// that was made while its board was swapped (deleted and re-created in the swap) and so recorded
// the swapped board: once the original board is back, that is a board replacement like any other
// and is accepted with AcceptSystemUUIDAnnotation. A Server that kept the original board needs
// nothing.
func (w *world) acceptBoardBack(i int) (string, error) {
	w.mu.Lock()
	swapped := w.astray[i]
	w.mu.Unlock()
	if swapped {
		return "", nil
	}
	var list metalv1alpha1.ServerList
	if err := w.c.List(w.ctx, &list); err != nil {
		return "listing Servers", err
	}
	orig := strings.ToLower(w.board[i][0])
	swap, _ := swappedBoard(orig, "")
	for k := range list.Items {
		s := &list.Items[k]
		if s.Spec.BMCRef == nil || s.Spec.BMCRef.Name != w.bmcName(i) || strings.ToLower(s.Spec.SystemUUID) != swap ||
			s.Annotations[metalv1alpha1.AcceptSystemUUIDAnnotation] == orig {
			continue
		}
		patch := client.MergeFrom(s.DeepCopy())
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, metalv1alpha1.AcceptSystemUUIDAnnotation, orig)
		if err := w.c.Patch(w.ctx, s, patch); err != nil {
			return "accepting the original board back on " + s.Name, client.IgnoreNotFound(err)
		}
		return fmt.Sprintf("%s recorded the swapped board of %s: original board accepted back", s.Name, w.bmcName(i)), nil
	}
	return "", nil
}
