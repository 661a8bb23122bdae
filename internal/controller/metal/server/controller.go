package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/claimable"
	"github.com/metalhub/metalhub/internal/controller/metal/health"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/inventorywalk"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/registry"
	"github.com/metalhub/metalhub/internal/shard"
)

// Finalizer keeps a Server until it is powered off and its boot configurations are gone.
const Finalizer = "metal.ironcore.dev/server"

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers/finalizers,verbs=update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances,verbs=get;list;watch
// The fault policy opens maintenances for faulty servers (health.go).
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances,verbs=create
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverbootconfigurations,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverbootconfigurations/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;delete
// Inventory records (the registry writes them in the manager's process; the server controller
// restores a wiped status from them and accepts a new baseline).
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update;delete

// Reconciler runs the Server lifecycle. Each pass looks at the server and its BMC, does one
// thing — at most one write to the Server — and returns. Power never blocks: an action is issued
// and recorded in the same write, then observed on later passes.
type Reconciler struct {
	Client   client.Client
	Pool     *bmc.Pool
	Recorder events.EventRecorder
	Options  Options
	// Now is the clock (tests move it).
	Now func() time.Time

	// APIReader reads past the cache, for the few objects whose absence must not be a stale
	// cache's (a discovery round's Secret); nil reads through Client.
	APIReader client.Reader

	// failures counts consecutive BMC failures per server. In memory on purpose: after a restart
	// a server gets a fresh allowance before it is declared Error.
	failures sync.Map
	// refusals counts consecutive passes that did not act because the Server's machine was not
	// proven (identity mismatch, duplicates), for their backoff; in memory like failures.
	refusals sync.Map
	// outcomes holds what issuing an operation gave until the next pass reports it (see
	// intent.Annotation): only the process that issued it knows.
	outcomes intent.Outcomes
	// inventories runs inventory walks beside the passes.
	inventories *inventorywalk.Walks
	// ledSetAt is each server's last locator LED write (ledWrite): a BMC that accepts the write
	// and keeps its LED is written the same again only after RetryAfter. In memory like failures.
	ledSetAt sync.Map
	// bootOrderSetAt is each server's last boot order write (ledWrite, the order joined): many
	// BMCs apply a new order only at the next boot, so it is not written again every pass.
	bootOrderSetAt sync.Map
	// health is when each server's hardware log was last read (healthStep); shared with the
	// event receiver (Options.HardwareEvents), which rings servers whose BMC sent an event.
	health *health.Polls
}

// init fills in the clock and the inventory walks.
func (r *Reconciler) init() {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.health == nil {
		r.health = &health.Polls{}
		if ev := r.Options.HardwareEvents; ev != nil {
			r.health = ev.Polls()
		}
	}
	if r.inventories == nil {
		// A walk may take several request timeouts on a big machine; it runs beside the passes.
		r.inventories = inventorywalk.NewWalks(6 * r.Options.BMCRequestTimeout)
	}
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.init()
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} }, r.handle)
	rec.Resync = r.Options.ServerResync
	b := ctrl.NewControllerManagedBy(mgr)
	if ev := r.Options.HardwareEvents; ev != nil {
		// A BMC's event brings its servers' next pass, which reads their logs.
		b = b.WatchesRawSource(source.Channel(ev.Passes(), &handler.EnqueueRequestForObject{}))
	}
	b = b.
		Named("server").
		For(&metalv1alpha1.Server{}, builder.WithPredicates(predicate.And(predicate.Or(lifecycle.Predicate(), mirrorDrifted()),
			claimedAheadOfItsBootConfiguration(r.Client)))).
		// A Server gone no longer keeps its twins from acting (uniqueStep): they go on at once,
		// not at their next resync.
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(twinsOfGone(r.Client)), builder.WithPredicates(goneOnly())).
		Watches(&metalv1alpha1.ServerClaim{}, handler.EnqueueRequestsFromMapFunc(claimedServers(r.Client)), builder.WithPredicates(claimSpecChanged())).
		Watches(&metalv1alpha1.ServerMaintenance{}, handler.EnqueueRequestsFromMapFunc(maintainedServer)).
		// Pausing a BMC pauses its Servers; unpausing it brings their next pass. So does its
		// settings-only mark, which holds for each of its Servers.
		Watches(&metalv1alpha1.BMC{}, handler.EnqueueRequestsFromMapFunc(index.Naming(r.Client, &metalv1alpha1.ServerList{}, index.ServerBMC)),
			builder.WithPredicates(predicate.Or(pauseChanged(), settingsOnlyChanged()))).
		// A claimed server powers on once its boot configuration is Ready: the boot provider's
		// status write is the one status change of another object we wait for.
		Watches(&metalv1alpha1.ServerBootConfiguration{}, handler.EnqueueRequestsFromMapFunc(bootConfiguredServer),
			builder.WithPredicates(bootStateChanged(r.Options.ExternalBootProvider))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Concurrency})
	return shard.Gate(r.Options.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.ServerList{} }, shardkey.ForServer).Complete(rec)
}

