package delivery

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// cleanupRetry is how soon a VidraResource whose objects could not be removed tries again.
const cleanupRetry = 10 * time.Second

// VidraResourceReconciler applies one artifact's manifest to its destination cluster with
// server-side apply and keeps it there: objects that left the manifest are pruned, drifted or
// deleted ones restored (at once in event mode, else on the periodic pass), and the finalizer
// removes what was applied.
type VidraResourceReconciler struct {
	client   client.Client // the manager's: cached reads
	settings *settingsSource
	clusters *clusterRegistry
	memory   *appliedMemory
	policy   Policy
	recorder recorder.EventRecorder
	lc       *lifecycle.Reconciler[*infrahubv1alpha1.VidraResource]
	now      func() time.Time
}

// Reconcile runs one pass under the lifecycle discipline. A pass whose only write was its
// status gets no watch event (the predicate drops status churn), so the periodic look is
// scheduled here whatever the pass returned.
func (r *VidraResourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.lc.Reconcile(ctx, req)
	if err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	vr := &infrahubv1alpha1.VidraResource{}
	if r.client.Get(ctx, req.NamespacedName, vr) == nil && vr.DeletionTimestamp.IsZero() {
		res.RequeueAfter = jitter(r.settings.Current(ctx).RequeueResourcesAfter)
	}
	return res, nil
}

// deployOutcome is what a deploy did, for the report.
type deployOutcome struct {
	err        error
	managed    []infrahubv1alpha1.ManagedResource
	keep       bool // keep the managedResources of the status (nothing was applied)
	progressed bool // something was applied or deleted
}

func (r *VidraResourceReconciler) handle(ctx context.Context, p *lifecycle.Pass[*infrahubv1alpha1.VidraResource]) (lifecycle.Result, error) {
	vr := p.Obj
	if !vr.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, p)
	}
	if !controllerutil.ContainsFinalizer(vr, finalizer) {
		// Before anything is applied, so that whatever gets applied is also removed.
		if err := lifecycle.PatchMetadata(ctx, p.Client(), vr, func(o client.Object) { controllerutil.AddFinalizer(o, finalizer) }); err != nil {
			return lifecycle.Result{}, err
		}
		return lifecycle.Wrote("finalizer added"), nil
	}
	st := r.settings.Current(ctx)
	events := vr.Spec.Destination.ReconcileOnEvents || st.EventBasedReconcile
	r.memory.setEvents(vr.Name, vr.UID, events)
	out := r.deploy(ctx, vr, events)
	return r.report(ctx, p, out, st.RequeueResourcesAfter)
}

