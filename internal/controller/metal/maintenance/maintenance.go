// Package maintenance hands servers to maintenance: the ServerMaintenance controller (the first
// of a server's maintenances points it at itself, at once or once the claim's owner approved)
// and the bridge that carries out the newer stack's maintenance group
// (maintenance.metal.ironcore.dev) through it. The Server controller does the entering, power
// and boot; this package never touches a BMC.
package maintenance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bootrequest"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// Finalizer keeps a maintenance until its server has been handed back. The reference's name,
// so migrated objects are handled alike.
const Finalizer = "metal.ironcore.dev/servermaintenance"

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances/finalizers,verbs=update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverbootconfigurations,verbs=get;list;watch;create;delete

// Reconciler hands servers to maintenance: the first of a server's maintenances (highest priority,
// then oldest) sets the server's spec.serverMaintenanceRef — at once with policy Enforced or an
// unclaimed server, after the claim owner's approval (label metal.ironcore.dev/maintenance-approved
// on the ServerClaim, asked for with metal.ironcore.dev/maintenance-needed) with OwnerApproval. The
// Server controller then enters Maintenance, applies spec.serverPower and returns to the state it
// left when the ref goes, which deleting the maintenance does (finalizer).
//
// Status is computed from the refs and the server's durable state each pass, never read back: a
// wiped status is rebuilt and changes nothing.
type Reconciler struct {
	// Shards, set, limits the reconciler to the objects of the shards this replica holds.
	Shards      *shard.Set
	Client      client.Client
	Recorder    events.EventRecorder
	Concurrency int
	// RetryAfter is the look while something outside our watches is awaited.
	RetryAfter time.Duration
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.RetryAfter <= 0 {
		r.RetryAfter = 15 * time.Second
	}
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.ServerMaintenance { return &metalv1alpha1.ServerMaintenance{} }, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("servermaintenance").
		For(&metalv1alpha1.ServerMaintenance{}, builder.WithPredicates(predicate.Or(lifecycle.Predicate(),
			lifecycle.StatusWiped(func(o client.Object) bool { return o.(*metalv1alpha1.ServerMaintenance).Status.State == "" })))).
		// A maintenance created, re-prioritised or deleted moves the others of its server in line.
		Watches(&metalv1alpha1.ServerMaintenance{}, handler.EnqueueRequestsFromMapFunc(r.siblings), builder.WithPredicates(lifecycle.Predicate())).
		// A boot configuration's state (Ready, Error) decides between InMaintenance and Failed.
		Owns(&metalv1alpha1.ServerBootConfiguration{}).
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(r.forServer), builder.WithPredicates(lifecycle.Predicate())).
		// The owner's approval is a label on the claim.
		Watches(&metalv1alpha1.ServerClaim{}, handler.EnqueueRequestsFromMapFunc(r.forClaim), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Concurrency, 1)})
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.ServerMaintenanceList{} },
		shardkey.ForServerRef(r.Client, func(m *metalv1alpha1.ServerMaintenance) string {
			if m.Spec.ServerRef == nil {
				return ""
			}
			return m.Spec.ServerRef.Name
		})).Complete(rec)
}

func (r *Reconciler) forServer(ctx context.Context, o client.Object) []reconcile.Request {
	return r.forServerName(ctx, o.GetName())
}

func (r *Reconciler) siblings(ctx context.Context, o client.Object) []reconcile.Request {
	m := o.(*metalv1alpha1.ServerMaintenance)
	if m.Spec.ServerRef == nil || m.Spec.ServerRef.Name == "" {
		return nil
	}
	return r.forServerName(ctx, m.Spec.ServerRef.Name)
}

func (r *Reconciler) forClaim(ctx context.Context, o client.Object) []reconcile.Request {
	c := o.(*metalv1alpha1.ServerClaim)
	if c.Spec.ServerRef == nil || c.Spec.ServerRef.Name == "" {
		return nil
	}
	return r.forServerName(ctx, c.Spec.ServerRef.Name)
}

func (r *Reconciler) forServerName(ctx context.Context, server string) []reconcile.Request {
	list := &metalv1alpha1.ServerMaintenanceList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.MaintenanceServer: server}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