// mirrorDrifted passes a status change that left status.state different from the durable state:
// a wiped or restored status is rebuilt at once instead of at the next resync. Our own mirror
// writes keep the two equal and do not pass.
func mirrorDrifted() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			s, ok := e.ObjectNew.(*metalv1alpha1.Server)
			if !ok {
				return false
			}
			state, _ := serverstate.Store.Get(s)
			return s.Status.State != state
		},
	}
}

// pauseChanged passes the updates that pause or unpause an object.
func pauseChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld != nil && e.ObjectNew != nil && lifecycle.Paused(e.ObjectOld) != lifecycle.Paused(e.ObjectNew)
		},
	}
}

// settingsOnlyChanged passes the updates that mark or unmark an object settings-only.
func settingsOnlyChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld != nil && e.ObjectNew != nil &&
				metalv1alpha1.SettingsOnly(e.ObjectOld.GetAnnotations()) != metalv1alpha1.SettingsOnly(e.ObjectNew.GetAnnotations())
		},
	}
}

// claimedAheadOfItsBootConfiguration drops the one update that would make the Server look at a
// claim too early: the claim's binding write (claim ref and boot configuration ref) while the
// claim's boot configuration, created right after it, is not in the cache yet. That look would
// find no configuration, go to Reserved unpowered and take another pass and write to power on;
// the configuration's creation event brings the pass that does both at once. Every other path
// still brings a pass: a claim that never creates it is deleted (the claim's event), retried
// (its creation), or left alone (the resync).
func claimedAheadOfItsBootConfiguration(c client.Reader) predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*metalv1alpha1.Server)
			n, okN := e.ObjectNew.(*metalv1alpha1.Server)
			if !okO || !okN || o.Spec.ServerClaimRef != nil || n.Spec.ServerClaimRef == nil || n.Spec.BootConfigurationRef == nil {
				return true
			}
			ref := n.Spec.BootConfigurationRef
			err := c.Get(context.Background(), client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &metalv1alpha1.ServerBootConfiguration{})
			return !apierrors.IsNotFound(err)
		},
	}
}

// claimedServers maps a claim to the servers that point at it (the server side of a binding is
// written first, so this finds the server before the claim names it), and to the one it names.
func claimedServers(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		claim := o.(*metalv1alpha1.ServerClaim)
		var reqs []ctrl.Request
		list := &metalv1alpha1.ServerList{}
		if err := c.List(ctx, list, client.MatchingFields{index.ServerClaimRef: index.ClaimRefKey(claim)}, client.UnsafeDisableDeepCopy); err == nil {
			for i := range list.Items {
				reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
			}
		}
		if ref := claim.Spec.ServerRef; ref != nil && ref.Name != "" && !slices.ContainsFunc(reqs, func(q ctrl.Request) bool { return q.Name == ref.Name }) {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKey{Name: ref.Name}})
		}
		return reqs
	}
}

// claimSpecChanged passes the claim changes a Server acts on: its power, its deletion (and
// creation and removal). The claim's own bookkeeping (finalizer, serverRef, status) is not for
// the server: it already points at the claim, and each of those would cost it a pass.
func claimSpecChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*metalv1alpha1.ServerClaim)
			n, okN := e.ObjectNew.(*metalv1alpha1.ServerClaim)
			return !okO || !okN || o.Spec.Power != n.Spec.Power ||
				!equality.Semantic.DeepEqual(o.DeletionTimestamp, n.DeletionTimestamp)
		},
	}
}

