package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
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
	settings *settingsSource
	clusters *clusterRegistry
	memory   *appliedMemory
	policy   Policy
	recorder recorder.EventRecorder
	lc       *lifecycle.Reconciler[*infrahubv1alpha1.VidraResource]
	now      func() time.Time
	// healthPoll is the look while an applied object is still progressing.
	healthPoll time.Duration
	// identity decides whom each VidraResource acts as.
	identity *identity
	// trustAdmitted honours AdmittedKubeconfigAnnotation (--delivery-trust-admitted-credentials).
	trustAdmitted bool
	// seals verify what admission judged, and that the operator wrote a sync's VidraResources.
	seals *sealer
	// inventories keeps what each VidraResource applied, where and as whom.
	inventories *inventoryStore
}

// claimant is who a VidraResource's kubeconfig Secret is looked up for: the VidraResource, and
// the InfrahubSync that controls it. The controller reference counts on a sealed VidraResource
// (the operator wrote it for the sync, or admission let its writer name the sync) while it
// points at the sync that exists under that name (same UID), and on any while the VidraResource
// is being deleted (its sync may be gone first, or never resealed one written before seals: the
// finalizer must still reach the cluster, and removes only what carries this VidraResource's
// mark). The admitted kubeconfig counts only where admission sealed it.
func (r *VidraResourceReconciler) claimant(ctx context.Context, vr *infrahubv1alpha1.VidraResource) claimant {
	who := claimant{kind: "VidraResource", name: vr.Name, resources: []string{vr.Name}}
	seal := r.seals.view(ctx, "VidraResource", vr)
	if name, _, ok := SyncRefOf(vr); ok && (seal.level != unsealed || !vr.DeletionTimestamp.IsZero()) {
		s := &infrahubv1alpha1.InfrahubSync{}
		err := r.client.Get(ctx, client.ObjectKey{Name: name}, s)
		if (err == nil && OwnedBy(vr, s)) || (apierrors.IsNotFound(err) && !vr.DeletionTimestamp.IsZero()) {
			who.syncs = []string{name}
		}
	}
	if r.trustAdmitted && seal.admitted() {
		who.admitted = strings.TrimSpace(vr.Annotations[infrahubv1alpha1.AdmittedKubeconfigAnnotation])
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
	if v := r.seals.view(ctx, "VidraResource", vr); !v.admitted() {
		return unsealedError(v.kind, v.name, fmt.Sprintf("annotation %s names kubeconfig Secret %s", infrahubv1alpha1.AdmittedKubeconfigAnnotation, admitted), v.why)
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
}

// deployPass is one pass over a VidraResource: the plan, then what the deploy step did, for the
// report step.
type deployPass struct {
	*lifecycle.Pass[*infrahubv1alpha1.VidraResource]
	target *target
	// manifestHash is the sha256 of the manifest read for this pass (the cache holds none;
	// the pass holds it only while it plans).
	manifestHash string
	planned      []plannedObject // nil when the manifest cannot be applied (p.out says why)
	out          deployOutcome
	health       *health       // nil when not computed
	requeue      time.Duration // the next periodic look
	inv          *storedInventory
	added        []string // inventory entries this pass recorded ahead of its apply
}

func (r *VidraResourceReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*infrahubv1alpha1.VidraResource]) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, &deployPass{Pass: lp, requeue: r.settings.Current(ctx).RequeueResourcesAfter},
		lifecycle.OnDeletion(r.finalize),
		// Before anything is applied, so that whatever gets applied is also removed.
		lifecycle.EnsureFinalizer[*deployPass](finalizer),
		r.planStep,
		r.inventoryStep,
		r.deployStep,
		r.healthStep,
		r.report,
	)
}