func isMaintenanceRef(ref *metalv1alpha1.ObjectReference, m *metalv1alpha1.ServerMaintenance) bool {
	return ref != nil && ref.Namespace == m.Namespace && ref.Name == m.Name
}

// maintenancePass is one pass over a maintenance: the server it targets, once read.
type maintenancePass struct {
	*lifecycle.Pass[*metalv1alpha1.ServerMaintenance]
	server *metalv1alpha1.Server
}

// handle is the maintenance's pass, as its list of steps; the first that acts ends it.
func (r *Reconciler) handle(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.ServerMaintenance]) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, &maintenancePass{Pass: lp},
		lifecycle.DoneIf[*maintenancePass](serverstate.Ignored),
		lifecycle.OnDeletion(func(ctx context.Context, p *maintenancePass) (lifecycle.Result, error) {
			return r.finalize(ctx, p.Pass)
		}),
		lifecycle.EnsureFinalizer[*maintenancePass](Finalizer),
		r.readServer,
		r.holding,
		r.queue,
		r.askOwner,
		r.startStep,
	)
}

// readServer reads the server the maintenance targets; a missing one is waited for.
func (r *Reconciler) readServer(ctx context.Context, p *maintenancePass) (lifecycle.Result, error) {
	m := p.Obj
	if m.Spec.ServerRef == nil || m.Spec.ServerRef.Name == "" {
		return r.report(ctx, p.Pass, metalv1alpha1.ServerMaintenanceStateFailed, metalv1alpha1.ReasonInvalidSpec, "spec.serverRef names no server", lifecycle.Done())
	}
	var err error
	if p.server, err = r.server(ctx, p.Pass); err != nil {
		return lifecycle.Result{}, err
	}
	if p.server == nil {
		return r.report(ctx, p.Pass, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonServerNotFound, fmt.Sprintf("server %s does not exist", m.Spec.ServerRef.Name), lifecycle.Done())
	}
	return lifecycle.Continue(), nil
}

// holding reports a maintenance the server points at, and waits behind another that it points
// at. A ref to a maintenance that is gone (removed without its finalizer) holds nothing: the
// next maintenance in line takes the server over.
func (r *Reconciler) holding(ctx context.Context, p *maintenancePass) (lifecycle.Result, error) {
	s := p.server
	ref := s.Spec.ServerMaintenanceRef
	switch {
	case isMaintenanceRef(ref, p.Obj):
		return r.active(ctx, p.Pass, s)
	case ref == nil:
		return lifecycle.Continue(), nil
	}
	gone, err := r.maintenanceGone(ctx, p.Pass, ref)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if !gone {
		return r.report(ctx, p.Pass, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonQueued,
			fmt.Sprintf("server %s is in maintenance %s/%s", s.Name, ref.Namespace, ref.Name), lifecycle.Done())
	}
	return lifecycle.Continue(), nil
}

// queue waits while the server is being deleted, or another maintenance of it goes first.
func (r *Reconciler) queue(ctx context.Context, p *maintenancePass) (lifecycle.Result, error) {
	m, s := p.Obj, p.server
	if !s.DeletionTimestamp.IsZero() {
		return r.report(ctx, p.Pass, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonServerDeleting, fmt.Sprintf("server %s is being deleted; it enters no maintenance", s.Name), lifecycle.Done())
	}
	first, err := r.first(ctx, p.Pass)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if first != nil && (first.Namespace != m.Namespace || first.Name != m.Name) {
		return r.report(ctx, p.Pass, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonQueued,
			fmt.Sprintf("behind maintenance %s/%s (priority %d)", first.Namespace, first.Name, first.Spec.Priority), lifecycle.Done())
	}
	return lifecycle.Continue(), nil
}