func bootConfiguredServer(_ context.Context, o client.Object) []ctrl.Request {
	b := o.(*metalv1alpha1.ServerBootConfiguration)
	if b.Spec.ServerRef.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Name: b.Spec.ServerRef.Name}}}
}

// bootStateChanged passes a boot configuration's state changes. With the built-in provider the
// Server judges an unjudged configuration itself (bootConfigurationReady), so the provider's
// first verdict, Ready, tells it nothing new; an Error, or leaving one, does.
func bootStateChanged(external bool) predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*metalv1alpha1.ServerBootConfiguration)
			n, okN := e.ObjectNew.(*metalv1alpha1.ServerBootConfiguration)
			if !okO || !okN || o.Status.State == n.Status.State {
				return false
			}
			return external || o.Status.State != "" || n.Status.State != metalv1alpha1.ServerBootConfigurationStateReady
		},
	}
}

// twinsOfGone names the Servers that share a deleted Server's system UUID.
func twinsOfGone(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		s := o.(*metalv1alpha1.Server)
		u := registry.NormalizeUUID(s.Spec.SystemUUID)
		if u == "" {
			return nil
		}
		list := &metalv1alpha1.ServerList{}
		if err := c.List(ctx, list, client.MatchingFields{index.ServerUUID: u}, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		var reqs []ctrl.Request
		for i := range list.Items {
			if list.Items[i].UID != s.UID {
				reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
			}
		}
		return reqs
	}
}

// goneOnly passes deletions only.
func goneOnly() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func maintainedServer(_ context.Context, o client.Object) []ctrl.Request {
	m := o.(*metalv1alpha1.ServerMaintenance)
	if m.Spec.ServerRef == nil || m.Spec.ServerRef.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Name: m.Spec.ServerRef.Name}}}
}

// serverPass bundles what one pass over one Server knows (beside the lifecycle.Pass it wraps).
type serverPass struct {
	*lifecycle.Pass[*metalv1alpha1.Server]
	c client.Client
	// bctx is the deadline every BMC call of the pass shares (the request timeout).
	bctx context.Context
	// stateSource says where state came from: the annotation, or derived or adopted (and so
	// not yet bookkeeping).
	stateSource lifecycle.Source
	state       metalv1alpha1.ServerState
	conn        bmc.BMC
	sysID       string
	sys         *bmc.SystemStatus
	// lookAgain asks for a pass this soon to observe what a step did beside the state's own
	// work (a locator LED set).
	lookAgain time.Duration
	// bootProblem is why a boot could not be prepared this pass (condition BootMethod);
	// bootPrepared says one was, which ends an earlier problem.
	bootProblem  *bootProblem
	bootPrepared bool
	// settingsOnly names whose mark makes the server settings-only ("server x", "BMC y"); ""
	// when it is not (settingsOnlyStep).
	settingsOnly string
	// actions are the events of what the pass had the BMC do (a power action, a one-time boot),
	// held until it ends: a transition written by the same pass tells them in its own event,
	// one event for one step of the lifecycle; otherwise they go out as they are.
	actions []actionEvent
}

type actionEvent struct {
	related        runtime.Object
	reason, action string
	note           string
}

// actionEvent holds the event of an action the BMC was asked for until the pass ends.
func (r *Reconciler) actionEvent(p *serverPass, related runtime.Object, reason, action, format string, args ...any) {
	p.actions = append(p.actions, actionEvent{related: related, reason: reason, action: action, note: fmt.Sprintf(format, args...)})
}

// flushActions sends the action events no transition told.
func (r *Reconciler) flushActions(p *serverPass) {
	for _, a := range p.actions {
		r.Recorder.Eventf(p.Obj, a.related, corev1.EventTypeNormal, a.reason, a.action, "%s", a.note)
	}
	p.actions = nil
}