// planStep decodes the manifest and resolves it against the destination cluster and the policy.
func (r *VidraResourceReconciler) planStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	vr := p.Obj
	manifest, current, err := manifestOf(ctx, r.reader, vr)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if !current {
		return lifecycle.RequeueAfter(lagRetry, "cache behind the VidraResource"), nil
	}
	p.manifestHash = manifestHash(manifest)
	objs, err := decodeManifest(manifest)
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
		p.target, err = r.clusters.getAs(ctx, r.claimant(ctx, vr), vr.Spec.Destination.Server, as)
	}
	if err != nil {
		p.out = deployOutcome{err: err, keep: true}
		return lifecycle.Continue(), nil
	}
	planned, err := plan(p.target, objs, vr.Spec.Destination.Namespace, r.policy)
	if err != nil {
		p.out = deployOutcome{err: err, keep: true}
		return lifecycle.Continue(), nil
	}
	for _, po := range planned {
		if !po.newKind { // a kind its manifest defines is watched from the pass after its CRD
			_ = p.target.watch(ctx, po.ref.GVK) // failure: reads fall back to GETs, logged by watch
		}
	}
	p.planned = planned
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

// deploy applies the planned objects and prunes what left the manifest. It never writes the
// VidraResource.
func (r *VidraResourceReconciler) deploy(ctx context.Context, vr *infrahubv1alpha1.VidraResource, hash string, t *target, planned []plannedObject, inv *storedInventory, events bool, interval time.Duration) deployOutcome {
	log := logf.FromContext(ctx)
	requested := vr.Annotations[infrahubv1alpha1.RequestedAtAnnotation]
	mem := r.memory.get(vr.Name, vr.UID)
	fresh := mem == nil || mem.manifestHash != hash || mem.target != t.id() || mem.requestedAt != requested
	// Outside event mode, a pass brought by a watch event before the periodic pass is due only
	// reports drift: the user chose periodic restoration, but the status must not read
	// Succeeded over a deleted object (defect 4).
	if !events && !fresh && r.now().Sub(mem.checkedAt) < interval*9/10 {
		return r.observeDrift(ctx, t, vr, planned, mem, interval)
	}
	if fresh && t.base != nil {
		if err := preflight(ctx, t, planned, markOf(vr)); err != nil {
			return deployOutcome{err: err, keep: true}
		}
	}
	next := &vrMemory{uid: vr.UID, manifestHash: hash, target: t.id(), cluster: t.clusterID(), requestedAt: requested, tokens: map[string]string{}, checkedAt: r.now()}

	var (
		out     = deployOutcome{reached: map[string]bool{}, gone: map[string]bool{}}
		errs    []error
		desired = map[string]bool{}
	)
	var (
		apply   []*unstructured.Unstructured
		existed = map[string]bool{}
		ho      = r.checkedHandover(ctx, vr)
	)
	for _, po := range planned {
		desired[po.ref.key()] = true
		var live *metav1.PartialObjectMetadata
		if !po.newKind {
			var err error
			if live, err = t.observe(ctx, po.ref.GVK, client.ObjectKey{Namespace: po.ref.Namespace, Name: po.ref.Name}); err != nil {
				errs = append(errs, lifecycle.Reasonf(infrahubv1alpha1.ReasonClusterUnavailable, "reading %s: %v", po.ref, err))
				continue
			}
		}
		owners, refusal := r.ownersAfterApply(ctx, live, po.ref, vr, ho)
		if refusal != nil {
			errs = append(errs, refusal)
			continue
		}
		if !fresh && live != nil && mem.tokens[po.ref.key()] == driftToken(live) {
			next.tokens[po.ref.key()] = mem.tokens[po.ref.key()]
			out.managed = append(out.managed, toManaged(po.ref))
			continue
		}
		existed[po.ref.key()] = live != nil
		apply = append(apply, owned(po, owners))
	}
	if len(apply) > 0 {
		done, partial, err := applySet(ctx, t, apply)
		if err != nil {
			errs = append(errs, err)
		}
		for _, u := range apply {
			key := objectRef{GVK: u.GroupVersionKind(), Namespace: u.GetNamespace(), Name: u.GetName()}.key()
			if _, ok := done[key]; ok || partial {
				out.reached[key] = true
			}
		}
		for _, po := range planned {
			a, ok := done[po.ref.key()]
			if !ok {
				continue
			}
			next.tokens[po.ref.key()] = a.token
			out.managed = append(out.managed, toManaged(po.ref))
			if a.action != ssa.CreatedAction && a.action != ssa.ConfiguredAction {
				continue // the dry-run found nothing of ours to change: nothing written
			}
			out.applied = append(out.applied, po.ref.String())
			out.progressed = true
			if !existed[po.ref.key()] {
				log.Info("created", "object", po.ref.String())
				out.created = append(out.created, po.ref.String())
			} else if !fresh {
				log.Info("restored drifted object", "object", po.ref.String())
				out.restored = append(out.restored, po.ref.String())
			}
		}
	}

	// Prune: what the last report listed, what our watches know we own, minus the manifest.
	// Only what the inventory records is ours to delete: a mark alone (copied, forged, or a
	// namesake's) is skipped with a warning, and does not hold the prune.
	candidates := append(managedRefs(vr.Status.ManagedResources), t.ownedObjects(ctx, vr.Name)...)
	candidates = append(candidates, inv.refs()...)
	recorded := recordedOf(inv, vr)
	pruned := map[string]bool{}
	for _, ref := range candidates {
		if desired[ref.key()] || pruned[ref.key()] {
			continue
		}
		pruned[ref.key()] = true
		res, note, err := deleteOwned(ctx, t, ref, markOf(vr), recorded[ref.key()], r.ownerUID)
		if err != nil {
			errs = append(errs, lifecycle.WithReason(infrahubv1alpha1.ReasonPruneFailed, err))
			out.managed = append(out.managed, toManaged(ref)) // still there, still ours
			continue
		}
		out.gone[ref.key()] = true
		switch res {
		case pruneDeleted:
			log.Info("pruned object that left the manifest", "object", ref.String())
			out.pruned = append(out.pruned, ref.String())
			out.progressed = true
		case pruneForeign, pruneNamespaceKept:
			r.warnPrune(ctx, vr, res, note)
		}
	}
	r.memory.put(vr.Name, next)
	sort.Slice(out.managed, func(i, j int) bool { return managedLess(out.managed[i], out.managed[j]) })
	out.err = errors.Join(errs...)
	if len(errs) > 0 {
		out.err = lifecycle.WithReason(reasonOf(errs[0]), out.err)
	}
	return out
}

