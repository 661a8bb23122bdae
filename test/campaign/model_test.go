package campaign

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// The invariants, in the order the summary prints them (docs/safety.md says them in words).
const (
	invUnasked   = "no-unasked-power-or-boot"
	invOnce      = "operation-exactly-once"
	invHeld      = "held-server-kept"
	invUnique    = "one-server-one-claim"
	invConverge  = "converges"
	invPassBound = "pass-bound"
	invHealthy   = "healthy-served"
	invIdentity  = "own-machine-only"
	invPaused    = "paused-left-alone"
	invAccounts  = "accounts-only-where-asked"
	invWave      = "set-wave-bound"
	invFenced    = "fenced-handover"
)

var invariants = []string{invUnasked, invOnce, invHeld, invUnique, invConverge, invPassBound, invHealthy, invIdentity, invPaused, invAccounts, invWave, invFenced}

// Windows of the model. A BMC action is judged against what the API said from decideWindow before
// it until the first observation after it: the manager decided at most one pass (the request
// timeout) before the BMC recorded the action, on a cache at most a moment behind the API.
const (
	decideWindow = bmcRequestTimeout + 2*time.Second
	// duplicateWindow is how long after an operation was carried out a second one counts as the
	// same operation run twice (a crash between action and bookkeeping, then a lease handover).
	duplicateWindow = 15 * time.Second
	// twoClaimsGrace is how long two claims may both report Bound for one server (status lags).
	twoClaimsGrace = 2 * time.Second
)

// Views: the part of each object the invariants read, copied out of a list.
type srvView struct {
	UID, UUID, BMC      string
	Deleting, Finalizer bool
	ClaimRef, MaintRef  string
	State, Mirror       string // lifecycle annotation, status.state
	Power, Ready        string
	Op                  string
	Parked, Unclaimable bool
	Paused, PauseAck    string
	Taints              []metalv1alpha1.Taint
	Labels              map[string]string
	// Requests are the operations another controller (firmware) asked of the server and the
	// server has not forgotten yet, by requester token: the operation while it is known, ""
	// once only its result is left.
	Requests map[string]string
}

type claimView struct {
	UID                 string
	Deleting            bool
	Power               metalv1alpha1.Power
	ServerRef           string
	Selector            *metav1.LabelSelector
	Tolerations         []metalv1alpha1.Toleration
	Phase, Bound, Why   string // phase, Bound condition status and reason
	MaintenanceNeeded   bool
	MaintenanceApproved bool
}

type maintView struct {
	UID            string
	Created        time.Time
	Deleting       bool
	ServerRef      string
	Power          metalv1alpha1.Power
	Template       bool
	State, Reason  string
	CreatedByUser  bool
	PolicyEnforced bool
}

type bmcView struct {
	UID      string
	Deleting bool
	State    string
	Ready    string
	Op       string
	Secret   string // spec.bmcSecretRef
}

// sharing lists the other BMCs that name BMC name's BMCSecret in the snapshot.
func (s *snapshot) sharing(name string) []string {
	b := s.BMCs[name]
	if b == nil {
		return nil
	}
	var out []string
	for other, v := range s.BMCs {
		if other != name && v.Secret == b.Secret {
			out = append(out, other)
		}
	}
	sort.Strings(out)
	return out
}

// snapshot is one poll of the API server. Lists are consistent each; the poll's state held at
// some moment between Start and End.
type snapshot struct {
	Start, End time.Time
	Epoch      int
	Restoring  bool // taken while the harness restored a backup: checks skip it
	Servers    map[string]*srvView
	Claims     map[string]*claimView // namespace/name
	Maints     map[string]*maintView // namespace/name
	BMCs       map[string]*bmcView
	// Power is each system's power state in the emulator at Start, by UUID.
	Power map[string]string
}

