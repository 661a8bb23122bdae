package delivery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/depends"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// maxListedManagedResources is how many applied objects status.managedResources lists: an
// artifact of 10,000 objects would take the VidraResource past the API server's request limit
// with its manifest, and no status could be written. managedResourceCount counts them all; the
// inventory records every one.
const maxListedManagedResources = 1000

// cleanupRetry is how soon a VidraResource whose objects could not be removed tries again.
const cleanupRetry = 10 * time.Second

// VidraResourceReconciler applies one artifact's manifest to its destination cluster with
// server-side apply and keeps it there: objects that left the manifest are pruned, drifted or
// deleted ones restored (at once in event mode, else on the periodic pass), and the finalizer
// removes what was applied.
type VidraResourceReconciler struct {
	client   client.Client // the manager's: cached reads
	reader   client.Reader // uncached: the manifest, which the cache does not hold
	settings *policy.SettingsSource
	clusters *target.ClusterRegistry
	memory   *apply.AppliedMemory
	policy   policy.Policy
	recorder recorder.EventRecorder
	lc       *lifecycle.Reconciler[*infrahubv1alpha1.VidraResource]
	now      func() time.Time
	// healthPoll is the look while an applied object is still progressing.
	healthPoll time.Duration
	// identity decides whom each VidraResource acts as.
	identity *target.Identity
	// trustAdmitted honours AdmittedKubeconfigAnnotation (--delivery-trust-admitted-credentials).
	trustAdmitted bool
	// seals verify what admission judged, and that the operator wrote a sync's VidraResources.
	seals *sealing.Sealer
	// inventories keeps what each VidraResource applied, where and as whom.
	inventories *apply.InventoryStore
}

// claimant is who a VidraResource's kubeconfig Secret is looked up for: the VidraResource, and
// the InfrahubSync that controls it. The controller reference counts on a sealed VidraResource
// (the operator wrote it for the sync, or admission let its writer name the sync) while it
// points at the sync that exists under that name (same UID), and on any while the VidraResource
// is being deleted (its sync may be gone first, or never resealed one written before seals: the
// finalizer must still reach the cluster, and removes only what carries this VidraResource's
// mark). The admitted kubeconfig counts only where admission sealed it.
func (r *VidraResourceReconciler) claimant(ctx context.Context, vr *infrahubv1alpha1.VidraResource) target.Claimant {
	who := target.Claimant{Kind: "VidraResource", Name: vr.Name, Resources: []string{vr.Name}}
	seal := r.seals.View(ctx, "VidraResource", vr)
	if name, _, ok := apply.SyncRefOf(vr); ok && (seal.Level != sealing.Unsealed || !vr.DeletionTimestamp.IsZero()) {
		s := &infrahubv1alpha1.InfrahubSync{}
		err := r.client.Get(ctx, client.ObjectKey{Name: name}, s)
		if (err == nil && apply.OwnedBy(vr, s)) || (apierrors.IsNotFound(err) && !vr.DeletionTimestamp.IsZero()) {
			who.Syncs = []string{name}
		}
	}
	if r.trustAdmitted && seal.Admitted() {
		who.Admitted = strings.TrimSpace(vr.Annotations[infrahubv1alpha1.AdmittedKubeconfigAnnotation])
	}
	return who
}

// unsealedKubeconfig reports a VidraResource that names an admitted kubeconfig admission did
// not seal (nil when it names none, or the annotation is not honoured anyway).
func (r *VidraResourceReconciler) unsealedKubeconfig(ctx context.Context, vr *infrahubv1alpha1.VidraResource) error {
	admitted := strings.TrimSpace(vr.Annotations[infrahubv1alpha1.AdmittedKubeconfigAnnotation])
	if !r.trustAdmitted || admitted == "" {
		return nil
	}
	if v := r.seals.View(ctx, "VidraResource", vr); !v.Admitted() {
		return sealing.UnsealedError(v.Kind, v.Name, fmt.Sprintf("annotation %s names kubeconfig Secret %s", infrahubv1alpha1.AdmittedKubeconfigAnnotation, admitted), v.Why)
	}
	return nil
}

// Reconcile runs one pass under the lifecycle discipline; its periodic look follows the
// resource interval of the current settings (lifecycle.Reconciler.ResyncFunc).
func (r *VidraResourceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.lc.Reconcile(ctx, req)
}

