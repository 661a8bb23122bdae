package campaign

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// judgeRecords judges the recorded BMC actions whose evidence is complete: a poll that started
// after the action exists. final judges the rest on what there is.
func (m *model) judgeRecords(final bool) {
	for _, r := range m.records() {
		if r.Seq > m.lastSeq {
			m.pending = append(m.pending, r)
			m.lastSeq = r.Seq
		}
	}
	if len(m.snaps) == 0 {
		return
	}
	newest := m.snaps[len(m.snaps)-1].Start
	keep := m.pending[:0]
	for _, r := range m.pending {
		if !final && !newest.After(r.Time) {
			keep = append(keep, r)
			continue
		}
		m.judge(r)
	}
	m.pending = keep
}

func (m *model) uuidOf(r redfish.Record) string {
	if r.UUID != "" {
		return strings.ToLower(r.UUID) // the machine's identity when it was acted on
	}
	return m.systemUUID(r.BMC, r.SystemID)
}

// judgeIdentity breaches invIdentity for an action that reached a machine which is not the
// Server's (or BMC's) it was sent for: sent to an address another BMC answered, or carried out
// on a system whose UUID no Server has (a replaced board nobody accepted). It reports whether
// it breached.
func (m *model) judgeIdentity(r redfish.Record) bool {
	m.checks[invIdentity]++
	subject := fmt.Sprintf("bmc-%d", r.BMC)
	if r.Via != "" {
		m.breach(invIdentity, subject, "%s %s sent to %s reached the machine behind %s", r.Action, r.ResetType, r.Via, r.Address)
		m.judged = append(m.judged, judgedRecord{r, "another machine"})
		return true
	}
	if r.UUID == "" {
		return false
	}
	u := strings.ToLower(r.UUID)
	for _, known := range m.serverUUID {
		if known == u {
			return false
		}
	}
	m.breach(invIdentity, subject, "%s %s on system %s (UUID %s), which no Server has", r.Action, r.ResetType, r.SystemID, r.UUID)
	m.judged = append(m.judged, judgedRecord{r, "no Server's machine"})
	return true
}

// evidence returns the snapshots that say what the API asked around an action at t: the last one
// before the decision window, every one in it, and the first one started after the action.
func (m *model) evidence(t time.Time) []*snapshot {
	lo := t.Add(-decideWindow)
	var ev []*snapshot
	var before *snapshot
	for _, s := range m.snaps {
		if s.End.Before(lo) {
			before = s
			continue
		}
		ev = append(ev, s)
		if !s.Start.Before(t) {
			break
		}
	}
	if before != nil {
		ev = append([]*snapshot{before}, ev...)
	}
	return ev
}

