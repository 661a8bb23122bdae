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
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/healthexpr"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// deploy applies the planned objects and prunes what left the manifest. It never writes the
// VidraResource.
func (r *VidraResourceReconciler) deploy(ctx context.Context, vr *infrahubv1alpha1.VidraResource, hash string, t *target.Target, planned []apply.PlannedObject, inv *apply.StoredInventory, events bool, interval time.Duration) deployOutcome {
	log := logf.FromContext(ctx)
	requested := vr.Annotations[infrahubv1alpha1.RequestedAtAnnotation]
	mem := r.memory.Get(vr.Name, vr.UID)
	policy := driftPolicyOf(vr)
	warn := policy == infrahubv1alpha1.DriftPolicyWarn
	fresh := mem == nil || mem.ManifestHash != hash || mem.Target != t.ID() || mem.RequestedAt != requested || mem.DriftPolicy != string(policy)
	// Outside event mode, a pass brought by a watch event before the periodic pass is due only
	// reports drift: the user chose periodic restoration, but the status must not read
	// Succeeded over a deleted object (defect 4). Under Warn every pass only looks at drift
	// anyway (a dry-run), and says which fields moved.
	if !events && !warn && !fresh && r.now().Sub(mem.CheckedAt) < interval*9/10 {
		return r.observeDrift(ctx, t, vr, planned, mem, interval)
	}
	if fresh && t.Base != nil {
		if err := apply.Preflight(ctx, t, planned, apply.MarkOf(vr)); err != nil {
			return deployOutcome{err: err, keep: true}
		}
	}
	next := &apply.VRMemory{UID: vr.UID, ManifestHash: hash, Target: t.ID(), Cluster: t.ClusterID(), RequestedAt: requested, Tokens: map[string]string{}, CheckedAt: r.now(),
		DriftPolicy: string(policy), Drift: map[string]apply.DriftMemo{}}

	var (
		out     = deployOutcome{reached: map[string]bool{}, gone: map[string]bool{}, driftChecked: warn}
		errs    []error
		desired = map[string]bool{}
	)
	var (
		toApply []*unstructured.Unstructured
		existed = map[string]bool{}
		ho      = r.checkedHandover(ctx, vr)
	)
	for _, po := range planned {
		desired[po.Ref.Key()] = true
		var live *metav1.PartialObjectMetadata
		if !po.NewKind {
			var err error
			if live, err = t.Observe(ctx, po.Ref.GVK, client.ObjectKey{Namespace: po.Ref.Namespace, Name: po.Ref.Name}); err != nil {
				errs = append(errs, lifecycle.Reasonf(infrahubv1alpha1.ReasonClusterUnavailable, "reading %s: %v", po.Ref, err))
				continue
			}
		}
		owners, refusal := r.ownersAfterApply(ctx, live, po.Ref, vr, ho)
		if refusal != nil {
			errs = append(errs, refusal)
			continue
		}
		key := po.Ref.Key()
		if !fresh && live != nil && mem.Tokens[key] == target.DriftToken(live) {
			// As our last pass left it; a drift Warn left stays reported while the object does
			// not move at all (our token does not move once another manager holds the fields).
			if d, drifted := mem.Drift[key]; !drifted || d.ResourceVersion == live.GetResourceVersion() {
				next.Tokens[key] = mem.Tokens[key]
				if drifted {
					next.Drift[key] = d
					out.drifted = append(out.drifted, driftedObject(po.Ref, d.Fields))
				}
				out.managed = append(out.managed, apply.ToManaged(po.Ref))
				continue
			}
		}
		if warn && live != nil && apply.MarksOwner(live, apply.MarkOf(vr)) && !asLeft(mem, t, key, live) {
			// Warn: an object we applied before that someone may have changed is only dry-run.
			// One as our last apply left it (known only while this process remembers it) takes
			// a new manifest like any other: that is an update, not a correction.
			fields, total, gone, err := apply.DriftOf(ctx, t, apply.Owned(po, owners), infrahubv1alpha1.MaxDriftFields)
			switch {
			case err != nil:
				errs = append(errs, lifecycle.Reasonf(infrahubv1alpha1.ReasonApplyFailed, "dry-run of %s: %v", po.Ref, err))
				out.managed = append(out.managed, apply.ToManaged(po.Ref))
				continue
			case gone:
				live = nil // deleted meanwhile: created like any missing object
			default:
				next.Tokens[key] = target.DriftToken(live)
				out.managed = append(out.managed, apply.ToManaged(po.Ref))
				if total > 0 {
					log.Info("drift left as it is (driftPolicy Warn)", "object", po.Ref.String(), "fields", fields)
					next.Drift[key] = apply.DriftMemo{ResourceVersion: live.GetResourceVersion(), Fields: fields}
					out.drifted = append(out.drifted, driftedObject(po.Ref, fields))
				}
				continue
			}
		}
		existed[key] = live != nil
		toApply = append(toApply, apply.Owned(po, owners))
	}
	if len(toApply) > 0 {
		done, partial, err := apply.ApplySet(ctx, t, toApply)
		if err != nil {
			errs = append(errs, err)
		}
		for _, u := range toApply {
			key := target.ObjectRef{GVK: u.GroupVersionKind(), Namespace: u.GetNamespace(), Name: u.GetName()}.Key()
			if _, ok := done[key]; ok || partial {
				out.reached[key] = true
			}
		}
		for _, po := range planned {
			a, ok := done[po.Ref.Key()]
			if !ok {
				continue
			}
			next.Tokens[po.Ref.Key()] = a.Token
			out.managed = append(out.managed, apply.ToManaged(po.Ref))
			if a.Action != ssa.CreatedAction && a.Action != ssa.ConfiguredAction {
				continue // the dry-run found nothing of ours to change: nothing written
			}
			out.applied = append(out.applied, po.Ref.String())
			out.progressed = true
			if !existed[po.Ref.Key()] {
				log.Info("created", "object", po.Ref.String())
				out.created = append(out.created, po.Ref.String())
			} else if !fresh {
				log.Info("restored drifted object", "object", po.Ref.String())
				out.restored = append(out.restored, po.Ref.String())
			}
		}
	}

	// Prune: what the last report listed, what our watches know we own, minus the manifest.
	// Only what the inventory records is ours to delete: a mark alone (copied, forged, or a
	// namesake's) is skipped with a warning, and does not hold the prune.
	candidates := append(apply.ManagedRefs(vr.Status.ManagedResources), t.OwnedObjects(ctx, vr.Name)...)
	candidates = append(candidates, inv.Refs()...)
	recorded := recordedOf(inv, vr)
	pruned := map[string]bool{}
	for _, ref := range candidates {
		if desired[ref.Key()] || pruned[ref.Key()] {
			continue
		}
		pruned[ref.Key()] = true
		res, note, err := apply.DeleteOwned(ctx, t, ref, apply.MarkOf(vr), recorded[ref.Key()], r.ownerUID)
		if err != nil {
			errs = append(errs, lifecycle.WithReason(infrahubv1alpha1.ReasonPruneFailed, err))
			out.managed = append(out.managed, apply.ToManaged(ref)) // still there, still ours
			continue
		}
		out.gone[ref.Key()] = true
		switch res {
		case apply.PruneDeleted:
			log.Info("pruned object that left the manifest", "object", ref.String())
			out.pruned = append(out.pruned, ref.String())
			out.progressed = true
		case apply.PruneForeign, apply.PruneNamespaceKept:
			r.warnPrune(ctx, vr, res, note)
		}
	}
	r.memory.Put(vr.Name, next)
	sort.Slice(out.managed, func(i, j int) bool { return managedLess(out.managed[i], out.managed[j]) })
	out.err = errors.Join(errs...)
	if len(errs) > 0 {
		out.err = lifecycle.WithReason(reasonOf(errs[0]), out.err)
	}
	return out
}

