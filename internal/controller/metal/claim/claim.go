// Package claim is the ServerClaim controller: it binds a claim to a server (the server's side
// first, as the lock), keeps the claim's boot configuration and metadata token, wakes waiting
// claims when a server frees up, and on deletion waits until the server has let go. Power and
// boot follow the claim through the Server controller; this package never touches a BMC.
package claim

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/apilimit"
	"github.com/metalhub/metalhub/internal/controller/metal/bootrequest"
	"github.com/metalhub/metalhub/internal/controller/metal/claimable"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/metadata"
	"github.com/metalhub/metalhub/internal/shard"
)

// Finalizer keeps a claim until its server has let go of it and its boot configuration is gone.
// The reference's name, so migrated claims are handled alike.
const Finalizer = "metal.ironcore.dev/serverclaim"

// bindTTL bounds how long an in-flight binding is remembered (as lifecycle's guard does): if the
// server's watch event never shows, the claim must not stay blocked.
const bindTTL = 30 * time.Second

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims/finalizers,verbs=update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances,verbs=get;list;watch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverbootconfigurations,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// Reconciler binds claims to servers.
//
// Binding is two writes in a fixed order, each its own pass: the Server's spec.serverClaimRef
// first, with an optimistic lock (two claims racing for one server: one wins, the other gets a
// conflict and looks again), then the claim's spec.serverRef. The server side is the lock, so a
// server never holds two claims; a claim first adopts any server already pointing at it (after a
// crash between the two writes, say) before it looks for another, so it never holds two either.
// Both references are immutable once set (CEL), so a claim cannot flap between servers.
//
// Power follows the claim through the Server controller; release on deletion too: this
// controller only waits (finalizer) until the server has let go.
type Reconciler struct {
	// Shards, set, limits the reconciler to the objects of the shards this replica holds.
	Shards      *shard.Set
	Client      client.Client
	Recorder    events.EventRecorder
	Options     Options
	Concurrency int
	// RetryAfter is the look while waiting for a server to let go.
	RetryAfter time.Duration
	// APIReader, set, reads a claim's metadata token Secret past the cache when the cache has
	// none yet (made by the binding pass moments ago).
	APIReader client.Reader

	mu sync.Mutex
	// binds remembers, per claim, the server patched and the resourceVersion the patch replaced:
	// until the cache shows a newer server, the claim's next pass cannot see its own binding and
	// must not look for another server.
	binds map[types.UID]bindRecord
	// binding maps a server to the claim binding it right now, so that other claims' passes
	// (on the same, lagging cache) skip it instead of losing an optimistic-lock race.
	binding map[string]bindRecord
	// woken holds claims a freed server enqueued that have not run yet: the next freed server
	// wakes others, so a burst of freed servers reaches as many waiting claims.
	woken map[types.NamespacedName]struct{}
	// made remembers, per claim, the boot configuration this replica made for it (or found):
	// the pass after the binding comes on the claim's own watch event, often before the
	// configuration's, and must not create it a second time (a wasted write the API server
	// answers AlreadyExists).
	made map[types.UID]madeRecord
}

// init makes the in-memory state and fills in defaults.
func (r *Reconciler) init() {
	r.binds = map[types.UID]bindRecord{}
	r.binding = map[string]bindRecord{}
	r.woken = map[types.NamespacedName]struct{}{}
	r.made = map[types.UID]madeRecord{}
	r.Options = r.Options.WithDefaults()
	if r.RetryAfter <= 0 {
		r.RetryAfter = 5 * time.Second
	}
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.init()
	rec := r.reconciler()
	b := ctrl.NewControllerManagedBy(mgr).
		Named("serverclaim").
		For(&metalv1alpha1.ServerClaim{}, builder.WithPredicates(predicate.Or(lifecycle.Predicate(),
			lifecycle.StatusWiped(func(o client.Object) bool { return o.(*metalv1alpha1.ServerClaim).Status.Phase == "" })))).
		Owns(&metalv1alpha1.ServerBootConfiguration{}, builder.WithPredicates(lifecycle.Predicate())).
		// A deleted metadata token Secret is made again, with a new token (rotation); its
		// creation and changes bring nothing to do.
		Owns(&corev1.Secret{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false }})).
		Watches(&metalv1alpha1.Server{}, r.serverEvents()).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(index.Naming(r.Client, &metalv1alpha1.ServerClaimList{}, index.IgnitionSecret))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Concurrency, 1)})
	// Claims are global: each is bound by one replica, by its own name; the server lock
	// (optimistically locked) keeps two replicas from binding one server.
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.ServerClaimList{} },
		shardkey.ForObject[*metalv1alpha1.ServerClaim]).Complete(rec)
}