// verdict says whether, in snapshot s, an action of class cls on system uuid was asked for: the
// server is not held, or its claim's power, its approved maintenance (power, or a boot
// configuration to boot) asks for it.
func (m *model) verdict(s *snapshot, uuid string, cls class) (bool, string) {
	var why []string
	names := s.serversOf(uuid)
	// A held server may exist under no name right now (deleted, being re-created): its claims
	// still hold the box.
	for name, u := range m.serverUUID {
		if u == uuid && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	held := false
	for _, name := range names {
		v := s.Servers[name]
		if v != nil && v.MaintRef != "" {
			// Even a maintenance being deleted still drives the server until it hands it back.
			if mt := s.Maints[v.MaintRef]; mt != nil {
				if (cls == clsOn && mt.Power == metalv1alpha1.PowerOn) || (cls == clsOff && mt.Power == metalv1alpha1.PowerOff) ||
					cls == clsToggle || mt.Template {
					return true, "maintenance " + v.MaintRef
				}
				why = append(why, fmt.Sprintf("in maintenance %s (power %q, boot configuration %v)", v.MaintRef, mt.Power, mt.Template))
			}
		}
		for _, h := range m.holders(s, name, v) {
			if h.kind != "claim" {
				continue
			}
			held = true
			switch {
			case cls == clsOn && h.power == metalv1alpha1.PowerOn, cls == clsOff && h.power == metalv1alpha1.PowerOff, cls == clsToggle:
				return true, "claim " + h.key
			case cls == clsBoot && h.power == metalv1alpha1.PowerOn:
				// The one-time network boot of the claim's configuration, before its power-on.
				return true, "claim " + h.key + " boots its configuration"
			}
			state := ""
			if v != nil {
				state = v.State
			}
			why = append(why, fmt.Sprintf("%s (%s) claimed by %s (power %s)", name, state, h.key, h.power))
		}
	}
	if !held {
		return true, "not held"
	}
	return false, strings.Join(why, "; ")
}

// judge decides one recorded action: an operation's execution, a second execution of one, or an
// action the state of the API explains; else it breaches invUnasked.
func (m *model) judge(r redfish.Record) {
	if m.judgeIdentity(r) {
		return
	}
	cls := classOf(r)
	if cls == clsBMC {
		m.judgeBMCReset(r)
		return
	}
	switch r.Action {
	case redfish.ActionAccountCreate, redfish.ActionAccountPassword, redfish.ActionAccountDelete:
		m.judgeAccount(r)
		return
	case redfish.ActionSimpleUpdate:
		m.judgeFlash(r)
		return
	}
	if cls == clsNone {
		m.judged = append(m.judged, judgedRecord{r, "not an action on the box"})
		return
	}
	uuid := m.uuidOf(r)
	if m.judgeHandsOff(r, uuid) {
		return
	}
	what := r.ResetType
	if cls == clsBoot {
		what = "boot override " + r.Boot.Target + "/" + r.Boot.Enabled
	}
	// An undisturbed operation first: one a restore or a deletion took away may never be
	// carried out, and must not take the action of one still asked (a restore wiped a
	// power-cycle-server; the hard-restart-server asked later is what this restart carried out).
	for _, disturbed := range []bool{false, true} {
		for _, op := range m.ops {
			if (op.Disturbed != "") == disturbed && op.UUID == uuid && op.matches(cls) && len(op.Done) == 0 && !r.Time.Before(op.SetAt) {
				op.Done = append(op.Done, r)
				m.checks[invOnce]++
				m.judged = append(m.judged, judgedRecord{r, "operation " + op.Op})
				if op.Flash != "" {
					m.judgeFlashRestart(op, r)
				}
				return
			}
		}
	}
	ev := m.evidence(r.Time)
	if cls == clsRestart {
		for _, op := range m.ops {
			if op.UUID != uuid || op.Class != cls || len(op.Done) == 0 {
				continue
			}
			first := op.Done[0].Time
			if r.Time.After(first) && r.Time.Sub(first) < duplicateWindow && !m.anyMaintenanceBoot(ev, uuid) {
				op.Done = append(op.Done, r)
				m.breach(invOnce, op.Server+" "+op.Op, "operation %s on %s (set at +%s) carried out %d times: %s at +%s, then %s at +%s",
					op.Op, op.Server, m.since(op.SetAt), len(op.Done), op.Done[0].ResetType, m.since(first), r.ResetType, m.since(r.Time))
				m.judged = append(m.judged, judgedRecord{r, "second execution of " + op.Op})
				return
			}
		}
	}
	m.checks[invUnasked]++
	reasons := make([]string, 0, len(ev))
	for _, s := range ev {
		ok, why := m.verdict(s, uuid, cls)
		if ok {
			m.judged = append(m.judged, judgedRecord{r, why})
			return
		}
		reasons = append(reasons, fmt.Sprintf("+%s: %s", m.since(s.Start), why))
	}
	if len(ev) == 0 {
		m.judged = append(m.judged, judgedRecord{r, "no evidence"})
		return
	}
	m.judged = append(m.judged, judgedRecord{r, "UNASKED"})
	m.breach(invUnasked, fmt.Sprintf("bmc-%d %s", r.BMC, cls), "%s on bmc-%d (system %s) at +%s, asked by nothing: %s",
		what, r.BMC, uuid, m.since(r.Time), summarise(reasons))
}

// judgeBMCReset: a BMC reset is graceful-restart-bmc's execution, once; a second within the
// duplicate window, or one nothing asked for, breaches invOnce.
func (m *model) judgeBMCReset(r redfish.Record) {
	m.checks[invOnce]++
	for _, op := range m.ops {
		if op.BMC == r.BMC && op.Class == clsBMC && len(op.Done) == 0 && !r.Time.Before(op.SetAt) {
			op.Done = append(op.Done, r)
			m.judged = append(m.judged, judgedRecord{r, "operation " + op.Op})
			return
		}
	}
	for _, op := range m.ops {
		if op.BMC == r.BMC && op.Class == clsBMC && len(op.Done) > 0 && r.Time.Sub(op.Done[0].Time) < duplicateWindow {
			op.Done = append(op.Done, r)
			m.breach(invOnce, op.Server+" "+op.Op, "operation %s on BMC %s (set at +%s) carried out %d times: at +%s, then at +%s",
				op.Op, op.Server, m.since(op.SetAt), len(op.Done), m.since(op.Done[0].Time), m.since(r.Time))
			return
		}
	}
	m.breach(invOnce, fmt.Sprintf("bmc-%d reset", r.BMC), "BMC bmc-%d reset (%s) at +%s, asked by nothing", r.BMC, r.ResetType, m.since(r.Time))
}

// summarise keeps the first and last of a list of polls' reasons.
func summarise(reasons []string) string {
	if len(reasons) <= 2 {
		return strings.Join(reasons, " | ")
	}
	return fmt.Sprintf("%s | ... %d polls ... | %s", reasons[0], len(reasons)-2, reasons[len(reasons)-1])
}

func (m *model) anyMaintenanceBoot(ev []*snapshot, uuid string) bool {
	for _, s := range ev {
		for _, name := range s.serversOf(uuid) {
			v := s.Servers[name]
			if mt := s.Maints[v.MaintRef]; v.MaintRef != "" && mt != nil && mt.Template {
				return true
			}
		}
	}
	return false
}

// finalOps demands every undisturbed operation whose annotation the controller took away to have
// been carried out.
func (m *model) finalOps(last *snapshot) {
	for _, op := range m.ops {
		// A firmware restart's "at least once" is the firmware object's to report: it fails
		// the attempt when the version does not show.
		if len(op.Done) > 0 || op.Disturbed != "" || op.Moot || op.Flash != "" {
			continue
		}
		if uid, annotation, _, ok := last.annotated(op); ok && uid == op.ServerUID && annotation == op.Op {
			continue // still pending: the convergence check reports it unless the server is parked
		}
		m.checks[invOnce]++
		if m.reportedUncertain(op) {
			// The BMC answered ambiguously (a 5xx or a timeout after the request) and could not
			// say whether it acted: the operator reports that instead of risking a second one.
			continue
		}
		m.breach(invOnce, op.Server+" "+op.Op, "operation %s on %s (set at +%s, annotation gone at +%s) was never carried out",
			op.Op, op.Server, m.since(op.SetAt), m.since(op.Gone))
	}
}

// reportedUncertain reports whether the operator said of op that it cannot know whether it was
// carried out: an OperationUncertain event on its object after it was set.
func (m *model) reportedUncertain(op *opInstance) bool {
	if m.c == nil {
		return false // the model's unit tests have no API server
	}
	list := &eventsv1.EventList{}
	if err := m.c.List(context.Background(), list); err != nil {
		return false
	}
	for _, e := range list.Items {
		if e.Reason == metalv1alpha1.ReasonOperationUncertain && e.Regarding.Name == op.Server && !e.CreationTimestamp.Time.Before(op.SetAt.Truncate(time.Second)) {
			return true
		}
	}
	return false
}

// actions lists the recorded actions on a system after t, for the convergence check of a
// maintenance's boot.
func (m *model) actions(uuid string, after time.Time) []class {
	var out []class
	for _, r := range m.records() {
		if r.Time.After(after) && m.uuidOf(r) == uuid {
			out = append(out, classOf(r))
		}
	}
	return out
}

// requests reads the firmware controller's operation requests off a Server's annotations: the
// requester's token beside a pending operation annotation, the intent's by= field, and the
// tokens of the results the Server keeps.
func requests(a map[string]string) map[string]string {
	out := map[string]string{}
	for _, res := range strings.Split(a[intent.ResultAnnotation], ",") {
		if tok, _, ok := strings.Cut(strings.TrimSpace(res), " "); ok {
			out[tok] = ""
		}
	}
	if intent := a[intent.Annotation]; intent != "" {
		op, _, _ := strings.Cut(intent, "/")
		for _, f := range strings.Fields(intent) {
			if tok, ok := strings.CutPrefix(f, "by="); ok {
				out[tok] = op
			}
		}
	}
	if tok := a[intent.RequesterAnnotation]; tok != "" {
		out[tok] = a[metalv1alpha1.OperationAnnotation]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// flashOf is the flash a firmware request's token names: the object's UID, the version's hash
// and the attempt, without when it was recorded and how often the restart was asked again.
func flashOf(token string) string {
	f := strings.Split(token, ".")
	if len(f) != 5 {
		return token
	}
	return f[0] + "." + f[2] + "." + f[3]
}

// registerRequests turns firmware requests first seen in s into operations: each is asked no
// earlier than prev's lists, which did not show it.
func (m *model) registerRequests(prev, s *snapshot) {
	for name, v := range s.Servers {
		for tok, op := range v.Requests {
			if m.fwSeen[tok] {
				continue
			}
			m.fwSeen[tok] = true
			cls := opClass(op)
			if op == "" || (cls != clsRestart && cls != clsOn) {
				op, cls = "", clsRestart
			}
			m.ops = append(m.ops, &opInstance{Server: name, ServerUID: v.UID, UUID: v.UUID, Op: op, Class: cls, SetAt: prev.Start, BMC: -1, Flash: flashOf(tok)})
		}
	}
}

// judgeFlashRestart: one flash is at most one restart of its box; a second one (asked again
// although the first was carried out) breaches invOnce.
func (m *model) judgeFlashRestart(op *opInstance, r redfish.Record) {
	for _, other := range m.ops {
		if other != op && other.Flash == op.Flash && len(other.Done) > 0 {
			m.breach(invOnce, op.Server+" flash "+op.Flash, "the flash %s restarted %s twice: %s at +%s, then %s at +%s",
				op.Flash, op.Server, other.Done[0].ResetType, m.since(other.Done[0].Time), r.ResetType, m.since(r.Time))
			return
		}
	}
}

// judgeFlash: every image (one per firmware object and attempt in the campaign) is sent once,
// a set's image once to each box; a second SimpleUpdate of it breaches invOnce, whatever the BMC
// answered to the first.
func (m *model) judgeFlash(r redfish.Record) {
	m.checks[invOnce]++
	key, set := r.Image, strings.Contains(r.Image, "/"+setImagePart)
	if set {
		key = fmt.Sprintf("%s@bmc-%d", r.Image, r.BMC)
	}
	prev := m.flashes[key]
	m.flashes[key] = append(prev, r)
	if len(prev) > 0 {
		m.breach(invOnce, "flash "+key, "image %s sent %d times: to bmc-%d at +%s, then to bmc-%d at +%s",
			r.Image, len(prev)+1, prev[0].BMC, m.since(prev[0].Time), r.BMC, m.since(r.Time))
		m.judged = append(m.judged, judgedRecord{r, "second flash"})
		return
	}
	if set {
		m.judgeWave(r)
	}
	m.judged = append(m.judged, judgedRecord{r, "flash"})
}

// setWaveGap is the least time between a one-at-a-time set's flashes of two boxes: the first
// box's update task alone runs this long (the emulator's default, which the campaign keeps).
const setWaveGap = 2 * time.Second

// judgeWave: a campaign set works on one box at a time (maxUnavailable 1), so its image reaches
// another box only after the first one's task could have ended, unless that box left the set
// (its server deleted or made anew, which takes the label). A deleted set that dropped its
// in-flight count started the next wave at once.
func (m *model) judgeWave(r redfish.Record) {
	m.checks[invWave]++
	newest := m.snaps[len(m.snaps)-1]
	for key, recs := range m.flashes {
		first := recs[0]
		if !strings.HasPrefix(key, r.Image+"@") || first.BMC == r.BMC || r.Time.Sub(first.Time) >= setWaveGap {
			continue
		}
		for name, v := range newest.Servers {
			if v.BMC == fmt.Sprintf("bmc-%d", first.BMC) && v.Labels[setLabel] != "" && !v.Deleting {
				m.breach(invWave, "flash "+r.Image, "one-at-a-time set image %s reached bmc-%d at +%s, %s after bmc-%d (%s still selected) at +%s",
					r.Image, r.BMC, m.since(r.Time), r.Time.Sub(first.Time).Round(time.Millisecond), first.BMC, name, m.since(first.Time))
				return
			}
		}
	}
}

// judgeAccount: an account request reaches only a BMC whose rotation was asked, and only while
// its BMCSecret is its own: a rotation asked while another BMC names the Secret is refused, and
// the Secret's other BMCs are never sent its pending password.
func (m *model) judgeAccount(r redfish.Record) {
	m.checks[invAccounts]++
	name := fmt.Sprintf("bmc-%d", r.BMC)
	asked := false
	for _, a := range m.rotations {
		asked = asked || (a.BMC == r.BMC && !a.SetAt.After(r.Time))
	}
	if !asked {
		m.breach(invAccounts, name, "%s (%s) on %s at +%s: nobody asked to rotate its credentials", r.Action, r.Account, name, m.since(r.Time))
		m.judged = append(m.judged, judgedRecord{r, "UNASKED account change"})
		return
	}
	ev := m.evidence(r.Time)
	var shared []string
	for _, s := range ev {
		others := s.sharing(name)
		if len(others) == 0 {
			m.judged = append(m.judged, judgedRecord{r, "rotate-credentials"})
			return
		}
		shared = others
	}
	if len(ev) == 0 {
		m.judged = append(m.judged, judgedRecord{r, "no evidence"})
		return
	}
	m.breach(invAccounts, name, "%s (%s) on %s at +%s while its BMCSecret is shared with %v (every poll from +%s on): the rotation must be refused",
		r.Action, r.Account, name, m.since(r.Time), shared, m.since(ev[0].Start))
	m.judged = append(m.judged, judgedRecord{r, "account change on a shared Secret"})
}