// deployOutcome is what a deploy did, for the report.
type deployOutcome struct {
	err        error
	managed    []infrahubv1alpha1.ManagedResource
	keep       bool // keep the managedResources of the status (nothing was applied)
	progressed bool // something was applied or deleted
	// drift found by a pass that may only observe (not in event mode, before the periodic
	// pass): reported as Stale, restored by the periodic pass due after nextCheck.
	drift     []string
	nextCheck time.Duration
	observed  bool // an observe-only pass: without drift, the status stays as it was
	// applied, created, restored and pruned name what the pass did, for its events.
	applied, created, restored, pruned []string
	// reached: the objects (objectRef.key) the pass applied or may have written.
	reached map[string]bool
	// gone: the objects (objectRef.key) the prune removed, found gone, or found no longer ours.
	gone map[string]bool
	// driftChecked: a Warn pass looked at every object it could; drifted are those it left.
	driftChecked bool
	drifted      []infrahubv1alpha1.DriftedObject
}

// deployPass is one pass over a VidraResource: the plan, then what the deploy step did, for the
// report step.
type deployPass struct {
	*lifecycle.Pass[*infrahubv1alpha1.VidraResource]
	target *target.Target
	// manifestHash is the sha256 of the manifest read for this pass (the cache holds none;
	// the pass holds it only while it plans).
	manifestHash string
	planned      []apply.PlannedObject // nil when the manifest cannot be applied (p.out says why)
	out          deployOutcome
	health       *apply.Health // nil when not computed
	requeue      time.Duration // the next periodic look
	inv          *apply.StoredInventory
	added        []string // inventory entries this pass recorded ahead of its apply
}

func (r *VidraResourceReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*infrahubv1alpha1.VidraResource]) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, &deployPass{Pass: lp, requeue: r.settings.Current(ctx).RequeueResourcesAfter},
		lifecycle.OnDeletion(r.finalize),
		// Before anything is applied, so that whatever gets applied is also removed.
		lifecycle.EnsureFinalizer[*deployPass](manifests.Finalizer),
		r.planStep,
		r.dependStep,
		r.inventoryStep,
		r.deployStep,
		r.healthStep,
		r.report,
	)
}

// planStep decodes the manifest and resolves it against the destination cluster and the policy.
func (r *VidraResourceReconciler) planStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	vr := p.Obj
	manifest, current, err := manifests.Of(ctx, r.reader, vr)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if !current {
		return lifecycle.RequeueAfter(lagRetry, "cache behind the VidraResource"), nil
	}
	p.manifestHash = manifests.Hash(manifest)
	objs, err := manifests.Decode(manifest)
	manifest = "" // the decoded objects are what the pass needs
	if err != nil {
		p.out = deployOutcome{err: lifecycle.Reasonf(infrahubv1alpha1.ReasonInvalidManifest, "invalid manifest, nothing applied: %v", err), keep: true}
		return lifecycle.Continue(), nil
	}
	as, err := r.actAs(ctx, vr)
	if err == nil {
		err = r.unsealedKubeconfig(ctx, vr)
	}
	if err == nil {
		p.target, err = r.clusters.GetAs(ctx, r.claimant(ctx, vr), vr.Spec.Destination.Server, as)
	}
	if err != nil {
		p.out = deployOutcome{err: err, keep: true}
		return lifecycle.Continue(), nil
	}
	planned, err := apply.Plan(p.target, objs, vr.Spec.Destination.Namespace, r.policy)
	if err != nil {
		p.out = deployOutcome{err: err, keep: true}
		return lifecycle.Continue(), nil
	}
	for _, po := range planned {
		if !po.NewKind { // a kind its manifest defines is watched from the pass after its CRD
			_ = p.target.Watch(ctx, po.Ref.GVK) // failure: reads fall back to GETs, logged by watch
		}
	}
	p.planned = planned
	return lifecycle.Continue(), nil
}

// dependStep holds the apply back while a sync named in spec.dependsOn is not ready for it
// (depends.Check), re-checked on every pass: before the inventory step, so that nothing is
// applied, recorded or pruned (a destination moved meanwhile included), and the report says
// which sync it waits on. A dependency's status change brings the next pass (setup's watch).
func (r *VidraResourceReconciler) dependStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	deps := p.Obj.Spec.DependsOn
	if len(deps) == 0 || p.planned == nil || p.out.err != nil {
		return lifecycle.Continue(), nil
	}
	nr, err := depends.Check(ctx, r.client, deps)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if nr != nil {
		// Named, not described: a VidraResource may be a tenant's, and the sync it names,
		// cluster-scoped, is not theirs to read (its message, whether it exists).
		p.out = deployOutcome{err: lifecycle.Reasonf(infrahubv1alpha1.ReasonDependencyNotReady,
			"waiting on InfrahubSync %s; nothing is applied until it exists, is Succeeded and every VidraResource of it is Healthy", nr.Name), keep: true}
		p.requeue = min(p.requeue, dependencyRecheck)
		p.planned = nil // nothing is applied, recorded or pruned this pass
	}
	return lifecycle.Continue(), nil
}