// reconciler returns the claim's lifecycle Reconciler. Every write of a pass over a claim that
// is not being deleted is urgent (apilimit.Urgent), the report the
// Reconciler writes after the handler included: binding a claim is a few writes a user waits
// on, its Bound status the last of them, while what follows (the server's bookkeeping, its boot
// and power) takes seconds of hardware time anyway. A release is the Server's work: the claim's
// writes meanwhile (its Releasing report) must not hold the Server's back.
func (r *Reconciler) reconciler() *lifecycle.Reconciler[*metalv1alpha1.ServerClaim] {
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.ServerClaim { return &metalv1alpha1.ServerClaim{} }, r.handle)
	rec.Context = func(ctx context.Context, c *metalv1alpha1.ServerClaim) context.Context {
		if c.DeletionTimestamp.IsZero() {
			return apilimit.Urgent(ctx)
		}
		return ctx
	}
	return rec
}

// claimPass is one pass over a claim: the servers that point at it, once read.
type claimPass struct {
	*lifecycle.Pass[*metalv1alpha1.ServerClaim]
	held []*metalv1alpha1.Server
}

// handle is the claim's pass, as its list of steps; the first that acts ends it. Its writes go
// first at the API server (reconciler).
func (r *Reconciler) handle(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.ServerClaim]) (lifecycle.Result, error) {
	r.unwake(lp.Obj)
	return lifecycle.Steps(ctx, &claimPass{Pass: lp},
		lifecycle.DoneIf[*claimPass](serverstate.Ignored),
		r.waitForOwnBinding,
		r.readHeld,
		lifecycle.OnDeletion(func(ctx context.Context, p *claimPass) (lifecycle.Result, error) {
			return r.finalize(ctx, p.Pass, p.held)
		}),
		r.keepOne,
	)
}

// waitForOwnBinding waits while the claim's last binding is not in the cache yet: the pass
// could not see it and must not look for another server.
func (r *Reconciler) waitForOwnBinding(ctx context.Context, p *claimPass) (lifecycle.Result, error) {
	if r.bindInFlight(ctx, p.Pass) {
		return lifecycle.RequeueAfter(lifecycle.StaleRetry, "binding not in the cache yet"), nil
	}
	return lifecycle.Continue(), nil
}

func (r *Reconciler) readHeld(ctx context.Context, p *claimPass) (lifecycle.Result, error) {
	var err error
	p.held, err = r.heldServers(ctx, p.Pass)
	return lifecycle.Continue(), err
}

// keepOne keeps the claim on the one server that holds it, or binds one.
func (r *Reconciler) keepOne(ctx context.Context, p *claimPass) (lifecycle.Result, error) {
	// A Released server was retained from an earlier claim of the same name (the Server
	// controller releases only for a claim that is gone or going): it is not this claim's.
	held := slices.DeleteFunc(p.held, func(s *metalv1alpha1.Server) bool {
		state, _ := serverstate.Store.Get(s)
		return state == metalv1alpha1.ServerStateReleased
	})
	keep, extra := splitHeld(p.Obj, held)
	switch {
	case len(extra) > 0:
		// Never expected (the server-side lock and the in-flight record prevent it), but if a
		// second server points here, let it go rather than hold two.
		return r.releaseExtra(ctx, p.Pass, extra[0])
	case keep != nil:
		return r.bound(ctx, p.Pass, keep)
	}
	return r.bind(ctx, p.Pass)
}

