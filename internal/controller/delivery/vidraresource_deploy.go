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

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/ssa"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

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

// healthStep reads every planned object (uncached: the watches hold metadata only) and computes
// its kstatus: the VidraResource reports Healthy only when all are Current, and looks again
// soon while any is on its way.
func (r *VidraResourceReconciler) healthStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	if p.planned == nil {
		return lifecycle.Continue(), nil
	}
	h := health{status: status.CurrentStatus}
	for _, po := range p.planned {
		st, msg := objectHealth(ctx, p.target, po.ref)
		if st == status.CurrentStatus {
			continue
		}
		line := fmt.Sprintf("%s: %s", po.ref, st)
		if msg != "" {
			line += ": " + msg
		}
		h.notReady = append(h.notReady, line)
		if healthRank[st] < healthRank[h.status] {
			h.status = st
		}
	}
	p.health = &h
	if h.status != status.CurrentStatus && h.status != status.FailedStatus {
		p.requeue = min(p.requeue, r.healthPoll)
	}
	return lifecycle.Continue(), nil
}

// checkedHandover reads vr's HandoverAnnotation and honours it only between VidraResources of
// one InfrahubSync: the sync writes it when an artifact's id changes (the webhook refuses it
// from anyone else). Anyone who may write a VidraResource into a namespace could otherwise
// name another's there and take its objects. A read error refuses too: never take over on a
// guess.
func (r *VidraResourceReconciler) checkedHandover(ctx context.Context, vr *infrahubv1alpha1.VidraResource) handover {
	name, uid, ok := handoverOf(vr)
	if !ok {
		return handover{}
	}
	h := handover{name: name, uid: uid}
	var s *infrahubv1alpha1.InfrahubSync
	if syncName, _, ok := SyncRefOf(vr); ok {
		s = &infrahubv1alpha1.InfrahubSync{}
		if err := r.client.Get(ctx, client.ObjectKey{Name: syncName}, s); apierrors.IsNotFound(err) {
			s = nil
		} else if err != nil {
			h.refused = fmt.Errorf("reading InfrahubSync %s: %w", syncName, err)
			return h
		}
	}
	from := &infrahubv1alpha1.VidraResource{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: name}, from); apierrors.IsNotFound(err) {
		from = nil
	} else if err != nil {
		h.refused = fmt.Errorf("reading VidraResource %s: %w", name, err)
		return h
	}
	h.refused = handoverRefusal(vr, from, s, uid)
	h.honoured = h.refused == nil
	return h
}