// handle is the Server's pass, as its list of steps; the first that acts ends it. Status is the
// report of the pass that found nothing to do or waits (stateStep): the Reconciler writes it.
func (r *Reconciler) handle(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.Server]) (lifecycle.Result, error) {
	// Every BMC call of the pass shares one deadline: no pass waits longer on its BMC.
	bctx, cancel := context.WithTimeout(ctx, r.Options.PassTimeout())
	defer cancel()
	p := &serverPass{Pass: lp, c: lp.Client(), bctx: bctx}
	defer r.flushActions(p)
	p.state, p.stateSource = serverstate.Store.Get(lp.Obj)
	return lifecycle.Steps(ctx, p,
		lifecycle.DoneIf[*serverPass](serverstate.Ignored),
		r.bmcPausedStep,
		r.settingsOnlyStep,
		r.persistRecovered,
		r.reportIssued,
		r.parkedStep,
		r.blockDeletion,
		r.transitionOperation,
		r.uniqueStep,
		r.connectStep,
		r.duplicateBMCStep,
		r.acceptReplacement,
		lifecycle.OnDeletion(func(ctx context.Context, p *serverPass) (lifecycle.Result, error) { return r.finalize(p.bctx, ctx, p) }),
		r.operation,
		r.ledStep,
		r.bootOrderStep,
		r.healthStep,
		r.maintenance,
		r.stateStep,
	)
}

// bmcPausedStep ends the pass of a Server whose BMC object is paused, like its own pause: no
// write, no BMC call (unpausing the BMC brings the next pass: pauseChanged).
func (r *Reconciler) bmcPausedStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if paused, err := claimable.BMCPaused(ctx, p.c, p.Obj); err != nil || paused {
		return lifecycle.Done(), err
	}
	return lifecycle.Continue(), nil
}

// persistRecovered persists a derived or adopted state before anything else: from now on it is
// bookkeeping.
func (r *Reconciler) persistRecovered(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s, src := p.Obj, p.stateSource
	if src != lifecycle.FromDerived && src != lifecycle.FromAdopted {
		return lifecycle.Continue(), nil
	}
	r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "StateRecovered", "Recover",
		"state %s recovered (%s) without rediscovery", p.state, strings.ToLower(string(src)))
	return lifecycle.Wrote("persist state"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, string(p.state))
		lifecycle.AddFinalizer(s, Finalizer)
		recoveredBookkeeping(s, p.state)
	})
}

// recoveredBookkeeping adds, to a server whose state was just recovered (adopted or derived),
// what metalhub would have recorded had it entered that state itself: a Maintenance it did not
// enter is marked so that a box already running its boot configuration is not restarted
// (maintenanceBooted); an Error it did not enter is marked with whether the server had been
// discovered, as found (errorExit).
func recoveredBookkeeping(s *metalv1alpha1.Server, state metalv1alpha1.ServerState) {
	switch state {
	case metalv1alpha1.ServerStateMaintenance:
		if s.Annotations[serverstate.MaintenanceBootAnnotation] == "" {
			lifecycle.SetAnnotation(s, serverstate.MaintenanceBootAnnotation, maintenanceBootAdopted)
		}
	case metalv1alpha1.ServerStateError:
		if s.Annotations[serverstate.PreviousStateAnnotation] == "" && s.Annotations[serverstate.AdoptedErrorAnnotation] == "" {
			v := "undiscovered"
			if discoveredBefore(s) {
				v = "discovered"
			}
			lifecycle.SetAnnotation(s, serverstate.AdoptedErrorAnnotation, v)
		}
	}
}

// reportIssued reports an operation issued by the previous pass first, BMC or not: only then
// may the next one, or a step that powers the box, follow.
func (r *Reconciler) reportIssued(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if i, ok := intent.Parse(p.Obj.Annotations[intent.Annotation], serverOperation); ok && i.Phase == intent.Issuing {
		return r.reportOperation(ctx, p, i)
	}
	return lifecycle.Continue(), nil
}

func (r *Reconciler) parkedStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if p.state == metalv1alpha1.ServerStateParked && p.Obj.DeletionTimestamp.IsZero() {
		return r.parked(ctx, p)
	}
	return lifecycle.Continue(), nil
}

