package firmware

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversionsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversionsets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversions,verbs=create;delete
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch

// indexControllerName indexes per-server objects by the name of the *Set that controls them.
const indexControllerName = "metadata.controller.name"

func controllerName(kind string) client.IndexerFunc {
	return func(obj client.Object) []string {
		if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == kind {
			return []string{ref.Name}
		}
		return nil
	}
}

// forEachItem calls fn on every item of a list.
func forEachItem(l client.ObjectList, fn func(client.Object)) error {
	items, err := apimeta.ExtractList(l)
	if err != nil {
		return err
	}
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			fn(o)
		}
	}
	return nil
}

// BIOSVersionSetReconciler rolls a BIOS version out over the selected servers in waves
// (runSet, planRollout). The per-server BIOSVersions and their records are the rollout's
// bookkeeping: nothing of it lives in status, which is rebuilt every pass.
type BIOSVersionSetReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Options  Options
}

// SetupWithManager registers the reconciler.
func (r *BIOSVersionSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &systemv1alpha1.BIOSVersion{}, indexControllerName, controllerName("BIOSVersionSet")); err != nil {
		return fmt.Errorf("indexing BIOSVersions by set: %w", err)
	}
	rec := lifecycle.NewReconciler(r.Client, func() *systemv1alpha1.BIOSVersionSet { return &systemv1alpha1.BIOSVersionSet{} }, r.handle)
	return ctrl.NewControllerManagedBy(mgr).
		Named("biosversionset").
		For(&systemv1alpha1.BIOSVersionSet{}, builder.WithPredicates(lifecycle.Predicate())).
		// A BIOSVersion's record moving on (its annotation) is the rollout's progress.
		Owns(&systemv1alpha1.BIOSVersion{}, builder.WithPredicates(lifecycle.Predicate())).
		// Selection (labels), claims and maintenance (the order, handing back) are the servers'.
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(enqueueAll(r.Client, &systemv1alpha1.BIOSVersionSetList{})), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.Concurrency/4, 1)}).
		Complete(rec)
}

func (r *BIOSVersionSetReconciler) handle(ctx context.Context, p *lifecycle.Pass[*systemv1alpha1.BIOSVersionSet]) (lifecycle.Result, error) {
	set := p.Obj
	c := p.Client()
	list := &systemv1alpha1.BIOSVersionList{}
	if err := c.List(ctx, list, client.MatchingFields{indexControllerName: set.Name}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing BIOSVersions: %w", err)
	}
	targets, err := serverTargets(ctx, c, set.Spec.ServerSelector)
	in := setRollout{set: set, targets: targets, rollout: set.Spec.Rollout,
		newChild: func(server string) client.Object {
			return &systemv1alpha1.BIOSVersion{Spec: systemv1alpha1.BIOSVersionSpec{
				BIOSVersionTemplate: *set.Spec.BIOSVersionTemplate.DeepCopy(), ServerRef: &corev1.LocalObjectReference{Name: server}}}
		}}
	for i := range list.Items {
		ch := &list.Items[i]
		if ch.Spec.ServerRef == nil {
			continue
		}
		in.children = append(in.children, setChild{obj: ch, server: ch.Spec.ServerRef.Name, maint: ch.Spec.ServerMaintenanceRef,
			matches: equality.Semantic.DeepEqual(ch.Spec.BIOSVersionTemplate, set.Spec.BIOSVersionTemplate)})
	}
	set.Status.ObservedGeneration = set.Generation
	return setPass(ctx, c, r.Recorder, in, err, &set.Status.Conditions, &set.Status.Rollout, func(total, made int32, n setCounts) {
		st := &set.Status
		st.FullyLabeledServers, st.AvailableBIOSVersion = total, made
		st.PendingBIOSVersion, st.InProgressBIOSVersion, st.CompletedBIOSVersion, st.FailedBIOSVersion = n.pending, n.inProgress, n.completed, n.failed
	})
}
