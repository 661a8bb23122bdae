package campaign

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
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
	invClean     = "no-claim-without-clean"
)

var invariants = []string{invUnasked, invOnce, invHeld, invUnique, invConverge, invPassBound, invHealthy, invIdentity, invPaused, invAccounts, invWave, invFenced, invClean}

// Windows of the model. A BMC action is judged against what the API said from decideWindow before
// it until the first observation after it: the manager decided at most one pass (the pass
// timeout) before the BMC recorded the action, on a cache at most a moment behind the API.
const (
	decideWindow = bmcPassTimeout + 2*time.Second
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
	// Mark is the cleaning policy the server's next (or pending) release is cleaned by
	// (lifecycle.metalhub.io/cleaning); Round the cleaning round it was booted into, Failed why
	// its cleaning failed, Cleaned the round whose report the registry stored.
	Mark, Round, Failed, Cleaned string
	Taints                       []metalv1alpha1.Taint
	Labels                       map[string]string
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
	// Tenant names, by system UUID, the disks that held a tenant's data at Start (before the
	// lists); TenantAfter, for the machines of Servers the lists show Available and unmarked, the
	// disks that still held it after the lists (no-claim-without-clean). Nil when not watched.
	Tenant, TenantAfter map[string][]string
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
	// machines are the fleet's system UUIDs as started (nil in unit tests).
	machines []string
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
	// cleaning is what no-claim-without-clean watches (cleaning_test.go); nil when the build
	// under test cleans nothing.
	cleaning *cleaningWatch
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
	for _, b := range fleet.BMCs() {
		for _, sys := range b.Systems() {
			m.machines = append(m.machines, strings.ToLower(sys.UUID()))
		}
	}
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
	m.readTenantData(s, false)
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
		v.Mark, v.Round = o.Annotations[serverstate.CleaningAnnotation], o.Annotations[serverstate.CleaningRoundAnnotation]
		v.Failed, v.Cleaned = o.Annotations[serverstate.CleaningFailedAnnotation], o.Annotations[discovery.CleanedAnnotation]
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
	m.readTenantData(s, true)
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
		m.checkCleaning(s)
	}
	m.judgeRecords(false)
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