// observeDrift compares the objects with our last apply without touching them.
func (r *VidraResourceReconciler) observeDrift(ctx context.Context, t *target, vr *infrahubv1alpha1.VidraResource, planned []plannedObject, mem *vrMemory, interval time.Duration) deployOutcome {
	out := deployOutcome{keep: true, observed: true, nextCheck: max(time.Second, mem.checkedAt.Add(interval).Sub(r.now()))}
	for _, po := range planned {
		live, err := t.observe(ctx, po.ref.GVK, client.ObjectKey{Namespace: po.ref.Namespace, Name: po.ref.Name})
		switch {
		case err != nil:
			out.err = lifecycle.Reasonf(infrahubv1alpha1.ReasonClusterUnavailable, "reading %s: %v", po.ref, err)
			return out
		case live == nil:
			out.drift = append(out.drift, po.ref.String()+" deleted")
		case mem.tokens[po.ref.key()] != driftToken(live):
			out.drift = append(out.drift, po.ref.String()+" changed")
		}
	}
	return out
}

// ownersAfterApply decides whether vr may apply over live, and the owner marks the apply then
// sets. An object no VidraResource created is never taken over unless it names vr in the adopt
// annotation. Owners are told apart by UID (a mark without UIDs, Vidra's, by name): one
// another live VidraResource owns is a conflict, unless its mark names vr too (Vidra's shared
// ownership), whose living owners then keep sharing it. An orphan, whose recorded owners are all
// gone, is not free for the taking, not even by a new VidraResource of the same name: only vr's
// adopt-orphans-of naming an owner's UID (or, for a mark without UIDs, its name) gives it away,
// as does the sync's handover from the VidraResource of the same artifact under its old id (ho,
// honoured only between VidraResources of one sync).
func (r *VidraResourceReconciler) ownersAfterApply(ctx context.Context, live *metav1.PartialObjectMetadata, ref objectRef, vr *infrahubv1alpha1.VidraResource, ho handover) ([]ownerMark, error) {
	self := markOf(vr)
	if live == nil {
		return []ownerMark{self}, nil
	}
	listed, uids := ownersOf(live), ownerUIDsOf(live)
	if len(listed) == 0 {
		if live.GetAnnotations()[infrahubv1alpha1.AdoptAnnotation] == vr.Name {
			return []ownerMark{self}, nil
		}
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict,
			"%s exists and no VidraResource created it; not applied (annotate it %s=%s to let this VidraResource take it over)",
			ref, infrahubv1alpha1.AdoptAnnotation, vr.Name)
	}
	adopt := map[string]bool{}
	for _, v := range strings.Split(vr.Annotations[infrahubv1alpha1.AdoptOrphansAnnotation], ",") {
		if v = strings.TrimSpace(v); v != "" {
			adopt[v] = true
		}
	}
	var (
		living, orphans []ownerMark
		others          []string
		mine, adopted   bool
	)
	for _, name := range listed {
		uid, hasUID := uids[name]
		switch {
		case name == vr.Name && (!hasUID || uid == self.uid):
			mine = true
		case ho.honoured && name == ho.name && (!hasUID || uid == ho.uid):
			mine = true // handed over by the sync: the same artifact under its old id
		default:
			cur, exists := r.ownerUID(ctx, name)
			if exists && (!hasUID || cur == "" || cur == uid) {
				living = append(living, ownerMark{name: name, uid: cmp.Or(uid, cur)})
				others = append(others, name)
				continue
			}
			orphans = append(orphans, ownerMark{name: name, uid: uid})
			if (hasUID && adopt[uid]) || (!hasUID && adopt[name]) {
				adopted = true
			}
		}
	}
	if !mine && ho.refused != nil && slices.Contains(listed, ho.name) && (len(others) > 0 || !adopted) {
		// Said as such: the writer asked for this object and is told why it is not theirs.
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonHandoverRefused, "%s is managed by VidraResource %s; not applied: %v", ref, strings.Join(listed, ", "), ho.refused)
	}
	if !mine && len(others) > 0 {
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict, "%s is managed by VidraResource %s; not applied", ref, strings.Join(others, ", "))
	}
	if !mine && !adopted {
		var named []string
		for _, o := range orphans {
			named = append(named, cmp.Or(o.uid, o.name))
		}
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict,
			"%s was applied by a VidraResource that is gone (%s); not applied (annotate this VidraResource %s=%s to take it over)",
			ref, orphanDesc(orphans), infrahubv1alpha1.AdoptOrphansAnnotation, strings.Join(named, ","))
	}
	out := append([]ownerMark{self}, living...)
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