// connectStep reaches the server's BMC. A deleted server whose BMC access is gone (blockDeletion
// found it not held) has nothing to power off, and is let go.
func (r *Reconciler) connectStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if err := r.connect(p.bctx, p); err != nil {
		if isIdentityError(err) {
			return r.identityFailed(ctx, p, err)
		}
		if !p.Obj.DeletionTimestamp.IsZero() && bmcaccess.IsInputError(err) {
			return r.release(ctx, p)
		}
		return r.bmcFailed(ctx, p, err)
	}
	r.failures.Delete(p.Obj.Name)
	r.refusals.Delete(p.Obj.UID)
	return lifecycle.Continue(), nil
}

// stateStep acts first and reports after: a pass with a step to take takes it (its write ends
// the pass), and status is rebuilt by the pass that finds nothing to do or waits. A claimed
// server's changed generation, its new state and its power then reach status in one write, not
// three.
func (r *Reconciler) stateStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	res, err := r.step(p.bctx, ctx, p)
	if err != nil {
		// A step that keeps failing must not keep status from being rebuilt.
		_, _ = r.observe(p.bctx, ctx, p)
		if reason, ok := lifecycle.ReasonOf(err); ok {
			// The user's to fix (a boot method the BMC lacks): the step's condition and its
			// Warning event say what. Not an error retried with backoff, which only fills the
			// log; a calm look after the retry interval sees the fix (on the BMC, unwatched),
			// and a change of the objects watched brings one sooner.
			ctrl.LoggerFrom(ctx).V(1).Info("waiting for the user", "reason", reason, "problem", err.Error())
			return lifecycle.RequeueAfter(r.Options.RetryAfter, reason), nil
		}
		return res, err
	}
	if res.IsWrote() {
		return res, nil
	}
	more, err := r.observe(p.bctx, ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if p.lookAgain > 0 && (more == 0 || p.lookAgain < more) {
		more = p.lookAgain
	}
	if more > 0 && (res.After() == 0 || more < res.After()) {
		return lifecycle.RequeueAfter(more, "observe again"), nil
	}
	return res, nil
}

// step runs the handler of the server's state.
func (r *Reconciler) step(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if p.settingsOnly != "" && p.state != metalv1alpha1.ServerStateMaintenance {
		return r.settingsOnlyState(ctx, p)
	}
	switch p.state {
	case metalv1alpha1.ServerStateInitial:
		return r.initial(bctx, ctx, p)
	case metalv1alpha1.ServerStateDiscovery:
		return r.discovery(bctx, ctx, p)
	case metalv1alpha1.ServerStateAvailable:
		return r.available(bctx, ctx, p)
	case metalv1alpha1.ServerStateReserved:
		return r.reserved(bctx, ctx, p)
	case metalv1alpha1.ServerStateReleased:
		return r.released(bctx, ctx, p)
	case metalv1alpha1.ServerStateMaintenance:
		return r.inMaintenance(bctx, ctx, p)
	case metalv1alpha1.ServerStateCleaning:
		return r.cleaning(bctx, ctx, p)
	case metalv1alpha1.ServerStateError:
		// The BMC answered (connect succeeded): leave Error on our own, where errorExit says.
		to, why, ok := errorExit(p.Obj, p.sys.PowerState)
		if !ok {
			return lifecycle.Done(), nil
		}
		return r.transition(ctx, p, to, why, nil)
	}
	return lifecycle.Done(), nil
}

// connect resolves the BMC and reads the system's power state and boot override. The client it
// leaves the pass is bound to the Server's machine: every call of the pass on the system proves
// the system is that machine first (bmc.Expect), so no step acts on whatever answers.
func (r *Reconciler) connect(ctx context.Context, p *serverPass) error {
	ep, err := bmcaccess.ServerEndpoint(ctx, p.c, p.Obj)
	if err != nil {
		return err
	}
	conn, err := r.Pool.Get(ep)
	if err != nil {
		return err
	}
	p.conn = bmc.Expect(conn, bmcaccess.Identity(p.Obj))
	if p.settingsOnly != "" {
		p.conn = bmc.WithoutPower(p.conn)
	}
	p.sysID = p.Obj.Spec.SystemURI
	if p.sysID == "" {
		if p.sysID, err = r.findSystem(ctx, p); err != nil {
			return err
		}
	}
	p.sys, err = p.conn.System(ctx, p.sysID)
	return err
}