// heldServers are the servers that point at the claim, from the index (not the claim's own
// serverRef, which is written second).
func (r *Reconciler) heldServers(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim]) ([]*metalv1alpha1.Server, error) {
	list := &metalv1alpha1.ServerList{}
	if err := p.Client().List(ctx, list, client.MatchingFields{index.ServerClaimRef: index.ClaimRefKey(p.Obj)}); err != nil {
		return nil, fmt.Errorf("listing servers of claim: %w", err)
	}
	out := make([]*metalv1alpha1.Server, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	slices.SortFunc(out, func(a, b *metalv1alpha1.Server) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// splitHeld picks the server the claim keeps: the one its serverRef names, else the first.
func splitHeld(c *metalv1alpha1.ServerClaim, held []*metalv1alpha1.Server) (*metalv1alpha1.Server, []*metalv1alpha1.Server) {
	var keep *metalv1alpha1.Server
	var extra []*metalv1alpha1.Server
	for _, s := range held {
		switch {
		case c.Spec.ServerRef != nil && c.Spec.ServerRef.Name != "":
			if s.Name == c.Spec.ServerRef.Name {
				keep = s
			} else {
				extra = append(extra, s)
			}
		case keep == nil:
			keep = s
		default:
			extra = append(extra, s)
		}
	}
	return keep, extra
}

// ---- in-flight bookkeeping ------------------------------------------------------------------

// ---- bound -----------------------------------------------------------------------------------

// bound continues a claim whose server points at it: record the server in the claim (with the
// finalizer), then make sure the boot configuration exists and report Bound.
func (r *Reconciler) bound(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], s *metalv1alpha1.Server) (lifecycle.Result, error) {
	c, cl := p.Obj, p.Client()
	if ok, why := claimable.Tolerates(c.Spec.Tolerations, evictTaints(s.Spec.Taints)); !ok {
		return r.evict(ctx, p, s, why)
	}
	if !controllerutil.ContainsFinalizer(c, Finalizer) || c.Spec.ServerRef == nil || c.Spec.ServerRef.Name == "" {
		// Held but not recorded: bound by an earlier version, adopted by selector, or the
		// record written with the binding failed.
		if err := r.recordServer(ctx, p, s); err != nil {
			return lifecycle.Result{}, err
		}
		return lifecycle.Wrote("bound"), nil
	}

	c.Status.ServerPowerState = settledPower(c.Status.ServerPowerState, s.Status.PowerState)
	// Why the claim's image cannot be booted is the claim owner's business too: a tenant may not
	// be allowed to read the (cluster-scoped) Server.
	if bc := bootCondition(s); bc != nil {
		lifecycle.SetCondition(&c.Status.Conditions, c.Generation, metalv1alpha1.ConditionBootMethod, bc.Status, bc.Reason, bc.Message)
	} else {
		apimeta.RemoveStatusCondition(&c.Status.Conditions, metalv1alpha1.ConditionBootMethod)
	}
	// The boot configuration exists, and the server points at it, before the claim reports
	// Bound: whoever waits for Bound finds the server on its way.
	then, record := lifecycle.Done(), ""
	if r.madeUnseen(ctx, cl, c, bootSpecOf(c, s)) {
		// Made by the binding pass moments ago; this pass came on the claim's own event, ahead
		// of the configuration's. Look once more after the record has expired, in case it was
		// deleted before the cache ever showed it.
		then = lifecycle.RequeueAfter(bindTTL, "boot configuration not in the cache yet")
	} else if reason, msg, err := r.ensureBootConfiguration(ctx, p, s); err != nil || reason != "" {
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.report(ctx, p, metalv1alpha1.PhaseBound, metav1.ConditionTrue, reason, msg, lifecycle.RequeueAfter(r.RetryAfter, reason))
	} else if rec, conflict, err := r.ensureMetadataToken(ctx, cl, c); err != nil || conflict != "" {
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.report(ctx, p, metalv1alpha1.PhaseBound, metav1.ConditionTrue, metalv1alpha1.ReasonBootConfigurationConflict,
			"bound to server "+s.Name+", but "+conflict, lifecycle.RequeueAfter(r.RetryAfter, "metadata token"))
	} else {
		record = rec
	}
	if ref := s.Spec.BootConfigurationRef; ref == nil || ref.Namespace != c.Namespace || ref.Name != c.Name ||
		(record != "" && s.Annotations[metadata.TokenAnnotation] != record) {
		// Bound by an earlier version, the ref was cleared, or the token Secret made with the
		// binding lost to one made before (or was deleted, rotating the token): point the
		// server at the configuration and the token.
		if err := lifecycle.PatchMetadata(ctx, cl, s.DeepCopy(), func(o client.Object) {
			o.(*metalv1alpha1.Server).Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: c.Namespace, Name: c.Name}
			if record != "" {
				lifecycle.SetAnnotation(o, metadata.TokenAnnotation, record)
			}
		}); err != nil {
			return lifecycle.Result{}, fmt.Errorf("pointing server %s at the boot configuration and metadata token: %w", s.Name, err)
		}
	}
	return r.report(ctx, p, metalv1alpha1.PhaseBound, metav1.ConditionTrue, metalv1alpha1.ReasonBound, "bound to server "+s.Name, then)
}

// recordServer writes the claim's side of a binding: the server's name in spec.serverRef (kept
// when the user named it) and the finalizer that lets the claim release it. It is the pass's
// one write of the claim.
func (r *Reconciler) recordServer(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], s *metalv1alpha1.Server) error {
	c := p.Obj
	adopted := c.Spec.ServerRef == nil || c.Spec.ServerRef.Name == ""
	if err := lifecycle.PatchMetadata(ctx, p.Client(), c, func(o client.Object) {
		oc := o.(*metalv1alpha1.ServerClaim)
		lifecycle.AddFinalizer(oc, Finalizer)
		if oc.Spec.ServerRef == nil || oc.Spec.ServerRef.Name == "" {
			oc.Spec.ServerRef = &corev1.LocalObjectReference{Name: s.Name}
		}
	}); err != nil {
		return fmt.Errorf("recording server %s in claim: %w", s.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("claim bound", "server", s.Name, "adoptedBySelector", adopted)
	r.Recorder.Eventf(c, s, corev1.EventTypeNormal, "Bound", "Bind", "bound to server %s", s.Name)
	return nil
}

// settledPower is the server power a claim shows: a settled one (On, Off, ...), not the
// PoweringOn/PoweringOff on the way, each of which would cost the claim a status write.
func settledPower(shown, observed metalv1alpha1.PowerState) metalv1alpha1.PowerState {
	if observed == metalv1alpha1.PowerStatePoweringOn || observed == metalv1alpha1.PowerStatePoweringOff {
		return shown
	}
	return observed
}

// evict deletes a bound claim whose server carries an Evict taint it does not tolerate, as a
// NoExecute taint evicts a pod: whoever owns the claim sees it go and may claim again. The
// deletion then releases the server as any other (power off confirmed, boot configuration
// removed, Recycle or Retain), and the taint keeps claims without the toleration away.
func (r *Reconciler) evict(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], s *metalv1alpha1.Server, why string) (lifecycle.Result, error) {
	c := p.Obj
	if err := p.Client().Delete(ctx, c, client.Preconditions{UID: &c.UID}); err != nil && !apierrors.IsNotFound(err) {
		return lifecycle.Result{}, fmt.Errorf("evicting claim from server %s: %w", s.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("claim evicted", "server", s.Name, "reason", why)
	r.Recorder.Eventf(c, s, corev1.EventTypeWarning, "Evicted", "Evict", "evicted from server %s: %s", s.Name, why)
	return lifecycle.Wrote("evicted"), nil
}

// evictTaints are the taints that evict bound claims which do not tolerate them.
func evictTaints(taints []metalv1alpha1.Taint) []metalv1alpha1.Taint {
	var out []metalv1alpha1.Taint
	for _, t := range taints {
		if claimable.TaintEffect(t) == metalv1alpha1.TaintEffectEvict {
			out = append(out, t)
		}
	}
	return out
}

// releaseExtra lets go of a second server pointing at the claim.
func (r *Reconciler) releaseExtra(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], s *metalv1alpha1.Server) (lifecycle.Result, error) {
	if err := r.unpoint(ctx, p, s, true); err != nil {
		return lifecycle.Result{}, err
	}
	r.Recorder.Eventf(p.Obj, s, corev1.EventTypeWarning, "Unbound", "Unbind", "server %s also pointed at this claim; released it", s.Name)
	return lifecycle.Done(), nil
}

// unpoint removes, with an optimistic lock, the server's references to the claim: the claim ref
// (when claimRef) and the boot configuration ref if it is the claim's.
func (r *Reconciler) unpoint(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], s *metalv1alpha1.Server, claimRef bool) error {
	c := p.Obj
	err := lifecycle.PatchMetadata(ctx, p.Client(), s.DeepCopy(), func(o client.Object) {
		srv := o.(*metalv1alpha1.Server)
		if claimRef {
			srv.Spec.ServerClaimRef = nil
		}
		if ref := srv.Spec.BootConfigurationRef; ref != nil && ref.Namespace == c.Namespace && ref.Name == c.Name {
			srv.Spec.BootConfigurationRef = nil
		}
	})
	if err != nil {
		return fmt.Errorf("releasing server %s: %w", s.Name, err)
	}
	return nil
}

// ---- binding ---------------------------------------------------------------------------------

// unbound reports why the claim holds no server and waits: freed servers, changed Secrets and
// spec changes wake it; the resync is a safety net.
func (r *Reconciler) unbound(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], reason, msg string) (lifecycle.Result, error) {
	p.Obj.Status.ServerPowerState = ""
	return r.report(ctx, p, metalv1alpha1.PhaseUnbound, metav1.ConditionFalse, reason, msg, lifecycle.RequeueAfter(r.Options.Resync, reason))
}