// driftPolicyOf is the VidraResource's drift policy, Correct when it names none.
func driftPolicyOf(vr *infrahubv1alpha1.VidraResource) infrahubv1alpha1.DriftPolicy {
	if vr.Spec.DriftPolicy == "" {
		return infrahubv1alpha1.DriftPolicyCorrect
	}
	return vr.Spec.DriftPolicy
}

// asLeft reports whether live is as this process's last apply of it left it: our fields
// untouched and no drift left on it.
func asLeft(mem *apply.VRMemory, t *target.Target, key string, live *metav1.PartialObjectMetadata) bool {
	if mem == nil || mem.Target != t.ID() || mem.Tokens[key] == "" || mem.Tokens[key] != target.DriftToken(live) {
		return false
	}
	_, drifted := mem.Drift[key]
	return !drifted
}

func driftedObject(ref target.ObjectRef, fields []string) infrahubv1alpha1.DriftedObject {
	m := apply.ToManaged(ref)
	return infrahubv1alpha1.DriftedObject{APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name, Fields: slices.Clone(fields)}
}

// observeDrift compares the objects with our last apply without touching them.
func (r *VidraResourceReconciler) observeDrift(ctx context.Context, t *target.Target, vr *infrahubv1alpha1.VidraResource, planned []apply.PlannedObject, mem *apply.VRMemory, interval time.Duration) deployOutcome {
	out := deployOutcome{keep: true, observed: true, nextCheck: max(time.Second, mem.CheckedAt.Add(interval).Sub(r.now()))}
	for _, po := range planned {
		live, err := t.Observe(ctx, po.Ref.GVK, client.ObjectKey{Namespace: po.Ref.Namespace, Name: po.Ref.Name})
		switch {
		case err != nil:
			out.err = lifecycle.Reasonf(infrahubv1alpha1.ReasonClusterUnavailable, "reading %s: %v", po.Ref, err)
			return out
		case live == nil:
			out.drift = append(out.drift, po.Ref.String()+" deleted")
		case mem.Tokens[po.Ref.Key()] != target.DriftToken(live):
			out.drift = append(out.drift, po.Ref.String()+" changed")
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
func (r *VidraResourceReconciler) ownersAfterApply(ctx context.Context, live *metav1.PartialObjectMetadata, ref target.ObjectRef, vr *infrahubv1alpha1.VidraResource, ho apply.Handover) ([]apply.OwnerMark, error) {
	self := apply.MarkOf(vr)
	if live == nil {
		return []apply.OwnerMark{self}, nil
	}
	listed, uids := target.OwnersOf(live), apply.OwnerUIDsOf(live)
	if len(listed) == 0 {
		if live.GetAnnotations()[infrahubv1alpha1.AdoptAnnotation] == vr.Name {
			return []apply.OwnerMark{self}, nil
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
		living, orphans []apply.OwnerMark
		others          []string
		mine, adopted   bool
	)
	for _, name := range listed {
		uid, hasUID := uids[name]
		switch {
		case name == vr.Name && (!hasUID || uid == self.UID):
			mine = true
		case ho.Honoured && name == ho.Name && (!hasUID || uid == ho.UID):
			mine = true // handed over by the sync: the same artifact under its old id
		default:
			cur, exists := r.ownerUID(ctx, name)
			if exists && (!hasUID || cur == "" || cur == uid) {
				living = append(living, apply.OwnerMark{Name: name, UID: cmp.Or(uid, cur)})
				others = append(others, name)
				continue
			}
			orphans = append(orphans, apply.OwnerMark{Name: name, UID: uid})
			if (hasUID && adopt[uid]) || (!hasUID && adopt[name]) {
				adopted = true
			}
		}
	}
	if !mine && ho.Refused != nil && slices.Contains(listed, ho.Name) && (len(others) > 0 || !adopted) {
		// Said as such: the writer asked for this object and is told why it is not theirs.
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonHandoverRefused, "%s is managed by VidraResource %s; not applied: %v", ref, strings.Join(listed, ", "), ho.Refused)
	}
	if !mine && len(others) > 0 {
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict, "%s is managed by VidraResource %s; not applied", ref, strings.Join(others, ", "))
	}
	if !mine && !adopted {
		var named []string
		for _, o := range orphans {
			named = append(named, cmp.Or(o.UID, o.Name))
		}
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict,
			"%s was applied by a VidraResource that is gone (%s); not applied (annotate this VidraResource %s=%s to take it over)",
			ref, orphanDesc(orphans), infrahubv1alpha1.AdoptOrphansAnnotation, strings.Join(named, ","))
	}
	out := append([]apply.OwnerMark{self}, living...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func orphanDesc(orphans []apply.OwnerMark) string {
	var parts []string
	for _, o := range orphans {
		if o.UID == "" {
			parts = append(parts, o.Name)
		} else {
			parts = append(parts, o.Name+" uid "+o.UID)
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
func recordedOf(inv *apply.StoredInventory, vr *infrahubv1alpha1.VidraResource) map[string]bool {
	out := map[string]bool{}
	refs := inv.Refs()
	if !inv.Found {
		refs = apply.ManagedRefs(vr.Status.ManagedResources)
	}
	for _, ref := range refs {
		out[ref.Key()] = true
	}
	return out
}

// warnPrune reports an object a prune or cleanup left alone on purpose.
func (r *VidraResourceReconciler) warnPrune(ctx context.Context, vr *infrahubv1alpha1.VidraResource, res apply.PruneResult, note string) {
	reason := "ForeignMark"
	if res == apply.PruneNamespaceKept {
		reason = "NamespaceKept"
	}
	logf.FromContext(ctx).Info("prune skipped an object", "reason", reason, "note", note)
	r.recorder.Eventf(vr, nil, "Warning", reason, "Prune", "%s", clipNote(note))
}

// healthStep reads every planned object (uncached: the watches hold metadata only) and computes
// its health, with spec.healthExpressions for the kinds they name and kstatus for the rest: the
// VidraResource reports Healthy only when all are Current, and looks again soon while any is on
// its way.
func (r *VidraResourceReconciler) healthStep(ctx context.Context, p *deployPass) (lifecycle.Result, error) {
	if p.planned == nil {
		return lifecycle.Continue(), nil
	}
	h := apply.Health{Status: status.CurrentStatus}
	var judge apply.Judge
	if checks := healthexpr.For(p.Obj.Spec.HealthExpressions); checks != nil {
		judge = checks.Evaluate
	}
	for _, po := range p.planned {
		st, msg := apply.ObjectHealth(ctx, p.target, po.Ref, judge)
		if st == status.CurrentStatus {
			continue
		}
		line := fmt.Sprintf("%s: %s", po.Ref, st)
		if msg != "" {
			line += ": " + msg
		}
		h.NotReady = append(h.NotReady, line)
		if apply.HealthRank[st] < apply.HealthRank[h.Status] {
			h.Status = st
		}
	}
	p.health = &h
	if h.Status != status.CurrentStatus && h.Status != status.FailedStatus {
		p.requeue = min(p.requeue, r.healthPoll)
	}
	return lifecycle.Continue(), nil
}

// checkedHandover reads vr's HandoverAnnotation and honours it only between VidraResources of
// one InfrahubSync: the sync writes it when an artifact's id changes (the webhook refuses it
// from anyone else). Anyone who may write a VidraResource into a namespace could otherwise
// name another's there and take its objects. A read error refuses too: never take over on a
// guess.
func (r *VidraResourceReconciler) checkedHandover(ctx context.Context, vr *infrahubv1alpha1.VidraResource) apply.Handover {
	name, uid, ok := apply.HandoverOf(vr)
	if !ok {
		return apply.Handover{}
	}
	h := apply.Handover{Name: name, UID: uid}
	var s *infrahubv1alpha1.InfrahubSync
	if syncName, _, ok := apply.SyncRefOf(vr); ok {
		s = &infrahubv1alpha1.InfrahubSync{}
		if err := r.client.Get(ctx, client.ObjectKey{Name: syncName}, s); apierrors.IsNotFound(err) {
			s = nil
		} else if err != nil {
			h.Refused = fmt.Errorf("reading InfrahubSync %s: %w", syncName, err)
			return h
		}
	}
	from := &infrahubv1alpha1.VidraResource{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: name}, from); apierrors.IsNotFound(err) {
		from = nil
	} else if err != nil {
		h.Refused = fmt.Errorf("reading VidraResource %s: %w", name, err)
		return h
	}
	h.Refused = apply.HandoverRefusal(vr, from, s, uid)
	h.Honoured = h.Refused == nil
	return h
}
