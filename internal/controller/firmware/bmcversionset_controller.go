package firmware

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversionsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversionsets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcversions,verbs=create;delete

// BMCVersionSetReconciler upgrades the selected BMCs in waves, like BIOSVersionSetReconciler:
// one BMCVersion per BMC, made when its wave comes, in name order.
type BMCVersionSetReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Options  Options
}

// SetupWithManager registers the reconciler.
func (r *BMCVersionSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &baseboardv1alpha1.BMCVersion{}, indexControllerName, controllerName("BMCVersionSet")); err != nil {
		return fmt.Errorf("indexing BMCVersions by set: %w", err)
	}
	rec := lifecycle.NewReconciler(r.Client, func() *baseboardv1alpha1.BMCVersionSet { return &baseboardv1alpha1.BMCVersionSet{} }, r.handle)
	return ctrl.NewControllerManagedBy(mgr).
		Named("bmcversionset").
		For(&baseboardv1alpha1.BMCVersionSet{}, builder.WithPredicates(lifecycle.Predicate())).
		Owns(&baseboardv1alpha1.BMCVersion{}, builder.WithPredicates(lifecycle.Predicate())).
		// Selection is the BMCs' labels.
		Watches(&metalv1alpha1.BMC{}, handler.EnqueueRequestsFromMapFunc(enqueueAll(r.Client, &baseboardv1alpha1.BMCVersionSetList{})), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.Concurrency/4, 1)}).
		Complete(rec)
}

func (r *BMCVersionSetReconciler) handle(ctx context.Context, p *lifecycle.Pass[*baseboardv1alpha1.BMCVersionSet]) (lifecycle.Result, error) {
	set := p.Obj
	c := p.Client()
	list := &baseboardv1alpha1.BMCVersionList{}
	if err := c.List(ctx, list, client.MatchingFields{indexControllerName: set.Name}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing BMCVersions: %w", err)
	}
	targets, err := bmcTargets(ctx, c, set.Spec.BMCSelector)
	in := setRollout{set: set, targets: targets, rollout: set.Spec.Rollout,
		newChild: func(name string) client.Object {
			return &baseboardv1alpha1.BMCVersion{Spec: baseboardv1alpha1.BMCVersionSpec{
				BMCVersionTemplate: *set.Spec.BMCVersionTemplate.DeepCopy(), BMCRef: &corev1.LocalObjectReference{Name: name}}}
		}}
	for i := range list.Items {
		ch := &list.Items[i]
		if ch.Spec.BMCRef == nil {
			continue
		}
		in.children = append(in.children, setChild{obj: ch, server: ch.Spec.BMCRef.Name,
			matches: equality.Semantic.DeepEqual(ch.Spec.BMCVersionTemplate, set.Spec.BMCVersionTemplate)})
	}
	set.Status.ObservedGeneration = set.Generation
	return setPass(ctx, c, r.Recorder, in, err, &set.Status.Conditions, &set.Status.Rollout, func(total, made int32, n setCounts) {
		st := &set.Status
		st.FullyLabeledBMCs, st.AvailableBMCVersion = total, made
		st.PendingBMCVersion, st.InProgressBMCVersion, st.CompletedBMCVersion, st.FailedBMCVersion = n.pending, n.inProgress, n.completed, n.failed
	})
}

// bmcTargets are the BMCs selector selects, in name order.
func bmcTargets(ctx context.Context, c client.Reader, selector metav1.LabelSelector) (map[string]setTarget, error) {
	sel, err := metav1.LabelSelectorAsSelector(&selector)
	if err != nil {
		return nil, lifecycle.WithReason("InvalidSelector", err)
	}
	bmcs := &metalv1alpha1.BMCList{}
	if err := c.List(ctx, bmcs, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing BMCs: %w", err)
	}
	out := map[string]setTarget{}
	for i := range bmcs.Items {
		out[bmcs.Items[i].Name] = setTarget{name: bmcs.Items[i].Name}
	}
	return out, nil
}