// report writes phase and the Bound condition if they changed, with an event when the reason
// changes. Either way the pass ends with then: a status write brings no event by design.
func (r *Reconciler) report(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], phase metalv1alpha1.Phase,
	status metav1.ConditionStatus, reason, msg string, then lifecycle.Result) (lifecycle.Result, error) {
	c := p.Obj
	st := c.Status.DeepCopy()
	st.Phase = phase
	before := apimeta.FindStatusCondition(c.Status.Conditions, metalv1alpha1.ConditionBound)
	lifecycle.SetCondition(&st.Conditions, c.Generation, metalv1alpha1.ConditionBound, status, reason, msg)
	if equality.Semantic.DeepEqual(*st, c.Status) {
		return then, nil
	}
	if status == metav1.ConditionFalse && (before == nil || before.Reason != reason) {
		typ := corev1.EventTypeNormal
		switch reason {
		case metalv1alpha1.ReasonInvalidSelector, metalv1alpha1.ReasonImageMissing, metalv1alpha1.ReasonIgnitionSecretNotFound, metalv1alpha1.ReasonServerNotFound, metalv1alpha1.ReasonServerSelectorMismatch:
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(c, nil, typ, reason, "Bind", "%s", msg)
	}
	if reason == metalv1alpha1.ReasonBootConfigurationConflict {
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, reason, "Bind", "%s", msg)
	}
	c.Status = *st // the Reconciler writes it
	return then, nil
}