// askOwner tells the owner of the claim on the server (under either policy; the label's event
// brings us back) and, unless the policy is Enforced, waits for the owner's approval.
func (r *Reconciler) askOwner(ctx context.Context, p *maintenancePass) (lifecycle.Result, error) {
	m := p.Obj
	claim, err := r.claimOf(ctx, p.Pass, p.server)
	if err != nil || claim == nil {
		return lifecycle.Continue(), err
	}
	if claim.Labels[metalv1alpha1.MaintenanceNeededLabel] != "true" {
		if err := r.markClaim(ctx, p.Pass, claim); err != nil {
			return lifecycle.Result{}, err
		}
		return r.report(ctx, p.Pass, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonWaitingForApproval,
			fmt.Sprintf("asked the owner of claim %s/%s", claim.Namespace, claim.Name), lifecycle.Done())
	}
	if m.Spec.Policy != metalv1alpha1.ServerMaintenancePolicyEnforced && !approved(claim) {
		return r.report(ctx, p.Pass, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonWaitingForApproval,
			fmt.Sprintf("waiting for label %s on claim %s/%s", metalv1alpha1.MaintenanceApprovedLabel, claim.Namespace, claim.Name), lifecycle.Done())
	}
	return lifecycle.Continue(), nil
}

func (r *Reconciler) startStep(ctx context.Context, p *maintenancePass) (lifecycle.Result, error) {
	return r.start(ctx, p.Pass, p.server)
}

func (r *Reconciler) maintenanceGone(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance], ref *metalv1alpha1.ObjectReference) (bool, error) {
	err := p.Client().Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &metalv1alpha1.ServerMaintenance{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading maintenance %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return false, nil
}

func (r *Reconciler) server(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance]) (*metalv1alpha1.Server, error) {
	s := &metalv1alpha1.Server{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: p.Obj.Spec.ServerRef.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading server %s: %w", p.Obj.Spec.ServerRef.Name, err)
	}
	return s, nil
}

// first returns the live maintenance of the server that goes next: highest priority, then
// oldest, then by name so that every pass agrees.
func (r *Reconciler) first(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance]) (*metalv1alpha1.ServerMaintenance, error) {
	list := &metalv1alpha1.ServerMaintenanceList{}
	if err := p.Client().List(ctx, list, client.MatchingFields{index.MaintenanceServer: p.Obj.Spec.ServerRef.Name}); err != nil {
		return nil, fmt.Errorf("listing maintenances of server %s: %w", p.Obj.Spec.ServerRef.Name, err)
	}
	var live []*metalv1alpha1.ServerMaintenance
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			live = append(live, &list.Items[i])
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	return slices.MinFunc(live, func(a, b *metalv1alpha1.ServerMaintenance) int {
		if a.Spec.Priority != b.Spec.Priority {
			return int(b.Spec.Priority) - int(a.Spec.Priority)
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	}), nil
}

// claimOf returns the live claim holding the server, if any.
func (r *Reconciler) claimOf(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance], s *metalv1alpha1.Server) (*metalv1alpha1.ServerClaim, error) {
	ref := s.Spec.ServerClaimRef
	if ref == nil {
		return nil, nil
	}
	c := &metalv1alpha1.ServerClaim{}
	if err := p.Client().Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading claim %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return nil, nil
	}
	return c, nil
}

// approved reports the owner's approval: the label, or (as the reference operator read it) an
// annotation of the same key; "false" is no approval.
func approved(c *metalv1alpha1.ServerClaim) bool {
	v, ok := c.Labels[metalv1alpha1.MaintenanceApprovedLabel]
	if !ok {
		v, ok = c.Annotations[metalv1alpha1.MaintenanceApprovedLabel]
	}
	return ok && v != "false"
}

// markClaim asks the claim's owner for approval.
func (r *Reconciler) markClaim(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance], c *metalv1alpha1.ServerClaim) error {
	m := p.Obj
	err := lifecycle.PatchMetadata(ctx, p.Client(), c, func(o client.Object) {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[metalv1alpha1.MaintenanceNeededLabel] = "true"
		o.SetLabels(l)
		if reason := m.Annotations[metalv1alpha1.MaintenanceReasonAnnotation]; reason != "" {
			lifecycle.SetAnnotation(o, metalv1alpha1.MaintenanceReasonAnnotation, reason)
		}
	})
	if err != nil {
		return fmt.Errorf("marking claim %s/%s for maintenance: %w", c.Namespace, c.Name, err)
	}
	r.Recorder.Eventf(c, m, corev1.EventTypeNormal, "MaintenanceNeeded", "Maintenance",
		"maintenance %s/%s (%s) needs server %s", m.Namespace, m.Name, policyOf(m), m.Spec.ServerRef.Name)
	return nil
}

