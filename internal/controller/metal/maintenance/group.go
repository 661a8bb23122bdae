package maintenance

import (
	"context"
	"fmt"

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
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=maintenance.metal.ironcore.dev,resources=servermaintenances,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=maintenance.metal.ironcore.dev,resources=servermaintenances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=maintenance.metal.ironcore.dev,resources=servermaintenances/finalizers,verbs=update
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=servermaintenances,verbs=create;delete

// GroupReconciler carries out the ServerMaintenances of the newer stack's group
// (maintenance.metal.ironcore.dev) with the metal.ironcore.dev ones: for each it keeps one of
// the same namespace and name (a Server's spec.serverMaintenanceRef names both alike), owned
// by it, with its spec and no power or boot of its own, and reports that one's state. Deleting
// it deletes its counterpart first (finalizer, the reference's name), which hands the server
// back. A metal.ironcore.dev maintenance of that name that is not its counterpart is never
// touched: the conflict is reported.
type GroupReconciler struct {
	// Shards, set, limits the reconciler to the objects of the shards this replica holds.
	Shards      *shard.Set
	Client      client.Client
	Recorder    events.EventRecorder
	Concurrency int
}

// SetupWithManager registers the reconciler.
func (r *GroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *maintenancev1alpha1.ServerMaintenance { return &maintenancev1alpha1.ServerMaintenance{} }, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("maintenancegroup").
		For(&maintenancev1alpha1.ServerMaintenance{}, builder.WithPredicates(predicate.Or(lifecycle.Predicate(),
			lifecycle.StatusWiped(func(o client.Object) bool { return o.(*maintenancev1alpha1.ServerMaintenance).Status.State == "" })))).
		// The counterpart's state is what this one reports; its deletion ends this one's.
		Owns(&metalv1alpha1.ServerMaintenance{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Concurrency, 1)})
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &maintenancev1alpha1.ServerMaintenanceList{} },
		shardkey.ForObject[*maintenancev1alpha1.ServerMaintenance]).Complete(rec)
}

type groupPass struct {
	*lifecycle.Pass[*maintenancev1alpha1.ServerMaintenance]
	counterpart *metalv1alpha1.ServerMaintenance // nil: none yet
	conflict    bool                             // one of that name exists and is not ours
}

func (r *GroupReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*maintenancev1alpha1.ServerMaintenance]) (lifecycle.Result, error) {
	p := &groupPass{Pass: lp}
	return lifecycle.Steps(ctx, p,
		r.read,
		lifecycle.OnDeletion(r.finalize),
		lifecycle.EnsureFinalizer[*groupPass](Finalizer),
		r.ensureCounterpart,
		r.report,
	)
}

// read finds the counterpart.
func (r *GroupReconciler) read(ctx context.Context, p *groupPass) (lifecycle.Result, error) {
	m := &metalv1alpha1.ServerMaintenance{}
	err := p.Client().Get(ctx, client.ObjectKeyFromObject(p.Obj), m)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return lifecycle.Result{}, fmt.Errorf("reading the metal.ironcore.dev ServerMaintenance %s: %w", p.Obj.Name, err)
	case metav1.IsControlledBy(m, p.Obj):
		p.counterpart = m
	default:
		p.conflict = true
	}
	return lifecycle.Continue(), nil
}

// finalize deletes the counterpart and lets go once it is gone (its own finalizer hands the
// server back first).
func (r *GroupReconciler) finalize(ctx context.Context, p *groupPass) (lifecycle.Result, error) {
	if p.counterpart != nil {
		if p.counterpart.DeletionTimestamp.IsZero() {
			if err := p.Client().Delete(ctx, p.counterpart); err != nil && !apierrors.IsNotFound(err) {
				return lifecycle.Result{}, fmt.Errorf("deleting the metal.ironcore.dev ServerMaintenance %s: %w", p.Obj.Name, err)
			}
		}
		return lifecycle.Done(), nil // its deletion (Owns) brings the next pass
	}
	if !controllerutil.ContainsFinalizer(p.Obj, Finalizer) {
		return lifecycle.Done(), nil
	}
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
	})
}