// deployStep applies the manifest in the mode the resource and the settings ask for.
func (r *VidraResourceReconciler) deployStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	if p.planned == nil || p.out.err != nil {
		return lifecycle.Continue(), nil // the report says why nothing is applied
	}
	st := r.settings.Current(ctx)
	events := p.Obj.Spec.Destination.ReconcileOnEvents || st.EventBasedReconcile
	p.out = r.deploy(ctx, p.Obj, p.manifestHash, p.target, p.planned, p.inv, events, st.RequeueResourcesAfter)
	if p.out.nextCheck > 0 {
		p.requeue = p.out.nextCheck
	}
	if err := r.settleInventory(ctx, p); err != nil {
		return lifecycle.Result{}, err
	}
	return lifecycle.Continue(), nil
}

// report writes the status if, and only if, it changed: an unchanged pass writes nothing.
func (r *VidraResourceReconciler) report(_ context.Context, p *deployPass) (lifecycle.Result, error) {
	vr, out, requeue := p.Obj, p.out, p.requeue
	if out.observed && out.err == nil && len(out.drift) == 0 {
		st := vr.Status.DeepCopy()
		reportHealth(st, vr.Generation, p.health)
		r.reportDrift(st, vr, out)
		if !equality.Semantic.DeepEqual(*st, vr.Status) {
			vr.Status = *st // the Reconciler writes it
		}
		return lifecycle.RequeueAfter(requeue, "nothing drifted"), nil
	}
	r.eventsOf(vr, out)
	st := vr.Status.DeepCopy()
	reportHealth(st, vr.Generation, p.health)
	r.reportDrift(st, vr, out)
	rep := lifecycle.Report{LastSuccess: &st.LastSyncTime, LastError: &st.LastError}
	switch {
	case out.err == nil && len(out.drift) > 0:
		st.DeployState = infrahubv1alpha1.StateStale
		lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonDrifted,
			clip(fmt.Sprintf("%s; restored by the periodic pass (reconcileOnEvents is off)", strings.Join(out.drift, ", "))))
	case out.err == nil:
		st.DeployState = infrahubv1alpha1.StateSucceeded
		rep.Succeeded(r.now(), out.progressed)
		msg := fmt.Sprintf("%d objects applied", len(out.managed))
		if len(out.drifted) > 0 {
			msg += fmt.Sprintf("; %d drifted and left as they are (driftPolicy Warn, see status.drift)", len(out.drifted))
		}
		lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionTrue, infrahubv1alpha1.ReasonDeployed, msg)
	case reasonOf(out.err) == infrahubv1alpha1.ReasonDependencyNotReady:
		// Waiting, not failing: Pending, with a Normal event when what it waits on changes.
		st.DeployState = infrahubv1alpha1.StatePending
		if cur := meta.FindStatusCondition(st.Conditions, infrahubv1alpha1.ConditionReady); cur == nil || cur.Message != clip(out.err.Error()) {
			r.recorder.Eventf(vr, nil, "Normal", infrahubv1alpha1.ReasonDependencyNotReady, "Deploy", "%s", clipNote(out.err.Error()))
		}
		lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonDependencyNotReady, clip(out.err.Error()))
	default:
		st.DeployState = infrahubv1alpha1.StateFailed
		if rep.Failed(out.err) {
			r.recorder.Eventf(vr, nil, "Warning", reasonOf(out.err), "Deploy", "%s", clipNote(out.err.Error()))
		}
		lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, reasonOf(out.err), clip(out.err.Error()))
	}
	if !out.keep {
		st.ManagedResources, st.ManagedResourceCount = out.managed, int32(len(out.managed))
		if len(st.ManagedResources) > maxListedManagedResources {
			st.ManagedResources = st.ManagedResources[:maxListedManagedResources]
		}
	}
	st.ObservedGeneration = vr.Generation
	if equality.Semantic.DeepEqual(*st, vr.Status) {
		return lifecycle.RequeueAfter(lifecycle.Jitter(requeue), "unchanged"), nil
	}
	vr.Status = *st // the Reconciler writes it
	return lifecycle.RequeueAfter(lifecycle.Jitter(requeue), "status written"), nil
}