func (s *snapshot) serversOf(uuid string) []string {
	var out []string
	for name, v := range s.Servers {
		if v.UUID == uuid {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// class is what a recorded BMC action does to the box.
type class string

const (
	clsOn      class = "power-on"
	clsOff     class = "power-off"
	clsRestart class = "reset"
	clsToggle  class = "power-button"
	clsBoot    class = "boot-override"
	clsBMC     class = "bmc-reset" // Manager.Reset: the BMC reboots, the host does not
	clsNone    class = ""
)

func classOf(r redfish.Record) class {
	switch r.Action {
	case redfish.ActionBootOverride:
		return clsBoot
	case redfish.ActionManagerReset:
		return clsBMC
	case redfish.ActionIndicatorLED:
		return clsNone // a light, not the box
	case redfish.ActionAccountCreate, redfish.ActionAccountPassword, redfish.ActionAccountDelete:
		return clsNone // rotate-credentials: the BMC's accounts, not the box
	case redfish.ActionInsertMedia, redfish.ActionEjectMedia, redfish.ActionBootOrder, redfish.ActionBiosSettings, redfish.ActionSimpleUpdate, redfish.ActionManagerAttributes:
		return clsNone // staged for a boot, none by itself
	}
	switch r.ResetType {
	case "On", "ForceOn":
		return clsOn
	case "ForceOff", "GracefulShutdown":
		return clsOff
	case "PushPowerButton":
		return clsToggle
	}
	return clsRestart // GracefulRestart, ForceRestart, PowerCycle, Nmi
}

func opClass(op string) class {
	switch op {
	case metalv1alpha1.OperationGracefulRestartServer, metalv1alpha1.OperationHardRestartServer, metalv1alpha1.OperationPowerCycleServer:
		return clsRestart
	case metalv1alpha1.OperationForceOffServer:
		return clsOff
	case metalv1alpha1.OperationForceOnServer:
		return clsOn
	case metalv1alpha1.OperationGracefulRestartBMC:
		return clsBMC
	}
	return clsNone
}

// opInstance is one operation annotation the schedule set.
type opInstance struct {
	// Server names the object the annotation is on: a Server, or a BMC when BMC >= 0.
	Server, ServerUID, UUID, Op string
	BMC                         int
	Class                       class
	SetAt                       time.Time
	Gone                        time.Time // first poll without the annotation
	Done                        []redfish.Record
	Disturbed                   string // why "at least once" cannot be asked of it
	// Moot: the box was seen in the operation's target power state while it was pending (the
	// BMC client skips a force-off of an Off box, a force-on of an On one).
	Moot bool
	// Flash is set on a restart the firmware controller asked for (seen on the Server, not set
	// by the harness): the flash it installs (object UID, version, attempt). Op is "" when only
	// its result was seen: a restart or a force-on, whichever it was.
	Flash string
}

// matches reports whether a recorded action of class cls can be op's execution.
func (op *opInstance) matches(cls class) bool {
	return op.Class == cls || (op.Flash != "" && op.Op == "" && (cls == clsRestart || cls == clsOn))
}

// rotationAsk is a rotate-credentials the harness set on a BMC object.
type rotationAsk struct {
	BMC   int
	SetAt time.Time
}

// breach is one invariant violation; the same invariant on the same subject counts once.
type breach struct {
	Inv, Subject, Msg string
	At                time.Duration
	Count             int
}

// model is the campaign's model of what was asked, fed by polls of the API server, the harness's
// own writes and the emulator's recorder.
type model struct {
	c client.Client
	// records and systemUUID read the emulator's recorder (a fake in the model's unit tests).
	records    func() []redfish.Record
	systemUUID func(bmc int, systemID string) string
	// boxPower reads every system's power state from the emulator, by UUID (nil in unit tests).
	boxPower func() map[string]string
	t0       atomic.Int64 // chaos start (Unix nanoseconds), for readable times
	logf     func(string, ...any)

	mu         sync.Mutex
	snaps      []*snapshot
	epoch      int
	restoring  bool
	bound      map[string]string // claim UID -> server name, as observed
	serverUUID map[string]string // server name -> system UUID, as observed
	ops        []*opInstance
	lastSeq    int64
	pending    []redfish.Record
	judged     []judgedRecord
	breaches   map[string]*breach
	order      []string
	checks     map[string]int
	twoSince   map[string]time.Time
	maintSince map[string]time.Time // maintenance UID -> first poll with a server in it
	// maintBefore: maintenance UID -> start of the last poll that showed its server not yet in it
	maintBefore map[string]time.Time
	// twins are the Servers the harness made by hand for systems that have one, by name.
	twins map[string]*twinSpan
	kick  chan struct{}
	// rotations are the rotate-credentials asks, flashes the SimpleUpdates recorded by image,
	// fwSeen the firmware requests already registered as operations (by token).
	rotations []rotationAsk
	flashes   map[string][]redfish.Record
	fwSeen    map[string]bool
}

type judgedRecord struct {
	r   redfish.Record
	why string
}

func newModel(c client.Client, fleet *redfish.Emulator, logf func(string, ...any)) *model {
	m := newModelWith(c, fleet.Records, func(i int, id string) string {
		if b := fleet.BMC(i); b != nil {
			if sys := b.System(id); sys != nil {
				return strings.ToLower(sys.UUID())
			}
		}
		return ""
	}, logf)
	m.boxPower = func() map[string]string {
		out := map[string]string{}
		for _, b := range fleet.BMCs() {
			for _, sys := range b.Systems() {
				out[strings.ToLower(sys.UUID())] = sys.PowerState()
			}
		}
		return out
	}
	return m
}

func newModelWith(c client.Client, records func() []redfish.Record, systemUUID func(int, string) string, logf func(string, ...any)) *model {
	m := &model{c: c, records: records, systemUUID: systemUUID, logf: logf,
		bound: map[string]string{}, serverUUID: map[string]string{}, breaches: map[string]*breach{},
		checks: map[string]int{}, twoSince: map[string]time.Time{}, maintSince: map[string]time.Time{},
		maintBefore: map[string]time.Time{}, twins: map[string]*twinSpan{}, kick: make(chan struct{}, 1),
		flashes: map[string][]redfish.Record{}, fwSeen: map[string]bool{}}
	m.setStart(time.Now())
	return m
}

// setStart makes t the zero of the times the model prints (the chaos phase's start).
func (m *model) setStart(t time.Time) { m.t0.Store(t.UnixNano()) }

func (m *model) since(t time.Time) time.Duration {
	return t.Sub(time.Unix(0, m.t0.Load())).Round(10 * time.Millisecond)
}

// poke asks for a poll right away (after a harness write).
func (m *model) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *model) breach(inv, subject, format string, args ...any) {
	key := inv + "|" + subject
	if b, ok := m.breaches[key]; ok {
		b.Count++
		return
	}
	b := &breach{Inv: inv, Subject: subject, Msg: fmt.Sprintf(format, args...), At: m.since(time.Now()), Count: 1}
	m.breaches[key] = b
	m.order = append(m.order, key)
	m.logf("BREACH %s (%s) at +%s: %s", inv, subject, b.At, b.Msg)
}

// run polls until ctx ends: every 150 ms, and at once after a poke.
func (m *model) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-m.kick:
		}
		if err := m.pollOnce(ctx); err != nil && ctx.Err() == nil {
			m.logf("poll: %v", err)
		}
	}
}