// ---- deletion --------------------------------------------------------------------------------

// finalize lets a deleted claim go once its server has let go of it. The Server controller does
// the releasing (BMC-confirmed power off, then Available on Recycle or Released on Retain); this
// only waits, except where the Server controller would not release: a server being deleted, or
// one in a state other than Reserved that is already observed off.
func (r *Reconciler) finalize(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], held []*metalv1alpha1.Server) (lifecycle.Result, error) {
	c, cl := p.Obj, p.Client()
	if !controllerutil.ContainsFinalizer(c, Finalizer) {
		return lifecycle.Done(), nil
	}
	for _, s := range held {
		c.Status.ServerPowerState = settledPower(c.Status.ServerPowerState, s.Status.PowerState) // the release powering it off
		state, _ := serverstate.Store.Get(s)
		switch {
		case !s.DeletionTimestamp.IsZero():
			// The server's own finalizer powers it off once no claim holds it.
			if err := r.unpoint(ctx, p, s, true); err != nil {
				return lifecycle.Result{}, err
			}
			return lifecycle.Done(), nil
		case state == metalv1alpha1.ServerStateReleased:
			// Retain: the server keeps its claim ref on purpose, until an admin removes it.
			if ref := s.Spec.BootConfigurationRef; ref != nil && ref.Namespace == c.Namespace && ref.Name == c.Name {
				if err := r.unpoint(ctx, p, s, false); err != nil {
					return lifecycle.Result{}, err
				}
				return lifecycle.Done(), nil
			}
		case state == metalv1alpha1.ServerStateMaintenance || state == metalv1alpha1.ServerStateParked:
			// A maintenance or the park holds the box now and will not power it off for us:
			// the claim lets go, and the server powers it off when it is handed back (no claim
			// ref by then: Reserved releases it).
			if err := r.unpoint(ctx, p, s, true); err != nil {
				return lifecycle.Result{}, err
			}
			return lifecycle.Done(), nil
		case state == metalv1alpha1.ServerStateReserved || state == metalv1alpha1.ServerStateAvailable:
			return r.report(ctx, p, c.Status.Phase, metav1.ConditionTrue, metalv1alpha1.ReasonReleasing,
				fmt.Sprintf("waiting for server %s to power off and let go", s.Name), lifecycle.RequeueAfter(r.RetryAfter, "releasing"))
		default:
			if s.Status.PowerState != metalv1alpha1.PowerStateOff {
				return r.report(ctx, p, c.Status.Phase, metav1.ConditionTrue, metalv1alpha1.ReasonReleasing,
					fmt.Sprintf("waiting for server %s (%s) to be powered off", s.Name, state), lifecycle.RequeueAfter(r.RetryAfter, "releasing"))
			}
			if err := r.unpoint(ctx, p, s, true); err != nil {
				return lifecycle.Result{}, err
			}
			return lifecycle.Done(), nil
		}
	}
	if err := bootrequest.DeleteOwned(ctx, cl, c, client.ObjectKeyFromObject(c)); err != nil {
		return lifecycle.Result{}, err
	}
	if err := deleteMetadataToken(ctx, cl, c); err != nil {
		return lifecycle.Result{}, err
	}
	if err := lifecycle.PatchMetadata(ctx, cl, c, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
	}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("removing claim finalizer: %w", err)
	}
	if c.Spec.ServerRef != nil {
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Unbound", "Release", "server %s released", c.Spec.ServerRef.Name)
	}
	return lifecycle.Wrote("released"), nil
}

