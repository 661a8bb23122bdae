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

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biossettingssets,verbs=get;list;watch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biossettingssets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biossettings,verbs=create;delete

// BIOSSettingsSetReconciler applies BIOS settings over the selected servers in waves, like
// BIOSVersionSetReconciler: one BIOSSettings per server, made when its wave comes.
type BIOSSettingsSetReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Options  Options
}

// SetupWithManager registers the reconciler.
func (r *BIOSSettingsSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &systemv1alpha1.BIOSSettings{}, indexControllerName, controllerName("BIOSSettingsSet")); err != nil {
		return fmt.Errorf("indexing BIOSSettings by set: %w", err)
	}
	rec := lifecycle.NewReconciler(r.Client, func() *systemv1alpha1.BIOSSettingsSet { return &systemv1alpha1.BIOSSettingsSet{} }, r.handle)
	return ctrl.NewControllerManagedBy(mgr).
		Named("biossettingsset").
		For(&systemv1alpha1.BIOSSettingsSet{}, builder.WithPredicates(lifecycle.Predicate())).
		Owns(&systemv1alpha1.BIOSSettings{}, builder.WithPredicates(lifecycle.Predicate())).
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(enqueueAll(r.Client, &systemv1alpha1.BIOSSettingsSetList{})), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.Concurrency/4, 1)}).
		Complete(rec)
}

func (r *BIOSSettingsSetReconciler) handle(ctx context.Context, p *lifecycle.Pass[*systemv1alpha1.BIOSSettingsSet]) (lifecycle.Result, error) {
	set := p.Obj
	c := p.Client()
	list := &systemv1alpha1.BIOSSettingsList{}
	if err := c.List(ctx, list, client.MatchingFields{indexControllerName: set.Name}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing BIOSSettings: %w", err)
	}
	targets, err := serverTargets(ctx, c, set.Spec.ServerSelector)
	in := setRollout{set: set, targets: targets, rollout: set.Spec.Rollout,
		newChild: func(server string) client.Object {
			return &systemv1alpha1.BIOSSettings{Spec: systemv1alpha1.BIOSSettingsSpec{
				BIOSSettingsTemplate: *set.Spec.BIOSSettingsTemplate.DeepCopy(), ServerRef: &corev1.LocalObjectReference{Name: server}}}
		}}
	for i := range list.Items {
		ch := &list.Items[i]
		if ch.Spec.ServerRef == nil {
			continue
		}
		in.children = append(in.children, setChild{obj: ch, server: ch.Spec.ServerRef.Name, maint: ch.Spec.ServerMaintenanceRef,
			matches: equality.Semantic.DeepEqual(ch.Spec.BIOSSettingsTemplate, set.Spec.BIOSSettingsTemplate)})
	}
	set.Status.ObservedGeneration = set.Generation
	return setPass(ctx, c, r.Recorder, in, err, &set.Status.Conditions, &set.Status.Rollout, func(total, made int32, n setCounts) {
		st := &set.Status
		st.FullyLabeledServers, st.AvailableBIOSSettings = total, made
		st.PendingBIOSSettings, st.InProgressBIOSSettings, st.CompletedBIOSSettings, st.FailedBIOSSettings = n.pending, n.inProgress, n.completed, n.failed
	})
}
