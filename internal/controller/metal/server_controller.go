package metal

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// ServerFinalizer keeps a Server until it is powered off and its boot configurations are gone.
const ServerFinalizer = "metal.ironcore.dev/server"

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers/finalizers,verbs=update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverbootconfigurations,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;delete

// ServerReconciler runs the Server lifecycle. Each pass looks at the server and its BMC, does one
// thing — at most one write to the Server — and returns. Power never blocks: an action is issued
// and recorded in the same write, then observed on later passes.
type ServerReconciler struct {
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
	// outcomes holds what issuing an operation gave until the next pass reports it (see
	// OperationIntentAnnotation): only the process that issued it knows.
	outcomes opOutcomes
	// inventories runs inventory walks beside the passes.
	inventories *inventoryJobs
}

// SetupWithManager registers the reconciler.
func (r *ServerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.inventories == nil {
		// A walk may take several request timeouts on a big machine; it runs beside the passes.
		r.inventories = newInventoryJobs(6 * r.Options.BMCRequestTimeout)
	}
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} }, r.handle)
	rec.Resync = r.Options.ServerResync
	return ctrl.NewControllerManagedBy(mgr).
		Named("server").
		For(&metalv1alpha1.Server{}, builder.WithPredicates(predicate.Or(lifecycle.Predicate(), mirrorDrifted()))).
		Watches(&metalv1alpha1.ServerClaim{}, handler.EnqueueRequestsFromMapFunc(claimedServer)).
		Watches(&metalv1alpha1.ServerMaintenance{}, handler.EnqueueRequestsFromMapFunc(maintainedServer)).
		// A claimed server powers on once its boot configuration is Ready: the boot provider's
		// status write is the one status change of another object we wait for.
		Watches(&metalv1alpha1.ServerBootConfiguration{}, handler.EnqueueRequestsFromMapFunc(bootConfiguredServer),
			builder.WithPredicates(bootStateChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Options.Concurrency}).
		Complete(rec)
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
			state, _ := serverStore.Get(s)
			return s.Status.State != state
		},
	}
}

func claimedServer(_ context.Context, o client.Object) []ctrl.Request {
	c := o.(*metalv1alpha1.ServerClaim)
	if c.Spec.ServerRef == nil || c.Spec.ServerRef.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Name: c.Spec.ServerRef.Name}}}
}

func bootConfiguredServer(_ context.Context, o client.Object) []ctrl.Request {
	b := o.(*metalv1alpha1.ServerBootConfiguration)
	if b.Spec.ServerRef.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Name: b.Spec.ServerRef.Name}}}
}

func bootStateChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*metalv1alpha1.ServerBootConfiguration)
			n, okN := e.ObjectNew.(*metalv1alpha1.ServerBootConfiguration)
			return okO && okN && o.Status.State != n.Status.State
		},
	}
}

func maintainedServer(_ context.Context, o client.Object) []ctrl.Request {
	m := o.(*metalv1alpha1.ServerMaintenance)
	if m.Spec.ServerRef == nil || m.Spec.ServerRef.Name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Name: m.Spec.ServerRef.Name}}}
}

// pass bundles what one pass over one Server knows.
type pass struct {
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
}

// handle is the Server's pass, as its list of steps; the first that acts ends it. Status is the
// report of the pass that found nothing to do or waits (stateStep): the Reconciler writes it.
func (r *ServerReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.Server]) (lifecycle.Result, error) {
	// Every BMC call of the pass shares one deadline: no pass outlasts the request timeout.
	bctx, cancel := context.WithTimeout(ctx, r.Options.BMCRequestTimeout)
	defer cancel()
	p := &pass{Pass: lp, c: lp.Client(), bctx: bctx}
	p.state, p.stateSource = serverStore.Get(lp.Obj)
	return lifecycle.Steps(ctx, p,
		r.skipIgnored,
		r.persistRecovered,
		r.reportIssued,
		r.parkedStep,
		r.blockDeletion,
		r.connectStep,
		r.finalizeStep,
		r.operation,
		r.maintenance,
		r.stateStep,
	)
}