// ---- watches ---------------------------------------------------------------------------------

// ensureBootConfiguration creates or updates the claim's ServerBootConfiguration: same name and
// namespace as the claim, owned by it. It returns a reason when a foreign object is in the way.
func (r *Reconciler) ensureBootConfiguration(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], s *metalv1alpha1.Server) (string, string, error) {
	return r.ensureBootConfigurationOf(ctx, p.Client(), p.Obj, s)
}

// ensureBootConfigurationOf is ensureBootConfiguration for claim c as given (a copy, when the
// pass's object is being written at the same time).
func (r *Reconciler) ensureBootConfigurationOf(ctx context.Context, cl client.Client, c *metalv1alpha1.ServerClaim, s *metalv1alpha1.Server) (string, string, error) {
	spec := bootSpecOf(c, s)
	err := bootrequest.EnsureOwned(ctx, cl, c, client.ObjectKeyFromObject(c), spec)
	if msg, ok := bootrequest.Taken(err); ok {
		return metalv1alpha1.ReasonBootConfigurationConflict, fmt.Sprintf("bound to server %s, but %s", s.Name, msg), nil
	}
	if err == nil {
		r.noteMade(c, spec)
	}
	return "", "", err
}

// bootSpecOf is the boot configuration claim c wants on server s.
func bootSpecOf(c *metalv1alpha1.ServerClaim, s *metalv1alpha1.Server) metalv1alpha1.ServerBootConfigurationSpec {
	return metalv1alpha1.ServerBootConfigurationSpec{
		ServerRef:         corev1.LocalObjectReference{Name: s.Name},
		Image:             c.Spec.Image,
		IgnitionSecretRef: c.Spec.IgnitionSecretRef,
		NetworkBoot:       c.Spec.NetworkBoot,
		BootMethod:        c.Spec.BootMethod,
		BootURI:           c.Spec.BootURI,
		RootVolume:        c.Spec.RootVolume,
		RootDeviceHints:   c.Spec.RootDeviceHints,
		// The claim's token Secret, made with the binding (serverclaim_token.go).
		MetadataTokenSecretRef: &corev1.LocalObjectReference{Name: metadata.TokenSecretName(c.Name)},
	}
}