// findSystem finds a server's system by UUID, for servers registered without a system URI.
func (r *Reconciler) findSystem(ctx context.Context, p *serverPass) (string, error) {
	systems, err := p.conn.Systems(ctx)
	if err != nil {
		return "", err
	}
	for _, sys := range systems {
		if strings.EqualFold(sys.UUID, p.Obj.Spec.SystemUUID) {
			return sys.ODataID, nil
		}
	}
	return "", bmcaccess.Errorf(string(bmc.ReasonNotFound), "no system with UUID %s on the BMC", p.Obj.Spec.SystemUUID)
}

// bmcFailed reports a BMC failure on the server and retries later. After ErrorThreshold
// consecutive failures the server is put in Error, which it leaves by itself once the BMC answers.
func (r *Reconciler) bmcFailed(ctx context.Context, p *serverPass, err error) (lifecycle.Result, error) {
	if bmc.IsFenced(err) {
		// Not the BMC's failure: the server's shard moved on; its new holder acts from here.
		return lifecycle.Done(), err
	}
	s := p.Obj
	n := 1
	if v, ok := r.failures.Load(s.Name); ok {
		n = v.(int) + 1
	}
	r.failures.Store(s.Name, n)
	reason := bmcaccess.ReasonOf(err)
	// Backing off per server, and never before its BMC is tried again: a dead BMC then costs
	// a worker next to nothing per pass.
	retry := bmcaccess.FailureBackoff(r.Options.RetryAfter, r.Options.ServerResync, n, err)
	if n >= r.Options.ErrorThreshold && p.state != metalv1alpha1.ServerStateError &&
		p.state != metalv1alpha1.ServerStateReserved && p.state != metalv1alpha1.ServerStateMaintenance {
		// A claimed or maintained server keeps its state: its holder must not lose it to a flaky BMC.
		prev := p.state
		return r.transition(ctx, p, metalv1alpha1.ServerStateError, fmt.Sprintf("%d consecutive BMC failures: %s", n, reason), func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, serverstate.PreviousStateAnnotation, string(prev))
		})
	}
	st := s.Status.DeepCopy()
	serverstate.Mirror(st, s.Generation, p.state)
	before := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionReady)
	lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionReady, metav1.ConditionFalse, reason, err.Error())
	if equality.Semantic.DeepEqual(*st, s.Status) {
		return lifecycle.RequeueAfter(retry, reason), nil
	}
	if before == nil || before.Reason != reason || before.Status != metav1.ConditionFalse {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, reason, "Connect", "%s", err.Error())
	}
	s.Status = *st // the Reconciler writes it
	return lifecycle.RequeueAfter(retry, reason), nil
}