func (r *ServerReconciler) skipIgnored(_ context.Context, p *pass) (lifecycle.Result, error) {
	if p.Obj.Annotations[metalv1alpha1.OperationAnnotation] == metalv1alpha1.OperationIgnore {
		return lifecycle.Done(), nil
	}
	return lifecycle.Continue(), nil
}

// persistRecovered persists a derived or adopted state before anything else: from now on it is
// bookkeeping.
func (r *ServerReconciler) persistRecovered(ctx context.Context, p *pass) (lifecycle.Result, error) {
	s, src := p.Obj, p.stateSource
	if src != lifecycle.FromDerived && src != lifecycle.FromAdopted {
		return lifecycle.Continue(), nil
	}
	r.Recorder.Eventf(s, nil, corev1.EventTypeNormal, "StateRecovered", "Recover",
		"state %s recovered (%s) without rediscovery", p.state, strings.ToLower(string(src)))
	return lifecycle.Wrote("persist state"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, string(p.state))
		lifecycle.AddFinalizer(s, ServerFinalizer)
	})
}

// reportIssued reports an operation issued by the previous pass first, BMC or not: only then
// may the next one, or a step that powers the box, follow.
func (r *ServerReconciler) reportIssued(ctx context.Context, p *pass) (lifecycle.Result, error) {
	if i, ok := parseOpIntent(p.Obj.Annotations[OperationIntentAnnotation], serverOperation); ok && i.phase == intentIssuing {
		return r.reportOperation(ctx, p, i)
	}
	return lifecycle.Continue(), nil
}

func (r *ServerReconciler) parkedStep(ctx context.Context, p *pass) (lifecycle.Result, error) {
	if p.state == metalv1alpha1.ServerStateParked && p.Obj.DeletionTimestamp.IsZero() {
		return r.parked(ctx, p)
	}
	return lifecycle.Continue(), nil
}

// connectStep reaches the server's BMC. A deleted server whose BMC access is gone (blockDeletion
// found it not held) has nothing to power off, and is let go.
func (r *ServerReconciler) connectStep(ctx context.Context, p *pass) (lifecycle.Result, error) {
	if err := r.connect(p.bctx, p); err != nil {
		if !p.Obj.DeletionTimestamp.IsZero() && isAccessError(err) {
			return r.release(ctx, p)
		}
		return r.bmcFailed(ctx, p, err)
	}
	r.failures.Delete(p.Obj.Name)
	return lifecycle.Continue(), nil
}

func (r *ServerReconciler) finalizeStep(ctx context.Context, p *pass) (lifecycle.Result, error) {
	if p.Obj.DeletionTimestamp.IsZero() {
		return lifecycle.Continue(), nil
	}
	return r.finalize(p.bctx, ctx, p)
}

// stateStep acts first and reports after: a pass with a step to take takes it (its write ends
// the pass), and status is rebuilt by the pass that finds nothing to do or waits. A claimed
// server's changed generation, its new state and its power then reach status in one write, not
// three.
func (r *ServerReconciler) stateStep(ctx context.Context, p *pass) (lifecycle.Result, error) {
	res, err := r.step(p.bctx, ctx, p)
	if err != nil {
		// A step that keeps failing must not keep status from being rebuilt.
		_, _ = r.observe(p.bctx, ctx, p)
		return res, err
	}
	if res.IsWrote() {
		return res, nil
	}
	more, err := r.observe(p.bctx, ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if more > 0 && (res.After() == 0 || more < res.After()) {
		return lifecycle.RequeueAfter(more, "inventory"), nil
	}
	return res, nil
}

// step runs the handler of the server's state.
func (r *ServerReconciler) step(bctx, ctx context.Context, p *pass) (lifecycle.Result, error) {
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
	case metalv1alpha1.ServerStateError:
		// The BMC answered (connect succeeded): leave Error on our own.
		return r.transition(ctx, p, previousState(p.Obj), "BMC answers again", nil)
	}
	return lifecycle.Done(), nil
}