func policyOf(m *metalv1alpha1.ServerMaintenance) metalv1alpha1.ServerMaintenancePolicy {
	if m.Spec.Policy == "" {
		return metalv1alpha1.ServerMaintenancePolicyOwnerApproval
	}
	return m.Spec.Policy
}

// start creates the maintenance boot configuration, if any, and points the server at the
// maintenance (and at that boot configuration) in one optimistic-locked write. Two maintenances
// racing on a lagging cache: one wins, the other sees the server taken on its next pass.
func (r *Reconciler) start(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance], s *metalv1alpha1.Server) (lifecycle.Result, error) {
	m := p.Obj
	sbcRef, err := r.ensureBootConfiguration(ctx, p, s)
	if msg, ok := bootrequest.Taken(err); ok {
		return r.report(ctx, p, metalv1alpha1.ServerMaintenanceStateFailed, metalv1alpha1.ReasonBootConfigurationConflict, msg, lifecycle.Done())
	}
	if err != nil {
		return lifecycle.Result{}, err
	}
	if err := lifecycle.PatchMetadata(ctx, p.Client(), s, func(o client.Object) {
		srv := o.(*metalv1alpha1.Server)
		srv.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Namespace: m.Namespace, Name: m.Name}
		if sbcRef != nil {
			srv.Spec.MaintenanceBootConfigurationRef = sbcRef
		}
	}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("handing server %s to maintenance: %w", s.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("maintenance started", "server", s.Name, "policy", policyOf(m))
	r.Recorder.Eventf(m, s, corev1.EventTypeNormal, "Started", "Maintenance", "server %s handed to maintenance (%s)", s.Name, policyOf(m))
	return r.report(ctx, p, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonEnteringMaintenance,
		fmt.Sprintf("waiting for server %s to enter Maintenance", s.Name), lifecycle.Done())
}

// ensureBootConfiguration creates the boot configuration of spec.serverBootConfigurationTemplate,
// owned by the maintenance, and returns the reference to it (nil without a template).
func (r *Reconciler) ensureBootConfiguration(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance], s *metalv1alpha1.Server) (*metalv1alpha1.ObjectReference, error) {
	m, cl := p.Obj, p.Client()
	t := m.Spec.ServerBootConfigurationTemplate
	if t == nil || t.Name == "" {
		return nil, nil
	}
	spec := *t.Spec.DeepCopy()
	spec.ServerRef = corev1.LocalObjectReference{Name: s.Name} // the template boots this server, whatever it says
	if err := bootrequest.EnsureOwned(ctx, cl, m, client.ObjectKey{Namespace: m.Namespace, Name: t.Name}, spec); err != nil {
		return nil, err
	}
	return &metalv1alpha1.ObjectReference{Namespace: m.Namespace, Name: t.Name}, nil
}

