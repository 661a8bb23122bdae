package firmware

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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

// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcsettingssets,verbs=get;list;watch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcsettingssets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=baseboard.metal.ironcore.dev,resources=bmcsettings,verbs=create;delete

// BMCSettingsSetReconciler applies BMC settings to the selected BMCs in waves: one BMCSettings
// per BMC, made when its wave comes, in name order.
type BMCSettingsSetReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Options  Options
}

// SetupWithManager registers the reconciler.
func (r *BMCSettingsSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &baseboardv1alpha1.BMCSettings{}, indexControllerName, controllerName("BMCSettingsSet")); err != nil {
		return fmt.Errorf("indexing BMCSettings by set: %w", err)
	}
	rec := lifecycle.NewReconciler(r.Client, func() *baseboardv1alpha1.BMCSettingsSet { return &baseboardv1alpha1.BMCSettingsSet{} }, r.handle)
	return ctrl.NewControllerManagedBy(mgr).
		Named("bmcsettingsset").
		For(&baseboardv1alpha1.BMCSettingsSet{}, builder.WithPredicates(lifecycle.Predicate())).
		Owns(&baseboardv1alpha1.BMCSettings{}, builder.WithPredicates(lifecycle.Predicate())).
		// Selection is the BMCs' labels.
		Watches(&metalv1alpha1.BMC{}, handler.EnqueueRequestsFromMapFunc(enqueueAll(r.Client, &baseboardv1alpha1.BMCSettingsSetList{})), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.Concurrency/4, 1)}).
		Complete(rec)
}

func (r *BMCSettingsSetReconciler) handle(ctx context.Context, p *lifecycle.Pass[*baseboardv1alpha1.BMCSettingsSet]) (lifecycle.Result, error) {
	set := p.Obj
	c := p.Client()
	list := &baseboardv1alpha1.BMCSettingsList{}
	if err := c.List(ctx, list, client.MatchingFields{indexControllerName: set.Name}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing BMCSettings: %w", err)
	}
	targets, err := bmcTargets(ctx, c, set.Spec.BMCSelector)
	in := setRollout{set: set, targets: targets, rollout: set.Spec.Rollout,
		newChild: func(name string) client.Object {
			return &baseboardv1alpha1.BMCSettings{Spec: baseboardv1alpha1.BMCSettingsSpec{
				BMCSettingsTemplate: *set.Spec.BMCSettingsTemplate.DeepCopy(), BMCRef: &corev1.LocalObjectReference{Name: name}}}
		}}
	for i := range list.Items {
		ch := &list.Items[i]
		if ch.Spec.BMCRef == nil {
			continue
		}
		in.children = append(in.children, setChild{obj: ch, server: ch.Spec.BMCRef.Name,
			matches: equality.Semantic.DeepEqual(ch.Spec.BMCSettingsTemplate, set.Spec.BMCSettingsTemplate)})
	}
	set.Status.ObservedGeneration = set.Generation
	return setPass(ctx, c, r.Recorder, in, err, &set.Status.Conditions, &set.Status.Rollout, func(total, made int32, n setCounts) {
		st := &set.Status
		st.FullyLabeledBMCs, st.AvailableBMCSettings = total, made
		st.PendingBMCSettings, st.InProgressBMCSettings, st.CompletedBMCSettings, st.FailedBMCSettings = n.pending, n.inProgress, n.completed, n.failed
	})
}