// connect resolves the BMC and reads the system's power state and boot override.
func (r *ServerReconciler) connect(ctx context.Context, p *pass) error {
	ep, err := serverEndpoint(ctx, p.c, p.Obj)
	if err != nil {
		return err
	}
	if p.conn, err = r.Pool.Get(ep); err != nil {
		return err
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
func (r *ServerReconciler) findSystem(ctx context.Context, p *pass) (string, error) {
	systems, err := p.conn.Systems(ctx)
	if err != nil {
		return "", err
	}
	for _, sys := range systems {
		if strings.EqualFold(sys.UUID, p.Obj.Spec.SystemUUID) {
			return sys.ODataID, nil
		}
	}
	return "", accessErr(string(bmc.ReasonNotFound), "no system with UUID %s on the BMC", p.Obj.Spec.SystemUUID)
}

// bmcFailed reports a BMC failure on the server and retries later. After ErrorThreshold
// consecutive failures the server is put in Error, which it leaves by itself once the BMC answers.
func (r *ServerReconciler) bmcFailed(ctx context.Context, p *pass, err error) (lifecycle.Result, error) {
	s := p.Obj
	n := 1
	if v, ok := r.failures.Load(s.Name); ok {
		n = v.(int) + 1
	}
	r.failures.Store(s.Name, n)
	reason := reasonOf(err)
	// Backing off per server, and never before its BMC is tried again: a dead BMC then costs
	// a worker next to nothing per pass.
	retry := failureBackoff(r.Options.RetryAfter, r.Options.ServerResync, n, err)
	if n >= r.Options.ErrorThreshold && p.state != metalv1alpha1.ServerStateError &&
		p.state != metalv1alpha1.ServerStateReserved && p.state != metalv1alpha1.ServerStateMaintenance {
		// A claimed or maintained server keeps its state: its holder must not lose it to a flaky BMC.
		prev := p.state
		return r.transition(ctx, p, metalv1alpha1.ServerStateError, fmt.Sprintf("%d consecutive BMC failures: %s", n, reason), func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, PreviousStateAnnotation, string(prev))
		})
	}
	st := s.Status.DeepCopy()
	mirrorState(st, s.Generation, p.state)
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

func previousState(s *metalv1alpha1.Server) metalv1alpha1.ServerState {
	prev := metalv1alpha1.ServerState(s.Annotations[PreviousStateAnnotation])
	if !validServerState(prev) || prev == metalv1alpha1.ServerStateError || prev == metalv1alpha1.ServerStateMaintenance {
		return metalv1alpha1.ServerStateInitial
	}
	return prev
}

// observe rebuilds status from the durable state and the BMC: the state mirror, power, the
// Ready condition and, when missing (new server, wiped status), the Redfish inventory. It runs
// after the pass's step, which did not write the Server; a status write brings no event, and
// the step's own result already says when to look again. State and power never wait for the
// inventory: a walk that fails or outlasts the pass (a real BMC with many DIMMs and drives)
// goes on in the background, and a later pass adds it; the returned delay asks for that pass.
func (r *ServerReconciler) observe(bctx, ctx context.Context, p *pass) (time.Duration, error) {
	s := p.Obj
	if p.state == metalv1alpha1.ServerStateInitial && s.Status.State == "" {
		// A new server leaves Initial within a pass or two: its first status write waits for
		// Discovery and carries the inventory then, one write instead of two.
		return 0, nil
	}
	st := s.Status.DeepCopy()
	mirrorState(st, s.Generation, p.state)
	st.PowerState = metalv1alpha1.PowerState(p.sys.PowerState)
	lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionReady, metav1.ConditionTrue, metalv1alpha1.ReasonConnected, "BMC reachable")
	var more time.Duration
	if st.Manufacturer == "" || len(st.Processors) == 0 {
		inv, err := r.inventories.wait(bctx, s.UID, func(ictx context.Context) (*bmc.Inventory, error) {
			return p.conn.Inventory(ictx, p.sysID)
		})
		switch {
		case inv != nil:
			applyInventory(st, inv)
		case err != nil:
			ctrl.LoggerFrom(ctx).Info("reading inventory failed; state and power are reported without it", "error", err.Error())
			more = r.Options.RetryAfter
		default:
			more = r.Options.PowerPoll // still walking
		}
	}
	if equality.Semantic.DeepEqual(*st, s.Status) {
		return more, nil
	}
	if rec, ok := parsePowerRecord(s.Annotations[PowerAnnotation]); ok && r.inFlight(p, rec.target) &&
		!reached(p.sys.PowerState, rec.target) && onlyStateAndPower(*st, s.Status) {
		// Our power action is on its way: report state and power once the box gets there (or
		// the action times out), one write instead of one per step. The handler waits for it.
		return more, nil
	}
	s.Status = *st // the Reconciler writes it
	return more, nil
}