// pollOnce takes a snapshot and runs every online check on it.
func (m *model) pollOnce(ctx context.Context) error {
	s, err := m.take(ctx)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.add(s)
	return nil
}

func condStatus(conds []metav1.Condition, typ string) (string, string) {
	c := apimeta.FindStatusCondition(conds, typ)
	if c == nil {
		return "", ""
	}
	return string(c.Status), c.Reason
}

// take lists Servers before claims and maintenances: a server's ref to either then names an
// object that the later list still shows (both have finalizers).
func (m *model) take(ctx context.Context) (*snapshot, error) {
	m.mu.Lock()
	epoch, restoring := m.epoch, m.restoring
	m.mu.Unlock()
	s := &snapshot{Start: time.Now(), Epoch: epoch, Restoring: restoring,
		Servers: map[string]*srvView{}, Claims: map[string]*claimView{}, Maints: map[string]*maintView{}, BMCs: map[string]*bmcView{}}
	if m.boxPower != nil {
		s.Power = m.boxPower()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var servers metalv1alpha1.ServerList
	if err := m.c.List(ctx, &servers); err != nil {
		return nil, fmt.Errorf("listing servers: %w", err)
	}
	var claims metalv1alpha1.ServerClaimList
	if err := m.c.List(ctx, &claims); err != nil {
		return nil, fmt.Errorf("listing claims: %w", err)
	}
	var maints metalv1alpha1.ServerMaintenanceList
	if err := m.c.List(ctx, &maints); err != nil {
		return nil, fmt.Errorf("listing maintenances: %w", err)
	}
	var bmcs metalv1alpha1.BMCList
	if err := m.c.List(ctx, &bmcs); err != nil {
		return nil, fmt.Errorf("listing BMCs: %w", err)
	}
	s.End = time.Now()
	for i := range servers.Items {
		o := &servers.Items[i]
		v := &srvView{UID: string(o.UID), UUID: strings.ToLower(o.Spec.SystemUUID), Deleting: !o.DeletionTimestamp.IsZero(),
			Finalizer: controllerutil.ContainsFinalizer(o, server.Finalizer),
			State:     o.Annotations[lifecycle.StateAnnotation], Mirror: string(o.Status.State), Power: string(o.Status.PowerState),
			Op: o.Annotations[metalv1alpha1.OperationAnnotation], Parked: o.Annotations[metalv1alpha1.ParkedAnnotation] != "",
			Unclaimable: o.Spec.Unclaimable, Taints: o.Spec.Taints, Labels: o.Labels,
			Paused: o.Annotations[lifecycle.PausedAnnotation], PauseAck: o.Annotations[lifecycle.PauseAckAnnotation]}
		if r := o.Spec.ServerClaimRef; r != nil {
			v.ClaimRef = r.Namespace + "/" + r.Name
		}
		if r := o.Spec.ServerMaintenanceRef; r != nil {
			v.MaintRef = r.Namespace + "/" + r.Name
		}
		if o.Spec.BMCRef != nil {
			v.BMC = o.Spec.BMCRef.Name
		}
		v.Ready, _ = condStatus(o.Status.Conditions, metalv1alpha1.ConditionReady)
		v.Requests = requests(o.Annotations)
		s.Servers[o.Name] = v
	}
	for i := range claims.Items {
		o := &claims.Items[i]
		v := &claimView{UID: string(o.UID), Deleting: !o.DeletionTimestamp.IsZero(), Power: o.Spec.Power,
			Selector: o.Spec.ServerSelector, Tolerations: o.Spec.Tolerations, Phase: string(o.Status.Phase),
			MaintenanceNeeded: o.Labels[metalv1alpha1.MaintenanceNeededLabel] == "true"}
		_, v.MaintenanceApproved = o.Labels[metalv1alpha1.MaintenanceApprovedLabel]
		if o.Spec.ServerRef != nil {
			v.ServerRef = o.Spec.ServerRef.Name
		}
		v.Bound, v.Why = condStatus(o.Status.Conditions, metalv1alpha1.ConditionBound)
		s.Claims[o.Namespace+"/"+o.Name] = v
	}
	for i := range maints.Items {
		o := &maints.Items[i]
		v := &maintView{UID: string(o.UID), Created: o.CreationTimestamp.Time, Deleting: !o.DeletionTimestamp.IsZero(), Power: o.Spec.ServerPower,
			Template: o.Spec.ServerBootConfigurationTemplate != nil && o.Spec.ServerBootConfigurationTemplate.Name != "",
			State:    string(o.Status.State), PolicyEnforced: o.Spec.Policy == metalv1alpha1.ServerMaintenancePolicyEnforced}
		if o.Spec.ServerRef != nil {
			v.ServerRef = o.Spec.ServerRef.Name
		}
		_, v.Reason = condStatus(o.Status.Conditions, metalv1alpha1.ConditionInMaintenance)
		s.Maints[o.Namespace+"/"+o.Name] = v
	}
	for i := range bmcs.Items {
		o := &bmcs.Items[i]
		v := &bmcView{UID: string(o.UID), Deleting: !o.DeletionTimestamp.IsZero(), State: string(o.Status.State),
			Op: o.Annotations[metalv1alpha1.OperationAnnotation], Secret: o.Spec.BMCSecretRef.Name}
		v.Ready, _ = condStatus(o.Status.Conditions, metalv1alpha1.ConditionReady)
		s.BMCs[o.Name] = v
	}
	return s, nil
}

// last is the newest snapshot (nil before the first poll).
func (m *model) last() *snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.snaps) == 0 {
		return nil
	}
	return m.snaps[len(m.snaps)-1]
}