func orphanDesc(orphans []ownerMark) string {
	var parts []string
	for _, o := range orphans {
		if o.uid == "" {
			parts = append(parts, o.name)
		} else {
			parts = append(parts, o.name+" uid "+o.uid)
		}
	}
	return strings.Join(parts, ", ")
}

// ownerUID returns the UID of the VidraResource of that name and whether it exists; a read
// error counts as existing with an unknown UID: never take over or delete on a guess.
func (r *VidraResourceReconciler) ownerUID(ctx context.Context, name string) (string, bool) {
	vr := &infrahubv1alpha1.VidraResource{}
	err := r.client.Get(ctx, client.ObjectKey{Name: name}, vr)
	switch {
	case err == nil:
		return string(vr.UID), true
	case apierrors.IsNotFound(err):
		return "", false
	}
	return "", true
}

// recordedOf is the set of objects vr may delete: its inventory, or, for a VidraResource from
// before the inventory existed, what its status lists.
func recordedOf(inv *storedInventory, vr *infrahubv1alpha1.VidraResource) map[string]bool {
	out := map[string]bool{}
	refs := inv.refs()
	if !inv.found {
		refs = managedRefs(vr.Status.ManagedResources)
	}
	for _, ref := range refs {
		out[ref.key()] = true
	}
	return out
}