// onlyStateAndPower reports whether two statuses differ in nothing but the state mirror and
// the power state.
func onlyStateAndPower(a, b metalv1alpha1.ServerStatus) bool {
	a.State, a.PowerState = b.State, b.PowerState
	return equality.Semantic.DeepEqual(a, b)
}

// applyInventory fills the hardware fields from Redfish where the discovery report has not
// already (the probe sees more than the BMC: IPs, LLDP neighbours).
func applyInventory(st *metalv1alpha1.ServerStatus, inv *bmc.Inventory) {
	st.Manufacturer, st.Model, st.SKU = inv.System.Manufacturer, inv.System.Model, inv.System.SKU
	st.SerialNumber, st.BIOSVersion = inv.System.SerialNumber, inv.System.BIOSVersion
	if led := metalv1alpha1.IndicatorLED(inv.System.IndicatorLED); led == "Lit" || led == "Blinking" || led == "Off" || led == "Unknown" {
		st.IndicatorLED = led
	}
	if inv.Memory.TotalMiB > 0 {
		q := resource.NewQuantity(inv.Memory.TotalMiB*1024*1024, resource.BinarySI)
		st.TotalSystemMemory = q
	}
	if len(st.Processors) == 0 {
		for _, c := range inv.Processors {
			st.Processors = append(st.Processors, metalv1alpha1.Processor{
				ID: c.ID, Manufacturer: c.Manufacturer, Model: c.Model, Architecture: c.Architecture,
				MaxSpeedMHz: int32(c.MaxSpeedMHz), TotalCores: int32(c.Cores), TotalThreads: int32(c.Threads),
			})
		}
	}
	if len(st.NetworkInterfaces) == 0 {
		for _, n := range inv.NICs {
			if n.MACAddress == "" {
				continue
			}
			ni := metalv1alpha1.NetworkInterface{Name: firstNonEmpty(n.Name, n.ID), MACAddress: n.MACAddress, IPs: append(append([]string{}, n.IPv4...), n.IPv6...)}
			if len(ni.IPs) > 0 {
				ni.IP = ni.IPs[0]
			}
			if n.Carrier {
				ni.CarrierStatus = "Up"
			} else if n.LinkStatus != "" {
				ni.CarrierStatus = n.LinkStatus
			}
			st.NetworkInterfaces = append(st.NetworkInterfaces, ni)
		}
	}
	if len(st.Storages) == 0 && (len(inv.Storage.Drives) > 0 || len(inv.Storage.Volumes) > 0) {
		stor := metalv1alpha1.Storage{Name: firstNonEmpty(inv.Storage.Source, "Storage")}
		for _, d := range inv.Storage.Drives {
			stor.Drives = append(stor.Drives, metalv1alpha1.StorageDrive{
				Name: firstNonEmpty(d.Name, d.ID), Model: d.Model, Vendor: d.Manufacturer, MediaType: d.MediaType,
				Type: d.Protocol, Capacity: resource.NewQuantity(d.CapacityBytes, resource.BinarySI),
			})
		}
		for _, v := range inv.Storage.Volumes {
			stor.Volumes = append(stor.Volumes, metalv1alpha1.StorageVolume{
				Name: firstNonEmpty(v.Name, v.ID), RAIDType: v.RAIDType, Capacity: resource.NewQuantity(v.CapacityBytes, resource.BinarySI),
			})
		}
		st.Storages = []metalv1alpha1.Storage{stor}
	}
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// patch applies mutate to the Server and writes the difference with an optimistic lock.
func (r *ServerReconciler) patch(ctx context.Context, p *pass, mutate func(*metalv1alpha1.Server)) error {
	return lifecycle.PatchMetadata(ctx, p.c, p.Obj, func(o client.Object) { mutate(o.(*metalv1alpha1.Server)) })
}

// transition records a new state (plus whatever extra sets in the same write) and reports it.
func (r *ServerReconciler) transition(ctx context.Context, p *pass, to metalv1alpha1.ServerState, why string, extra func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	from := p.state
	err := r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, string(to))
		lifecycle.AddFinalizer(s, ServerFinalizer)
		// A power record belongs to the state that issued it; left behind, a finished "On"
		// would read as still in flight when the next state wants On again.
		lifecycle.RemoveAnnotation(s, PowerAnnotation)
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
	r.Recorder.Eventf(p.Obj, nil, typ, "Transition", string(to), "%s -> %s: %s", from, to, why)
	return lifecycle.Wrote(string(to)), nil
}

