// Package bootconfig is the ServerBootConfiguration controller, the built-in boot provider's
// bookkeeping: Pending until a provider reports, Ready or Error as the built-in provider finds
// the boot's input, or Pending only when another provider (the IronCore boot-operator) reports.
//
// It never creates or deletes a ServerBootConfiguration (the claim or maintenance that owns it
// does, through bootrequest), never changes its spec, and never acts on a BMC. It imports neither
// the assembly nor another controller (hack/layers.sh).
package bootconfig

import (
	"context"

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
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bootrequest"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverbootconfigurations,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverbootconfigurations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch

// Reconciler is the built-in boot provider's bookkeeping: a boot configuration is Pending until
// a provider marks it Ready or Error. The built-in provider marks it Ready when it has an image
// and its ignition Secret (if it names one) exists, Error with the reason otherwise, and looks
// again when the Secret appears. With External set (the IronCore
// boot-operator consumes the same objects and reports on them), it only marks new ones Pending.
type Reconciler struct {
	// Shards, set, limits the reconciler to the objects of the shards this replica holds.
	Shards      *shard.Set
	Client      client.Client
	Recorder    events.EventRecorder
	External    bool
	Concurrency int
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.ServerBootConfiguration { return &metalv1alpha1.ServerBootConfiguration{} }, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("serverbootconfiguration").
		For(&metalv1alpha1.ServerBootConfiguration{}, builder.WithPredicates(predicate.Or(lifecycle.Predicate(),
			lifecycle.StatusWiped(func(o client.Object) bool { return o.(*metalv1alpha1.ServerBootConfiguration).Status.State == "" })))).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Concurrency, 1)})
	if !r.External {
		b = b.Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(index.Naming(r.Client, &metalv1alpha1.ServerBootConfigurationList{}, index.IgnitionSecret)))
	}
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.ServerBootConfigurationList{} },
		shardkey.ForServerRef(r.Client, func(c *metalv1alpha1.ServerBootConfiguration) string { return c.Spec.ServerRef.Name })).Complete(rec)
}

type bootConfigPass = lifecycle.Pass[*metalv1alpha1.ServerBootConfiguration]

func (r *Reconciler) handle(ctx context.Context, p *bootConfigPass) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, p,
		// Nothing to undo: a deleted configuration goes with its owner's finalizer.
		lifecycle.OnDeletion(func(context.Context, *bootConfigPass) (lifecycle.Result, error) { return lifecycle.Done(), nil }),
		lifecycle.DoneIf[*bootConfigPass](serverstate.Ignored),
		r.provide,
	)
}

// provide reports the configuration's state: the built-in provider's verdict, or Pending for
// an external provider until it reports.
func (r *Reconciler) provide(ctx context.Context, p *bootConfigPass) (lifecycle.Result, error) {
	sbc := p.Obj
	st := sbc.Status.DeepCopy()
	if r.External {
		if st.State != "" {
			return lifecycle.Done(), nil // the provider's to report
		}
		st.State = metalv1alpha1.ServerBootConfigurationStatePending
		lifecycle.SetCondition(&st.Conditions, sbc.Generation, metalv1alpha1.ConditionReady, metav1.ConditionFalse, metalv1alpha1.ReasonWaitingForBootProvider, "waiting for the boot provider")
	} else {
		v, err := r.evaluate(ctx, p)
		if err != nil {
			return lifecycle.Result{}, err
		}
		st.State = v.state
		lifecycle.SetCondition(&st.Conditions, sbc.Generation, metalv1alpha1.ConditionReady, v.ready, v.reason, v.msg)
	}
	if equality.Semantic.DeepEqual(*st, sbc.Status) {
		return lifecycle.Done(), nil
	}
	// Events for what someone must act on (Error) and for its recovery; a plain Pending -> Ready,
	// once per claim, would only add an API write per claim.
	if st.State != sbc.Status.State && (st.State == metalv1alpha1.ServerBootConfigurationStateError || sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateError) {
		typ := corev1.EventTypeNormal
		if st.State == metalv1alpha1.ServerBootConfigurationStateError {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(sbc, nil, typ, string(st.State), "Provide", "%s", apimeta.FindStatusCondition(st.Conditions, metalv1alpha1.ConditionReady).Message)
	}
	sbc.Status = *st // the Reconciler writes it
	return lifecycle.Done(), nil
}

// bootVerdict is the built-in provider's verdict on a boot configuration: its state and Ready.
type bootVerdict struct {
	state  metalv1alpha1.ServerBootConfigurationState
	ready  metav1.ConditionStatus
	reason string
	msg    string
}

// evaluate is the built-in provider's verdict: Ready once the user's input is complete.
func (r *Reconciler) evaluate(ctx context.Context, p *bootConfigPass) (bootVerdict, error) {
	sbc := p.Obj
	bad, err := bootrequest.InputProblem(ctx, p.Client(), sbc.Namespace, sbc.Spec.Image, sbc.Spec.IgnitionSecretRef)
	switch {
	case err != nil:
		return bootVerdict{}, err
	case bad != nil:
		return bootVerdict{metalv1alpha1.ServerBootConfigurationStateError, metav1.ConditionFalse, bad.Reason, bad.Msg}, nil
	}
	return bootVerdict{metalv1alpha1.ServerBootConfigurationStateReady, metav1.ConditionTrue, metalv1alpha1.ReasonBootConfigurationReady,
		"image " + sbc.Spec.Image + " ready to boot"}, nil
}