// warnPrune reports an object a prune or cleanup left alone on purpose.
func (r *VidraResourceReconciler) warnPrune(ctx context.Context, vr *infrahubv1alpha1.VidraResource, res pruneResult, note string) {
	reason := "ForeignMark"
	if res == pruneNamespaceKept {
		reason = "NamespaceKept"
	}
	logf.FromContext(ctx).Info("prune skipped an object", "reason", reason, "note", note)
	r.recorder.Eventf(vr, nil, "Warning", reason, "Prune", "%s", clipNote(note))
}

// finalize removes what the VidraResource applied, then its finalizer.
func (r *VidraResourceReconciler) finalize(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	vr := p.Obj
	if !controllerutil.ContainsFinalizer(vr, finalizer) {
		r.memory.forget(vr.Name)
		return lifecycle.Done(), nil
	}
	r.memory.forget(vr.Name) // our own deletes must not bring passes
	if err := r.cleanup(ctx, vr); err != nil {
		logf.FromContext(ctx).Info("cannot remove applied objects yet", "error", err.Error())
		p.out = deployOutcome{err: lifecycle.WithReason(infrahubv1alpha1.ReasonCleanupFailed, err), keep: true}
		p.requeue = cleanupRetry
		res, werr := r.report(ctx, p)
		if werr != nil {
			return res, werr
		}
		return lifecycle.RequeueAfter(cleanupRetry, "cleanup failed"), nil
	}
	if err := r.inventories.remove(ctx, vr); err != nil {
		return lifecycle.Result{}, err
	}
	if err := lifecycle.PatchMetadata(ctx, p.Client(), vr, func(o client.Object) { controllerutil.RemoveFinalizer(o, finalizer) }); err != nil {
		return lifecycle.Result{}, err
	}
	r.memory.forget(vr.Name)
	return lifecycle.Wrote("finalizer removed"), nil
}