// active reports a maintenance that holds its server: InMaintenance once the server's durable
// state says so, Failed while its boot configuration is in Error.
func (r *Reconciler) active(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance], s *metalv1alpha1.Server) (lifecycle.Result, error) {
	m := p.Obj
	if state, _ := serverstate.Store.Get(s); !s.DeletionTimestamp.IsZero() && state != metalv1alpha1.ServerStateMaintenance {
		// Deleted before it got there: a deleted server only waits for its holders to let go,
		// it enters nothing. Said so, rather than waiting for it forever.
		return r.report(ctx, p, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonServerDeleting,
			fmt.Sprintf("server %s is being deleted (%s); it enters no maintenance", s.Name, state), lifecycle.Done())
	}
	sbcRef, err := r.ensureBootConfiguration(ctx, p, s)
	if msg, ok := bootrequest.Taken(err); ok {
		return r.report(ctx, p, metalv1alpha1.ServerMaintenanceStateFailed, metalv1alpha1.ReasonBootConfigurationConflict, msg, lifecycle.Done())
	}
	if err != nil {
		return lifecycle.Result{}, err
	}
	if sbcRef != nil {
		if !equality.Semantic.DeepEqual(s.Spec.MaintenanceBootConfigurationRef, sbcRef) {
			if err := lifecycle.PatchMetadata(ctx, p.Client(), s, func(o client.Object) {
				o.(*metalv1alpha1.Server).Spec.MaintenanceBootConfigurationRef = sbcRef
			}); err != nil {
				return lifecycle.Result{}, fmt.Errorf("pointing server %s at the maintenance boot configuration: %w", s.Name, err)
			}
			return lifecycle.Done(), nil // the server's event brings us back
		}
		sbc := &metalv1alpha1.ServerBootConfiguration{}
		if err := p.Client().Get(ctx, client.ObjectKey{Namespace: sbcRef.Namespace, Name: sbcRef.Name}, sbc); err != nil && !apierrors.IsNotFound(err) {
			return lifecycle.Result{}, fmt.Errorf("reading maintenance boot configuration: %w", err)
		}
		if sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateError {
			msg := "maintenance boot configuration " + sbcRef.Name + " is in Error"
			if c := apimeta.FindStatusCondition(sbc.Status.Conditions, metalv1alpha1.ConditionReady); c != nil {
				msg += ": " + c.Message
			}
			return r.report(ctx, p, metalv1alpha1.ServerMaintenanceStateFailed, metalv1alpha1.ReasonBootConfigurationError, msg, lifecycle.Done())
		}
	}
	if state, _ := serverstate.Store.Get(s); state != metalv1alpha1.ServerStateMaintenance {
		return r.report(ctx, p, metalv1alpha1.ServerMaintenanceStatePending, metalv1alpha1.ReasonEnteringMaintenance,
			fmt.Sprintf("waiting for server %s (%s) to enter Maintenance", s.Name, state), lifecycle.Done())
	}
	msg := "server " + s.Name + " in maintenance"
	if m.Spec.ServerPower != "" {
		msg += ", power " + string(m.Spec.ServerPower)
	}
	return r.report(ctx, p, metalv1alpha1.ServerMaintenanceStateInMaintenance, metalv1alpha1.ReasonInMaintenance, msg, lifecycle.Done())
}