// deploy applies the manifest and prunes what left it. It never writes the VidraResource.
func (r *VidraResourceReconciler) deploy(ctx context.Context, vr *infrahubv1alpha1.VidraResource, events bool) deployOutcome {
	log := logf.FromContext(ctx)
	objs, err := decodeManifest(vr.Spec.Manifest)
	if err != nil {
		return deployOutcome{err: reasonf(ReasonInvalidManifest, "invalid manifest, nothing applied: %v", err), keep: true}
	}
	t, err := r.clusters.get(ctx, vr.Spec.Destination.Server)
	if err != nil {
		return deployOutcome{err: err, keep: true}
	}
	planned, err := plan(t, objs, vr.Spec.Destination.Namespace, r.policy)
	if err != nil {
		return deployOutcome{err: err, keep: true}
	}
	for _, po := range planned {
		_ = t.watch(ctx, po.ref.GVK) // failure: reads fall back to GETs, logged by watch
	}

	hash := manifestHash(vr.Spec.Manifest)
	requested := vr.Annotations[infrahubv1alpha1.RequestedAtAnnotation]
	mem := r.memory.get(vr.Name, vr.UID)
	fresh := mem == nil || mem.manifestHash != hash || mem.target != t.id() || mem.requestedAt != requested
	next := &vrMemory{uid: vr.UID, manifestHash: hash, target: t.id(), requestedAt: requested, tokens: map[string]string{}, events: events}

	var (
		out     deployOutcome
		errs    []error
		desired = map[string]bool{}
	)
	for _, po := range planned {
		desired[po.ref.key()] = true
		live, err := t.observe(ctx, po.ref.GVK, client.ObjectKey{Namespace: po.ref.Namespace, Name: po.ref.Name})
		if err != nil {
			errs = append(errs, reasonf(ReasonClusterUnavailable, "reading %s: %v", po.ref, err))
			continue
		}
		if live != nil && !ownedBy(live, vr.Name) {
			if other := r.liveOwner(ctx, live, vr.Name); other != "" {
				errs = append(errs, reasonf(ReasonOwnershipConflict, "%s is managed by VidraResource %s; not applied", po.ref, other))
				continue
			}
		}
		if !fresh && live != nil && mem.tokens[po.ref.key()] == driftToken(live) {
			next.tokens[po.ref.key()] = mem.tokens[po.ref.key()]
			out.managed = append(out.managed, toManaged(po.ref))
			continue
		}
		token, err := applyObject(ctx, t, po, vr.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if live == nil {
			log.Info("created", "object", po.ref.String())
		} else if !fresh {
			log.Info("restored drifted object", "object", po.ref.String())
		}
		next.tokens[po.ref.key()] = token
		out.managed = append(out.managed, toManaged(po.ref))
		out.progressed = true
	}

	// Prune: what the last report listed, what our watches know we own, minus the manifest.
	candidates := append(managedRefs(vr.Status.ManagedResources), t.ownedObjects(ctx, vr.Name)...)
	pruned := map[string]bool{}
	for _, ref := range candidates {
		if desired[ref.key()] || pruned[ref.key()] {
			continue
		}
		pruned[ref.key()] = true
		deleted, err := deleteOwned(ctx, t, ref, vr.Name)
		if err != nil {
			errs = append(errs, withReason(ReasonPruneFailed, err))
			out.managed = append(out.managed, toManaged(ref)) // still there, still ours
			continue
		}
		if deleted {
			log.Info("pruned object that left the manifest", "object", ref.String())
			out.progressed = true
		}
	}
	r.memory.put(vr.Name, next)
	sort.Slice(out.managed, func(i, j int) bool { return managedLess(out.managed[i], out.managed[j]) })
	out.err = errors.Join(errs...)
	if len(errs) > 0 {
		out.err = withReason(reasonOf(errs[0]), out.err)
	}
	return out
}

// liveOwner returns the VidraResource that owns an object we are about to apply, if it still
// exists; "" means the object is free to take (unmarked, or its owner is gone).
func (r *VidraResourceReconciler) liveOwner(ctx context.Context, live metav1.Object, self string) string {
	for _, o := range ownersOf(live) {
		if o == self {
			continue
		}
		if err := r.client.Get(ctx, client.ObjectKey{Name: o}, &infrahubv1alpha1.VidraResource{}); err == nil {
			return o
		}
	}
	return ""
}

// finalize removes what the VidraResource applied, then its finalizer.
func (r *VidraResourceReconciler) finalize(ctx context.Context, p *lifecycle.Pass[*infrahubv1alpha1.VidraResource]) (lifecycle.Result, error) {
	vr := p.Obj
	if !controllerutil.ContainsFinalizer(vr, finalizer) {
		r.memory.forget(vr.Name)
		return lifecycle.Done(), nil
	}
	r.memory.setEvents(vr.Name, vr.UID, false) // our own deletes must not bring passes
	if err := r.cleanup(ctx, vr); err != nil {
		logf.FromContext(ctx).Info("cannot remove applied objects yet", "error", err.Error())
		res, werr := r.report(ctx, p, deployOutcome{err: withReason(ReasonCleanupFailed, err), keep: true}, cleanupRetry)
		if werr != nil {
			return res, werr
		}
		return lifecycle.RequeueAfter(cleanupRetry, "cleanup failed"), nil
	}
	if err := lifecycle.PatchMetadata(ctx, p.Client(), vr, func(o client.Object) { controllerutil.RemoveFinalizer(o, finalizer) }); err != nil {
		return lifecycle.Result{}, err
	}
	r.memory.forget(vr.Name)
	return lifecycle.Wrote("finalizer removed"), nil
}

// cleanup deletes every object marked as the VidraResource's: those its status lists, those
// its manifest names, and those the watches know.
func (r *VidraResourceReconciler) cleanup(ctx context.Context, vr *infrahubv1alpha1.VidraResource) error {
	t, err := r.clusters.get(ctx, vr.Spec.Destination.Server)
	if err != nil {
		return fmt.Errorf("reaching the destination cluster (remove the finalizer %s by hand to leave the objects behind): %w", finalizer, err)
	}
	refs := managedRefs(vr.Status.ManagedResources)
	if objs, err := decodeManifest(vr.Spec.Manifest); err == nil {
		if planned, err := plan(t, objs, vr.Spec.Destination.Namespace, Policy{AllowedKinds: []string{"*"}}); err == nil {
			for _, po := range planned {
				refs = append(refs, po.ref)
			}
		}
	}
	refs = append(refs, t.ownedObjects(ctx, vr.Name)...)
	done := map[string]bool{}
	var errs []error
	for _, ref := range refs {
		if done[ref.key()] {
			continue
		}
		done[ref.key()] = true
		if _, err := deleteOwned(ctx, t, ref, vr.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// report writes the status if, and only if, it changed: an unchanged pass writes nothing.
func (r *VidraResourceReconciler) report(ctx context.Context, p *lifecycle.Pass[*infrahubv1alpha1.VidraResource], out deployOutcome, requeue time.Duration) (lifecycle.Result, error) {
	vr := p.Obj
	st := vr.Status.DeepCopy()
	rep := lifecycle.Report{LastSuccess: &st.LastSyncTime, LastError: &st.LastError}
	if out.err == nil {
		st.DeployState = infrahubv1alpha1.StateSucceeded
		rep.Succeeded(r.now(), out.progressed)
		lifecycle.SetCondition(&st.Conditions, vr.Generation, ConditionReady, metav1.ConditionTrue, ReasonDeployed,
			fmt.Sprintf("%d objects applied", len(out.managed)))
	} else {
		st.DeployState = infrahubv1alpha1.StateFailed
		if rep.Failed(out.err) {
			r.recorder.Eventf(vr, nil, "Warning", reasonOf(out.err), "Deploy", "%s", clip(out.err.Error()))
		}
		lifecycle.SetCondition(&st.Conditions, vr.Generation, ConditionReady, metav1.ConditionFalse, reasonOf(out.err), clip(out.err.Error()))
	}
	if !out.keep {
		st.ManagedResources = out.managed
	}
	st.ManagedResourceCount = int32(len(st.ManagedResources))
	st.ObservedGeneration = vr.Generation
	if equality.Semantic.DeepEqual(*st, vr.Status) {
		return lifecycle.RequeueAfter(jitter(requeue), "unchanged"), nil
	}
	vr.Status = *st
	if err := p.Client().Status().Update(ctx, vr); err != nil {
		return lifecycle.Result{}, fmt.Errorf("updating status of VidraResource %s: %w", vr.Name, err)
	}
	return lifecycle.RequeueAfter(jitter(requeue), "status written"), nil
}

// onObjectEvent turns a watch event on an applied object into a pass of its VidraResource, when
// that one restores on events and the object is not as we left it.
func (r *VidraResourceReconciler) onObjectEvent(ev objectEvent, enqueue func(name string)) {
	owners := ownersOf(ev.obj)
	if len(owners) != 1 {
		return
	}
	ref := objectRef{GVK: ev.gvk, Namespace: ev.obj.GetNamespace(), Name: ev.obj.GetName()}
	if r.memory.wants(owners[0], ev.cluster, ref.key(), driftToken(ev.obj), ev.deleted) {
		enqueue(owners[0])
	}
}

func managedLess(a, b infrahubv1alpha1.ManagedResource) bool {
	ka := a.APIVersion + "/" + a.Kind + "/" + a.Namespace + "/" + a.Name
	kb := b.APIVersion + "/" + b.Kind + "/" + b.Namespace + "/" + b.Name
	return ka < kb
}

// clip keeps condition messages and events readable (and under the API's limits).
func clip(s string) string {
	const limit = 2000
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}
