package rollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// SetKind is what differs between the *Set kinds: their types, their targets and their status.
type SetKind[S client.Object] struct {
	// kind is the set's kind (its children's controller), name the controller's.
	kind, name string
	newSet     func() S
	setList    client.ObjectList
	// child is the per-target kind, children lists it; target is the kind selected (Server or
	// BMC), whose changes (labels, claims, maintenance) concern every set.
	child    client.Object
	children func() client.ObjectList
	target   client.Object
	// plan reads one pass's input: the targets selected (an error there is reported), the
	// set's children as the rollout sees them, how to make one.
	plan func(ctx context.Context, c client.Reader, set S, children client.ObjectList) (setRollout, error)
	// status gives the set's status fields the pass reports into.
	status func(set S) setStatus
}

// setStatus points into a *Set's status.
type setStatus struct {
	observed   *int64
	conditions *[]metav1.Condition
	rollout    *systemv1alpha1.RolloutStatus
	counts     func(total, made int32, n setCounts)
}

// SetReconciler rolls a *Set out over its targets in waves (runSet, planRollout): one object per
// target, made when its wave comes. The objects and their records are the rollout's bookkeeping:
// nothing of it lives in status, which is rebuilt every pass.
type SetReconciler[S client.Object] struct {
	Client   client.Client
	Recorder events.EventRecorder
	Options  work.Options
	Kind     SetKind[S]
}

// SetupWithManager registers the reconciler.
func (r *SetReconciler[S]) SetupWithManager(mgr ctrl.Manager) error {
	k := r.Kind
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), k.child, indexControllerName, controllerName(k.kind)); err != nil {
		return fmt.Errorf("indexing %ss by set: %w", k.kind, err)
	}
	rec := lifecycle.NewReconciler(r.Client, k.newSet, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named(k.name).
		For(k.newSet(), builder.WithPredicates(lifecycle.Predicate())).
		// A child's record moving on (its annotation) is the rollout's progress.
		Owns(k.child, builder.WithPredicates(lifecycle.Predicate())).
		Watches(k.target, handler.EnqueueRequestsFromMapFunc(enqueueAll(r.Client, k.setList)), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.Concurrency/4, 1)})
	return shard.Gate(r.Options.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return k.setList.DeepCopyObject().(client.ObjectList) }, func(_ context.Context, s S) string { return shard.KeyObject(s) }).Complete(rec)
}

func (r *SetReconciler[S]) handle(ctx context.Context, p *lifecycle.Pass[S]) (lifecycle.Result, error) {
	set, c := p.Obj, p.Client()
	if res, err := lifecycle.EnsureFinalizer[*lifecycle.Pass[S]](work.Finalizer)(ctx, p); err != nil || !res.IsContinue() {
		return res, err
	}
	list := r.Kind.children()
	if err := c.List(ctx, list, client.MatchingFields{indexControllerName: set.GetName()}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing the objects of %s: %w", set.GetName(), err)
	}
	if !set.GetDeletionTimestamp().IsZero() {
		return r.stop(ctx, p, list)
	}
	in, err := r.Kind.plan(ctx, c, set, list)
	in.set = set
	st := r.Kind.status(set)
	*st.observed = set.GetGeneration()
	return setPass(ctx, c, r.Recorder, in, err, st.conditions, st.rollout, st.counts)
}

// stop ends a deleted set's rollout: no wave starts; its objects are deleted, each waiting (its
// own finalizer) until nothing is under way on its box; the set goes once they are all gone, so
// a deleted set never leaves a flash half done nor a child to be made again.
func (r *SetReconciler[S]) stop(ctx context.Context, p *lifecycle.Pass[S], list client.ObjectList) (lifecycle.Result, error) {
	set, c := p.Obj, p.Client()
	items, err := apimeta.ExtractList(list)
	if err != nil {
		return lifecycle.Result{}, fmt.Errorf("reading the objects of %s: %w", set.GetName(), err)
	}
	for _, it := range items {
		o := it.(client.Object)
		if o.GetDeletionTimestamp().IsZero() {
			if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				return lifecycle.Result{}, fmt.Errorf("deleting %s: %w", o.GetName(), err)
			}
		}
	}
	if len(items) > 0 {
		return lifecycle.Done(), nil // their deletion (Owns) brings the next pass
	}
	if !controllerutil.ContainsFinalizer(set, work.Finalizer) {
		return lifecycle.Done(), nil
	}
	r.Recorder.Eventf(set, nil, corev1.EventTypeNormal, "RolloutStopped", "Delete", "the rollout is stopped and none of its objects is left")
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, c, set, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, work.Finalizer)
	})
}