// add files a snapshot and runs the online checks: held servers kept, uniqueness, bindings and
// operations observed, and every recorded BMC action whose evidence is now complete.
func (m *model) add(s *snapshot) {
	var prev *snapshot
	for i := len(m.snaps) - 1; i >= 0; i-- {
		if !m.snaps[i].Restoring {
			prev = m.snaps[i]
			break
		}
	}
	m.snaps = append(m.snaps, s)
	for name, v := range s.Servers {
		m.serverUUID[name] = v.UUID
		if c := s.Claims[v.ClaimRef]; v.ClaimRef != "" && c != nil {
			m.bound[c.UID] = name
		}
		if mt := s.Maints[v.MaintRef]; v.MaintRef != "" && mt != nil {
			if _, ok := m.maintSince[mt.UID]; !ok {
				m.maintSince[mt.UID] = s.End
			}
		}
	}
	for key, mt := range s.Maints {
		if _, taken := m.maintSince[mt.UID]; !taken {
			if v := s.Servers[mt.ServerRef]; v != nil && v.MaintRef != key {
				m.maintBefore[mt.UID] = s.Start
			}
		}
	}
	if prev != nil && !s.Restoring {
		m.registerRequests(prev, s)
	}
	m.trackOps(s)
	if !s.Restoring {
		if prev != nil && prev.Epoch == s.Epoch {
			m.checkHeld(prev, s)
		}
		m.checkUnique(s)
	}
	m.judgeRecords(false)
}

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
	names := make([]string, 0, len(prev.Servers))
	for name := range prev.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
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

// beginRestore and endRestore bracket a restore: polls in between are skipped by the checks and
// the epoch changes (every object has a new UID).
func (m *model) beginRestore() {
	m.mu.Lock()
	m.restoring = true
	m.mu.Unlock()
}

func (m *model) endRestore() {
	m.mu.Lock()
	m.restoring = false
	m.epoch++
	m.mu.Unlock()
}

// sortedBreaches returns the breaches in the order they were found.
func (m *model) sortedBreaches() []*breach {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*breach, 0, len(m.order))
	for _, k := range m.order {
		out = append(out, m.breaches[k])
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