// counterpartSpec is the metal.ironcore.dev spec that carries m out: no power and no boot
// configuration, the newer kind has neither.
func counterpartSpec(m *maintenancev1alpha1.ServerMaintenance) metalv1alpha1.ServerMaintenanceSpec {
	var ref *corev1.LocalObjectReference
	if m.Spec.ServerRef != nil {
		ref = &corev1.LocalObjectReference{Name: m.Spec.ServerRef.Name}
	}
	return metalv1alpha1.ServerMaintenanceSpec{ServerRef: ref, Policy: m.Spec.Policy, Priority: m.Spec.Priority, LocatorLED: m.Spec.LocatorLED}
}

func (r *GroupReconciler) ensureCounterpart(ctx context.Context, p *groupPass) (lifecycle.Result, error) {
	if p.conflict {
		return lifecycle.Continue(), nil // reported
	}
	want := counterpartSpec(p.Obj)
	if p.counterpart == nil {
		m := &metalv1alpha1.ServerMaintenance{
			ObjectMeta: metav1.ObjectMeta{Name: p.Obj.Name, Namespace: p.Obj.Namespace, Labels: p.Obj.Labels, Annotations: reasonOnly(p.Obj.Annotations)},
			Spec:       want,
		}
		if err := controllerutil.SetControllerReference(p.Obj, m, p.Client().Scheme()); err != nil {
			return lifecycle.Result{}, err
		}
		if err := p.Client().Create(ctx, m); err != nil && !apierrors.IsAlreadyExists(err) {
			return lifecycle.Result{}, fmt.Errorf("creating the metal.ironcore.dev ServerMaintenance %s: %w", p.Obj.Name, err)
		}
		return lifecycle.Done(), nil // its creation (Owns) brings the next pass
	}
	if !equality.Semantic.DeepEqual(p.counterpart.Spec, want) {
		p.counterpart.Spec = want
		if err := p.Client().Update(ctx, p.counterpart); err != nil {
			return lifecycle.Result{}, fmt.Errorf("updating the metal.ironcore.dev ServerMaintenance %s: %w", p.Obj.Name, err)
		}
		return lifecycle.Done(), nil
	}
	return lifecycle.Continue(), nil
}

// reasonOnly keeps the maintenance-reason annotation, which both kinds show as a column.
func reasonOnly(in map[string]string) map[string]string {
	if v, ok := in[metalv1alpha1.MaintenanceReasonAnnotation]; ok {
		return map[string]string{metalv1alpha1.MaintenanceReasonAnnotation: v}
	}
	return nil
}

// report shows the counterpart's state (the Reconciler writes it when it changed).
func (r *GroupReconciler) report(_ context.Context, p *groupPass) (lifecycle.Result, error) {
	st := p.Obj.Status.DeepCopy()
	switch {
	case p.conflict:
		msg := fmt.Sprintf("a metal.ironcore.dev ServerMaintenance %s/%s exists and is not this one's: nothing is done", p.Obj.Namespace, p.Obj.Name)
		if c := apimeta.FindStatusCondition(st.Conditions, metalv1alpha1.ConditionReady); c == nil || c.Reason != metalv1alpha1.ReasonMaintenanceConflict {
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonMaintenanceConflict, "Maintain", "%s", msg)
		}
		st.State = metalv1alpha1.ServerMaintenanceStatePending
		lifecycle.SetCondition(&st.Conditions, p.Obj.Generation, metalv1alpha1.ConditionReady, metav1.ConditionFalse, metalv1alpha1.ReasonMaintenanceConflict, msg)
	case p.counterpart != nil:
		st.State = p.counterpart.Status.State
		lifecycle.SetCondition(&st.Conditions, p.Obj.Generation, metalv1alpha1.ConditionReady, metav1.ConditionTrue, metalv1alpha1.ReasonCarriedOut,
			fmt.Sprintf("carried out by metal.ironcore.dev ServerMaintenance %s/%s", p.Obj.Namespace, p.Obj.Name))
	}
	p.Obj.Status = *st // the Reconciler writes it when it changed
	return lifecycle.Done(), nil
}