// cleanup deletes what the VidraResource applied. With an inventory, that is what it records,
// removed on the cluster and as the identity it records: a destination or identity that
// changed since, or an identity the operator may no longer act as for the writer, does not
// orphan it. Without one (a VidraResource of an earlier version), every object marked as its
// own: those its status lists, those its manifest names, and those the watches know.
func (r *VidraResourceReconciler) cleanup(ctx context.Context, vr *infrahubv1alpha1.VidraResource) error {
	st, err := r.inventories.load(ctx, vr)
	if err != nil {
		return err
	}
	if st.found && !st.legacy {
		if err := r.pruneRecorded(ctx, vr, st.inventory, nil); err != nil {
			return fmt.Errorf("%w (remove the finalizer %s by hand to leave the objects behind)", err, finalizer)
		}
		return nil
	}
	as, err := r.actAs(ctx, vr)
	if err != nil {
		if len(vr.Status.ManagedResources) == 0 && len(st.Objects) == 0 {
			return nil // never acted as anyone: nothing was applied
		}
		return fmt.Errorf("%w (remove the finalizer %s by hand to leave the objects behind)", err, finalizer)
	}
	t, err := r.clusters.getAs(ctx, r.claimant(ctx, vr), vr.Spec.Destination.Server, as)
	if err != nil {
		return fmt.Errorf("reaching the destination cluster (remove the finalizer %s by hand to leave the objects behind): %w", finalizer, err)
	}
	inv := st.inventory
	if len(inv.Objects) > 0 && hostKeyOrLocal(inv.Server) != hostKeyOrLocal(vr.Spec.Destination.Server) {
		inv.As = as // an earlier version's inventory records no identity
		if err := r.pruneRecorded(ctx, vr, inv, nil); err != nil {
			return fmt.Errorf("%w (remove the finalizer %s by hand to leave the objects behind)", err, finalizer)
		}
		st.inventory = inventory{}
	}
	refs := append(managedRefs(vr.Status.ManagedResources), st.refs()...)
	manifest, _, err := manifestOf(ctx, r.reader, vr)
	if err != nil {
		return err
	}
	// A manifest of another generation names objects too: the spec of one being deleted is
	// frozen by admission, and the inventory and the watches find the rest.
	if objs, err := decodeManifest(manifest); err == nil {
		if planned, err := plan(t, objs, vr.Spec.Destination.Namespace, Policy{AllowedKinds: []string{"*"}, AllowedNamespaces: []string{"*"}}); err == nil {
			for _, po := range planned {
				refs = append(refs, po.ref)
			}
		}
	}
	refs = append(refs, t.ownedObjects(ctx, vr.Name)...)
	recorded := recordedOf(&st, vr)
	done := map[string]bool{}
	var errs []error
	for _, ref := range refs {
		if done[ref.key()] {
			continue
		}
		done[ref.key()] = true
		res, note, err := deleteOwned(ctx, t, ref, markOf(vr), recorded[ref.key()], r.ownerUID)
		if err != nil {
			errs = append(errs, err)
		}
		if res == pruneForeign || res == pruneNamespaceKept {
			r.warnPrune(ctx, vr, res, note)
		}
	}
	return errors.Join(errs...)
}

// report writes the status if, and only if, it changed: an unchanged pass writes nothing.
func (r *VidraResourceReconciler) report(_ context.Context, p *deployPass) (lifecycle.Result, error) {
	vr, out, requeue := p.Obj, p.out, p.requeue
	if out.observed && out.err == nil && len(out.drift) == 0 {
		st := vr.Status.DeepCopy()
		reportHealth(st, vr.Generation, p.health)
		if !equality.Semantic.DeepEqual(*st, vr.Status) {
			vr.Status = *st // the Reconciler writes it
		}
		return lifecycle.RequeueAfter(requeue, "nothing drifted"), nil
	}
	r.eventsOf(vr, out)
	st := vr.Status.DeepCopy()
	reportHealth(st, vr.Generation, p.health)
	rep := lifecycle.Report{LastSuccess: &st.LastSyncTime, LastError: &st.LastError}
	switch {
	case out.err == nil && len(out.drift) > 0:
		st.DeployState = infrahubv1alpha1.StateStale
		lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonDrifted,
			clip(fmt.Sprintf("%s; restored by the periodic pass (reconcileOnEvents is off)", strings.Join(out.drift, ", "))))
	case out.err == nil:
		st.DeployState = infrahubv1alpha1.StateSucceeded
		rep.Succeeded(r.now(), out.progressed)
		lifecycle.SetCondition(&st.Conditions, vr.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionTrue, infrahubv1alpha1.ReasonDeployed,
			fmt.Sprintf("%d objects applied", len(out.managed)))
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
func (r *VidraResourceReconciler) onObjectEvent(ev objectEvent, enqueue func(name string)) {
	ref := objectRef{GVK: ev.gvk, Namespace: ev.obj.GetNamespace(), Name: ev.obj.GetName()}
	for _, owner := range ownersOf(ev.obj) {
		if r.memory.wants(owner, ev.cluster, ref.key(), driftToken(ev.obj), ev.deleted) {
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