// reportDrift sets status.drift and the Drifted condition from a Warn pass, with a Warning
// event when what drifted changes; under Correct neither is carried (drift is restored).
func (r *VidraResourceReconciler) reportDrift(st *infrahubv1alpha1.VidraResourceStatus, vr *infrahubv1alpha1.VidraResource, out deployOutcome) {
	if driftPolicyOf(vr) != infrahubv1alpha1.DriftPolicyWarn {
		st.Drift = nil
		meta.RemoveStatusCondition(&st.Conditions, infrahubv1alpha1.ConditionDrifted)
		return
	}
	if !out.driftChecked {
		return // nothing was looked at this pass: the last report stands
	}
	drift := slices.Clone(out.drifted)
	slices.SortFunc(drift, func(a, b infrahubv1alpha1.DriftedObject) int {
		return strings.Compare(a.APIVersion+"/"+a.Kind+"/"+a.Namespace+"/"+a.Name, b.APIVersion+"/"+b.Kind+"/"+b.Namespace+"/"+b.Name)
	})
	if len(drift) == 0 {
		st.Drift = nil
		lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionDrifted, metav1.ConditionFalse, infrahubv1alpha1.ReasonNoDrift, "every applied object is as the manifest says")
		return
	}
	var parts []string
	for _, d := range drift {
		name := d.Kind + "/" + d.Name
		if d.Namespace != "" {
			name = d.Kind + "/" + d.Namespace + "/" + d.Name
		}
		parts = append(parts, name+" ("+strings.Join(d.Fields, ", ")+")")
	}
	msg := fmt.Sprintf("%d objects differ from the manifest and were left as they are (driftPolicy Warn): %s", len(drift), strings.Join(parts, "; "))
	if len(drift) > infrahubv1alpha1.MaxDriftedObjects {
		drift = drift[:infrahubv1alpha1.MaxDriftedObjects]
	}
	if !equality.Semantic.DeepEqual(drift, st.Drift) {
		r.recorder.Eventf(vr, nil, "Warning", infrahubv1alpha1.ReasonDriftDetected, "Deploy", "%s", clipNote(msg))
	}
	st.Drift = drift
	lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionDrifted, metav1.ConditionTrue, infrahubv1alpha1.ReasonDriftDetected, clip(msg))
}

// eventsOf records Normal events for what a pass applied and pruned.
func (r *VidraResourceReconciler) eventsOf(vr *infrahubv1alpha1.VidraResource, out deployOutcome) {
	if len(out.applied) > 0 {
		msg := fmt.Sprintf("applied %d objects", len(out.applied))
		if len(out.created) > 0 {
			msg += "; created " + strings.Join(out.created, ", ")
		}
		if len(out.restored) > 0 {
			msg += "; restored " + strings.Join(out.restored, ", ")
		}
		r.recorder.Eventf(vr, nil, "Normal", "Applied", "Apply", "%s", clipNote(msg))
	}
	if len(out.pruned) > 0 {
		r.recorder.Eventf(vr, nil, "Normal", "Pruned", "Prune", "%s", clipNote("pruned "+strings.Join(out.pruned, ", ")))
	}
}

// onObjectEvent turns a watch event on an applied object into a pass of its VidraResource when
// the object is not as we left it: in event mode the pass restores it, otherwise it reports it.
func (r *VidraResourceReconciler) onObjectEvent(ev target.ObjectEvent, enqueue func(name string)) {
	ref := target.ObjectRef{GVK: ev.GVK, Namespace: ev.Obj.GetNamespace(), Name: ev.Obj.GetName()}
	for _, owner := range target.OwnersOf(ev.Obj) {
		if r.memory.Wants(owner, ev.Cluster, ref.Key(), target.DriftToken(ev.Obj), ev.Deleted) {
			enqueue(owner)
		}
	}
}

func managedLess(a, b infrahubv1alpha1.ManagedResource) bool {
	ka := a.APIVersion + "/" + a.Kind + "/" + a.Namespace + "/" + a.Name
	kb := b.APIVersion + "/" + b.Kind + "/" + b.Namespace + "/" + b.Name
	return ka < kb
}

// clipNote keeps an event's note under the 1 KiB events.k8s.io allows: a longer one is
// rejected, and the event lost.
func clipNote(s string) string {
	const limit = 1000
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}

// clip keeps condition messages readable (and under the API's limits).
func clip(s string) string {
	const limit = 2000
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}

// actAs is the user a VidraResource's reads, applies and prunes act as (identity.actAs).
func (r *VidraResourceReconciler) actAs(ctx context.Context, vr *infrahubv1alpha1.VidraResource) (string, error) {
	return r.identity.ActAs(ctx, vr.Spec.Destination, r.seals.View(ctx, "VidraResource", vr))
}

// reportHealth sets status.health and the Healthy condition from h (nil: not computed this pass).
func reportHealth(st *infrahubv1alpha1.VidraResourceStatus, generation int64, h *apply.Health) {
	if h == nil {
		return
	}
	st.Health = string(h.Status)
	if h.Status == status.CurrentStatus {
		lifecycle.SetCondition(&st.Conditions, generation, infrahubv1alpha1.ConditionHealthy, metav1.ConditionTrue, string(status.CurrentStatus), "every applied object is Current")
		return
	}
	lifecycle.SetCondition(&st.Conditions, generation, infrahubv1alpha1.ConditionHealthy, metav1.ConditionFalse, string(h.Status), clip(strings.Join(h.NotReady, "; ")))
}