// errorExit is where a server in Error goes once its BMC answers, why, and whether it goes now.
//
// An Error of metalhub's own (bmcFailed) recorded the state it left: back there. An Error found
// on a server metal-operator managed records none; the reference sets Error when it cannot
// manage a server and leaves it there until a user's retry. Starting over from Initial would
// rediscover the box (power it off, PXE-boot it, power it on), which nobody asked for. So the
// object decides, choosing what issues no BMC action of its own:
//   - a maintenance ref: Maintenance (the maintenance step takes it there first);
//   - a claim ref: Reserved, which follows the claim's power (what the claim asks is asked);
//   - discovered before (a system UUID and the discovery's network interfaces in status, as
//     found) and Off: Available, which keeps it Off;
//   - a cleaning that failed (CleaningFailedAnnotation) stays in Error until a retry: its
//     disk is named there;
//   - otherwise it stays in Error, untouched: an On box is not powered off to be Available, an
//     undiscovered one is not rediscovered, until it is Off (then Available, if discovered) or
//     a user asks (operation retry: from Initial).
func errorExit(s *metalv1alpha1.Server, power bmc.PowerState) (metalv1alpha1.ServerState, string, bool) {
	if s.Annotations[serverstate.CleaningFailedAnnotation] != "" {
		// A disk that could not be sanitized is the user's to look at; a retry cleans again.
		return metalv1alpha1.ServerStateError, "", false
	}
	if s.Annotations[serverstate.PreviousStateAnnotation] != "" {
		return previousState(s), "BMC answers again", true
	}
	switch {
	case s.Spec.ServerMaintenanceRef != nil:
		return metalv1alpha1.ServerStateMaintenance, "adopted Error: maintenance " + s.Spec.ServerMaintenanceRef.Name, true
	case s.Spec.ServerClaimRef != nil:
		return metalv1alpha1.ServerStateReserved, "adopted Error: claimed by " + s.Spec.ServerClaimRef.Namespace + "/" + s.Spec.ServerClaimRef.Name, true
	}
	discovered := s.Annotations[serverstate.AdoptedErrorAnnotation] == "discovered" ||
		(s.Annotations[serverstate.AdoptedErrorAnnotation] == "" && discoveredBefore(s))
	if discovered && power == bmc.PowerStateOff {
		return metalv1alpha1.ServerStateAvailable, "adopted Error: discovered before, Off", true
	}
	return metalv1alpha1.ServerStateError, "", false
}

// discoveredBefore reports whether a server carries a discovery's results: its system UUID and
// the network interfaces the probe reported (metal-operator fills them from discovery only).
func discoveredBefore(s *metalv1alpha1.Server) bool {
	return s.Spec.SystemUUID != "" && len(s.Status.NetworkInterfaces) > 0
}

func previousState(s *metalv1alpha1.Server) metalv1alpha1.ServerState {
	prev := metalv1alpha1.ServerState(s.Annotations[serverstate.PreviousStateAnnotation])
	if !serverstate.Valid(prev) || prev == metalv1alpha1.ServerStateError || prev == metalv1alpha1.ServerStateMaintenance {
		return metalv1alpha1.ServerStateInitial
	}
	return prev
}

// patch applies mutate to the Server and writes the difference with an optimistic lock.
func (r *Reconciler) patch(ctx context.Context, p *serverPass, mutate func(*metalv1alpha1.Server)) error {
	return lifecycle.PatchMetadata(ctx, p.c, p.Obj, func(o client.Object) { mutate(o.(*metalv1alpha1.Server)) })
}

// transition records a new state (plus whatever extra sets in the same write) and reports it.
func (r *Reconciler) transition(ctx context.Context, p *serverPass, to metalv1alpha1.ServerState, why string, extra func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	from := p.state
	err := r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, string(to))
		lifecycle.AddFinalizer(s, Finalizer)
		// A power record belongs to the state that issued it; left behind, a finished "On"
		// would read as still in flight when the next state wants On again.
		lifecycle.RemoveAnnotation(s, serverstate.PowerAnnotation)
		if to != metalv1alpha1.ServerStateError {
			lifecycle.RemoveAnnotation(s, serverstate.AdoptedErrorAnnotation)
			lifecycle.RemoveAnnotation(s, serverstate.CleaningFailedAnnotation)
		}
		if to == metalv1alpha1.ServerStateCleaning && from != metalv1alpha1.ServerStateCleaning {
			// Entering Cleaning boots a round of its own: one recorded before (a park, an
			// Initial, a maintenance in between) may have lost its Secret on the way.
			lifecycle.RemoveAnnotation(s, serverstate.CleaningRoundAnnotation)
			lifecycle.RemoveAnnotation(s, serverstate.CleaningTasksAnnotation)
		}
		if extra != nil {
			extra(s)
		}
	})
	if err != nil {
		return lifecycle.Result{}, err
	}
	typ := corev1.EventTypeNormal
	if to == metalv1alpha1.ServerStateError {
		typ = corev1.EventTypeWarning
	}
	for _, a := range p.actions {
		why += "; " + a.note
	}
	p.actions = nil
	r.Recorder.Eventf(p.Obj, nil, typ, "Transition", string(to), "%s -> %s: %s", from, to, why)
	return lifecycle.Wrote(string(to)), nil
}