// report writes state and the InMaintenance condition if they changed, with an event when the
// state changes.
func (r *Reconciler) report(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance],
	state metalv1alpha1.ServerMaintenanceState, reason, msg string, then lifecycle.Result) (lifecycle.Result, error) {
	m := p.Obj
	st := m.Status.DeepCopy()
	st.State = state
	status := metav1.ConditionFalse
	if state == metalv1alpha1.ServerMaintenanceStateInMaintenance {
		status = metav1.ConditionTrue
	}
	lifecycle.SetCondition(&st.Conditions, m.Generation, metalv1alpha1.ConditionInMaintenance, status, reason, msg)
	if equality.Semantic.DeepEqual(*st, m.Status) {
		return then, nil
	}
	if st.State != m.Status.State && m.Status.State != "" {
		typ := corev1.EventTypeNormal
		if state == metalv1alpha1.ServerMaintenanceStateFailed {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(m, nil, typ, string(state), "Maintenance", "%s", msg)
	}
	m.Status = *st // the Reconciler writes it
	return then, nil
}

// finalize hands the server back (removing the refs makes the Server controller return it to
// the state it left), removes the maintenance boot configuration and the marks on the claim, and
// lets the maintenance go. One write per pass; each write's event brings the next.
func (r *Reconciler) finalize(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance]) (lifecycle.Result, error) {
	m, cl := p.Obj, p.Client()
	if !controllerutil.ContainsFinalizer(m, Finalizer) {
		return lifecycle.Done(), nil
	}
	var s *metalv1alpha1.Server
	if m.Spec.ServerRef != nil && m.Spec.ServerRef.Name != "" {
		var err error
		if s, err = r.server(ctx, p); err != nil {
			return lifecycle.Result{}, err
		}
	}
	ours := func(ref *metalv1alpha1.ObjectReference) bool {
		t := m.Spec.ServerBootConfigurationTemplate
		return ref != nil && t != nil && ref.Namespace == m.Namespace && ref.Name == t.Name
	}
	if s != nil && (isMaintenanceRef(s.Spec.ServerMaintenanceRef, m) || ours(s.Spec.MaintenanceBootConfigurationRef)) {
		held := isMaintenanceRef(s.Spec.ServerMaintenanceRef, m)
		if held {
			// The approval was for this maintenance: clear it first, in a pass of its own, so that
			// the next maintenance in line — which moves once the server is handed back — finds
			// the claim unmarked in the cache and asks the owner again.
			if c, err := r.claimOf(ctx, p, s); err != nil {
				return lifecycle.Result{}, err
			} else if c != nil && marked(c) {
				if err := r.clearClaim(ctx, p, c); err != nil {
					return lifecycle.Result{}, err
				}
				return lifecycle.Done(), nil // the claim's event brings us back
			}
		}
		if err := lifecycle.PatchMetadata(ctx, cl, s.DeepCopy(), func(o client.Object) {
			srv := o.(*metalv1alpha1.Server)
			if isMaintenanceRef(srv.Spec.ServerMaintenanceRef, m) {
				srv.Spec.ServerMaintenanceRef = nil
			}
			if ours(srv.Spec.MaintenanceBootConfigurationRef) {
				srv.Spec.MaintenanceBootConfigurationRef = nil
			}
		}); err != nil {
			return lifecycle.Result{}, fmt.Errorf("handing server %s back: %w", s.Name, err)
		}
		if held {
			ctrl.LoggerFrom(ctx).Info("maintenance ended", "server", s.Name)
			r.Recorder.Eventf(m, s, corev1.EventTypeNormal, "Ended", "Maintenance", "server %s handed back", s.Name)
		}
		return lifecycle.Done(), nil // the server's event brings us back
	}
	if t := m.Spec.ServerBootConfigurationTemplate; t != nil && t.Name != "" {
		if err := bootrequest.DeleteOwned(ctx, cl, m, client.ObjectKey{Namespace: m.Namespace, Name: t.Name}); err != nil {
			return lifecycle.Result{}, err
		}
	}
	if s != nil {
		// A maintenance deleted while it waited: the marks stay for the others in line, if any.
		first, err := r.first(ctx, p)
		if err != nil {
			return lifecycle.Result{}, err
		}
		if first == nil && s.Spec.ServerMaintenanceRef == nil {
			if c, err := r.claimOf(ctx, p, s); err != nil {
				return lifecycle.Result{}, err
			} else if c != nil && marked(c) {
				if err := r.clearClaim(ctx, p, c); err != nil {
					return lifecycle.Result{}, err
				}
				return lifecycle.Done(), nil // the claim's event brings us back
			}
		}
	}
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, cl, m, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
	})
}

// clearClaim removes the maintenance marks (needed, approved, reason) from a claim.
func (r *Reconciler) clearClaim(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerMaintenance], c *metalv1alpha1.ServerClaim) error {
	if err := lifecycle.PatchMetadata(ctx, p.Client(), c, func(o client.Object) {
		l := o.GetLabels()
		delete(l, metalv1alpha1.MaintenanceNeededLabel)
		delete(l, metalv1alpha1.MaintenanceApprovedLabel)
		o.SetLabels(l)
		lifecycle.RemoveAnnotation(o, metalv1alpha1.MaintenanceApprovedLabel)
		lifecycle.RemoveAnnotation(o, metalv1alpha1.MaintenanceReasonAnnotation)
	}); err != nil {
		return fmt.Errorf("clearing maintenance marks of claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return nil
}

func marked(c *metalv1alpha1.ServerClaim) bool {
	_, n := c.Labels[metalv1alpha1.MaintenanceNeededLabel]
	_, a := c.Labels[metalv1alpha1.MaintenanceApprovedLabel]
	_, aa := c.Annotations[metalv1alpha1.MaintenanceApprovedLabel]
	_, r := c.Annotations[metalv1alpha1.MaintenanceReasonAnnotation]
	return n || a || aa || r
}