func reached(obs bmc.PowerState, want metalv1alpha1.Power) bool {
	return (want == metalv1alpha1.PowerOn && obs == bmc.PowerStateOn) || (want == metalv1alpha1.PowerOff && obs == bmc.PowerStateOff)
}

func moving(obs bmc.PowerState, want metalv1alpha1.Power) bool {
	return (want == metalv1alpha1.PowerOn && obs == bmc.PowerStatePoweringOn) || (want == metalv1alpha1.PowerOff && obs == bmc.PowerStatePoweringOff)
}

// inFlight reports whether an action towards want was issued recently enough to wait for it.
func (r *ServerReconciler) inFlight(p *pass, want metalv1alpha1.Power) bool {
	rec, ok := parsePowerRecord(p.Obj.Annotations[PowerAnnotation])
	return ok && rec.target == want && r.Now().Sub(rec.at) < r.Options.PowerTimeout
}

// powerAction issues the BMC action towards want, unless the system is there, on its way, or
// an action towards it is already in flight. It returns done=false when there is nothing to do.
// The caller records the action in the same write as whatever else its step writes.
func (r *ServerReconciler) powerAction(ctx context.Context, p *pass, want metalv1alpha1.Power, graceful bool) (issued bool, wait bool, err error) {
	if reached(p.sys.PowerState, want) {
		return false, false, nil
	}
	if moving(p.sys.PowerState, want) || r.inFlight(p, want) {
		return false, true, nil
	}
	if rec, ok := parsePowerRecord(p.Obj.Annotations[PowerAnnotation]); ok && rec.target != want &&
		r.Now().Sub(rec.at) < r.Options.PowerTimeout && !reached(p.sys.PowerState, rec.target) {
		// Another change (an operation's, say) is on its way: let it land before undoing it,
		// so a restart's PoweringOff is not answered with a second action.
		return false, true, nil
	}
	action := bmc.PowerOn
	if want == metalv1alpha1.PowerOff {
		action = bmc.PowerOff
		// Graceful first; a graceful off that timed out (its record is still there) is forced.
		if rec, ok := parsePowerRecord(p.Obj.Annotations[PowerAnnotation]); graceful && !(ok && rec.target == want) {
			action = bmc.PowerGracefulOff
		}
	}
	var opts []bmc.PowerOption
	if action == bmc.PowerGracefulOff {
		opts = append(opts, bmc.WithForceFallback())
	}
	if err := p.conn.Power(ctx, p.sysID, action, opts...); err != nil {
		return false, false, fmt.Errorf("power %s: %w", action, err)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "Power"+string(want), string(action), "power %s requested (was %s)", action, p.sys.PowerState)
	return true, true, nil
}

// converge drives power towards want as a step of its own: issue and record in one write, then
// observe on later passes. Continue: the box is there. BMC calls use the pass's deadline
// (p.bctx); the record is written with ctx.
func (r *ServerReconciler) converge(ctx context.Context, p *pass, want metalv1alpha1.Power, graceful bool) (lifecycle.Result, error) {
	issued, wait, err := r.powerAction(p.bctx, p, want, graceful)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if issued {
		rec := powerRecord{target: want, at: r.Now()}
		return lifecycle.Wrote("power " + string(want)), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, PowerAnnotation, rec.String())
		})
	}
	if wait {
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "power in flight"), nil
	}
	return lifecycle.Continue(), nil
}
