package delivery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// sync queries Infrahub and brings the sync's VidraResources in line. It never writes the sync.
func (r *InfrahubSyncReconciler) sync(ctx context.Context, c client.Client, s *infrahubv1alpha1.InfrahubSync, settings policy.Settings) syncOutcome {
	query := settings.QueryName
	src := s.Spec.Source
	limits := r.limits.WithDefaults().ForSync(s)
	ctx, cancel := context.WithTimeout(ctx, limits.PassTimeout)
	defer cancel()
	target := infrahub.Target{Branch: src.TargetBranch, At: src.TargetDate}
	// An identity its VidraResources could not apply as: nothing is fetched either. A query
	// would only read, with credentials that may be bound to the sync's name alone, what
	// nothing can deliver (with no webhook, anyone may create a sync of that name).
	if _, err := r.identity.ActAs(ctx, s.Spec.Destination, r.seals.View(ctx, "InfrahubSync", s)); err != nil {
		if reason, _ := lifecycle.ReasonOf(err); reason == infrahubv1alpha1.ReasonAdmissionRequired || reason == infrahubv1alpha1.ReasonOperatorServiceAccount ||
			reason == infrahubv1alpha1.ReasonUnsealed || reason == infrahubv1alpha1.ReasonNoServiceAccount {
			return syncOutcome{err: err, keep: true}
		}
	}
	if err := infrahub.ValidateTargetDate(src.TargetDate); err != nil {
		return syncOutcome{err: err, keep: true}
	}
	cfg, err := r.creds.Config(ctx, s)
	if err != nil {
		return syncOutcome{err: err, keep: true}
	}
	ic, err := r.clients.Get(cfg)
	if err != nil {
		return syncOutcome{err: err, keep: true}
	}
	arts, err := ic.QueryArtifacts(ctx, query, src.ArtefactName, target)
	if err != nil {
		return syncOutcome{err: err, keep: true}
	}
	if err := policy.TooManyArtifacts(distinctIDs(arts), limits); err != nil {
		return syncOutcome{err: err, keep: true}
	}
	owned, err := r.ownedResources(ctx, c, s)
	if err != nil {
		return syncOutcome{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, err), keep: true}
	}
	if len(arts) == 0 && !src.AllowEmpty {
		return syncOutcome{keep: true, err: lifecycle.Reasonf(infrahubv1alpha1.ReasonEmptyResult,
			"query %s found no artifact named %q on branch %s%s; %d VidraResources kept. Check artefactName, targetBranch and targetDate, or set spec.source.allowEmpty to let an empty result delete them",
			query, src.ArtefactName, src.TargetBranch, atSuffix(src.TargetDate), len(owned))}
	}

	handover := apply.PairRenamed(arts, owned)
	unsettled, err := r.unsettled(ctx, s, owned, limits.ApplyWindow)
	if err != nil {
		return syncOutcome{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, err), keep: true}
	}
	slots := policy.NewWriteSlots(limits.ApplyWindow - unsettled)
	results := r.deliverAll(ctx, c, ic, s, arts, target, handover, policy.NewByteBudget(limits.MaxSyncBytes), slots)
	var (
		out     syncOutcome
		errs    []error
		shrinks []int // results whose content update waits for the guard
	)
	inResult := map[string]bool{}
	for i, res := range results {
		if inResult[arts[i].ID] { // a duplicate in the answer, delivered once
			continue
		}
		inResult[arts[i].ID] = true
		switch {
		case res.shrink != nil:
			shrinks = append(shrinks, i)
			continue
		case res.err != nil:
			errs = append(errs, res.err)
		case res.lagging:
			out.retrySoon = true
		case res.pending:
		case res.deferred:
			out.deferred++
		default:
			out.checksums = append(out.checksums, arts[i].ID+":"+arts[i].Checksum)
			out.delivered++
		}
		out.progressed = out.progressed || res.wrote
	}
	// Only this sync's own VidraResources (controller reference), never another's (defect 2).
	// One whose artifact reappeared under a new id waits for the new one to take its objects
	// over, then goes without counting as a deletion; the others are the prune, which the guard
	// may hold.
	var (
		doomed, handedOver []string
		total              int
	)
	for name, vr := range owned {
		if !vr.DeletionTimestamp.IsZero() {
			continue
		}
		total++
		if inResult[name] {
			continue
		}
		switch successor := successorOf(vr, owned, inResult); {
		case successor == nil:
			doomed = append(doomed, name)
		case apply.TookOver(successor, vr):
			handedOver = append(handedOver, name)
		default:
			// Kept until its successor has applied: the successor's report brings that pass.
		}
	}
	survivors := slices.Collect(maps.Keys(inResult))
	decision := apply.PruneDecision{}
	stake := apply.PruneStake{Doomed: doomed, Total: total}
	for _, i := range shrinks {
		sh := results[i].shrink
		stake.Shrunk = append(stake.Shrunk, sh.vr.Name+"@"+sh.art.Checksum)
		stake.ShrunkObjects += sh.lost
	}
	// An empty answer the user allowed is its own confirmation.
	if !(len(arts) == 0 && src.AllowEmpty) && len(doomed)+len(handedOver)+len(shrinks) > 0 {
		if err := r.weigh(ctx, &stake, owned); err != nil {
			// Nothing is deleted on a guess of what it would remove.
			errs = append(errs, lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("weighing the prune: %w", err)))
			doomed, handedOver, shrinks = nil, nil, nil
		} else {
			stake.Objects += stake.ShrunkObjects
			decision = apply.DecidePrune(s, stake, survivors, apply.MaxFraction(r.pruneMaxFraction, s), r.now(), r.pruneSettle(settings))
		}
	}
	if !decision.Hold {
		for _, i := range shrinks {
			sh := results[i].shrink
			res := r.update(ctx, c, s, sh.art, sh.vr, sh.manifest, false, r.resourceSeal(ctx, s))
			switch {
			case res.err != nil:
				errs = append(errs, res.err)
			case res.lagging:
				out.retrySoon = true
			default:
				out.checksums = append(out.checksums, sh.art.ID+":"+sh.art.Checksum)
				out.delivered++
			}
			out.progressed = out.progressed || res.wrote
		}
	}
	if decision.Reason != "" {
		logf.FromContext(ctx).Info("prune beyond the guard released", "token", decision.Token, "why", decision.Reason,
			"deleting", len(doomed), "of", total, "objects", stake.Objects, "ofObjects", stake.ObjectsTotal)
	}
	var toDelete []string
	for _, name := range handedOver {
		// One that leaves objects behind goes only with the whole answer weighed, and allowed.
		if !slices.Contains(stake.Lossy, name) || (!decision.Hold && !stake.Unsettled) {
			toDelete = append(toDelete, name)
		}
	}
	if !decision.Hold {
		toDelete = append(toDelete, doomed...)
	}
	for _, name := range toDelete {
		vr := owned[name]
		uid := vr.UID
		if err := c.Delete(ctx, vr, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("deleting VidraResource %s that left the result: %w", name, err)))
			continue
		}
		logf.FromContext(ctx).Info("deleted VidraResource whose artifact left the result", "vidraresource", name)
		out.progressed = true
	}
	sort.Strings(out.checksums)
	for id := range inResult {
		out.ids = append(out.ids, id)
	}
	if err := policy.DeadlineError(ctx, limits, out.delivered, len(inResult)); err != nil {
		out.err = err
	} else if len(errs) > 0 {
		out.err = lifecycle.WithReason(reasonOf(errs[0]), fmt.Errorf("%d of %d artifacts not delivered: %w", len(errs), len(arts), errors.Join(errs...)))
	}
	if decision.Hold {
		out.keep = true
		out.recordPrune = decision.Record
		held := lifecycle.Reasonf(infrahubv1alpha1.ReasonPruneHeld, "%s", apply.HeldMessage(s, decision, stake, apply.MaxFraction(r.pruneMaxFraction, s), r.pruneSettle(settings)))
		if out.err != nil {
			held = lifecycle.WithReason(infrahubv1alpha1.ReasonPruneHeld, errors.Join(held, out.err))
		}
		out.err = held
	}
	return out
}

// distinctIDs counts the artifacts of an answer (an id twice is one artifact).
func distinctIDs(arts []infrahub.Artifact) int {
	seen := make(map[string]bool, len(arts))
	for _, a := range arts {
		seen[a.ID] = true
	}
	return len(seen)
}

// successorOf is the VidraResource in the result that takes over vr's objects (its
// HandoverAnnotation names vr), if any.
func successorOf(vr *infrahubv1alpha1.VidraResource, owned map[string]*infrahubv1alpha1.VidraResource, inResult map[string]bool) *infrahubv1alpha1.VidraResource {
	for name, next := range owned {
		if !inResult[name] || !next.DeletionTimestamp.IsZero() {
			continue
		}
		if n, uid, ok := apply.HandoverOf(next); ok && n == vr.Name && uid == string(vr.UID) {
			return next
		}
	}
	return nil
}

func atSuffix(at string) string {
	if at == "" {
		return ""
	}
	return " at " + at
}

// ownedResources returns the VidraResources this sync controls, by name.
func (r *InfrahubSyncReconciler) ownedResources(ctx context.Context, c client.Client, s *infrahubv1alpha1.InfrahubSync) (map[string]*infrahubv1alpha1.VidraResource, error) {
	var list infrahubv1alpha1.VidraResourceList
	if err := c.List(ctx, &list, client.MatchingFields{vrControllerIndex: string(s.UID)}); err != nil {
		return nil, fmt.Errorf("listing VidraResources of %s: %w", s.Name, err)
	}
	out := make(map[string]*infrahubv1alpha1.VidraResource, len(list.Items))
	for i := range list.Items {
		if apply.OwnedBy(&list.Items[i], s) { // the index holds the UID; the name must match too
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out, nil
}

// unsettled is how many of the sync's VidraResources wait for their apply. The cache may not
// have seen the previous pass's writes yet, and counted from it a pass right after one that
// wrote found too few waiting and wrote past the window; so while the cache leaves room, the
// API server is asked too, and the larger count holds.
func (r *InfrahubSyncReconciler) unsettled(ctx context.Context, s *infrahubv1alpha1.InfrahubSync, owned map[string]*infrahubv1alpha1.VidraResource, window int) (int, error) {
	n := policy.Unsettled(owned)
	if n >= window || r.apiReader == nil {
		return n, nil
	}
	var list infrahubv1alpha1.VidraResourceList
	if err := r.apiReader.List(ctx, &list, client.MatchingLabels{manifests.SyncLabel: s.Name}); err != nil {
		return 0, fmt.Errorf("listing VidraResources of %s: %w", s.Name, err)
	}
	live := make(map[string]*infrahubv1alpha1.VidraResource, len(list.Items))
	for i := range list.Items {
		if apply.OwnedBy(&list.Items[i], s) {
			live[list.Items[i].Name] = &list.Items[i]
		}
	}
	return max(n, policy.Unsettled(live)), nil
}

// deliverResult is what became of one artifact.
type deliverResult struct {
	err      error
	wrote    bool
	lagging  bool // the cache is behind our own write: look again shortly
	pending  bool // waiting for its VidraResource to finish deleting
	deferred bool // left for a later pass: the sync's apply window is full
	// shrink: new content for an existing VidraResource that drops objects it applied; written
	// only once the prune guard weighed the whole pass (a content emptied in place is a prune).
	shrink *shrink
}

// shrink is a content update held for the prune guard.
type shrink struct {
	vr       *infrahubv1alpha1.VidraResource
	art      infrahub.Artifact
	manifest string
	lost     int // objects of its inventory the new content no longer names
}

// deliverAll delivers every artifact, a few at a time: downloads are network-bound.
func (r *InfrahubSyncReconciler) deliverAll(ctx context.Context, c client.Client, ic *infrahub.Client, s *infrahubv1alpha1.InfrahubSync, arts []infrahub.Artifact, target infrahub.Target, handover map[string]*infrahubv1alpha1.VidraResource, budget *policy.ByteBudget, slots *policy.WriteSlots) []deliverResult {
	results := make([]deliverResult, len(arts))
	sem := make(chan struct{}, r.downloads)
	var wg sync.WaitGroup
	seen := map[string]bool{}
	for i, a := range arts {
		if seen[a.ID] { // an id twice in one answer: deliver it once
			continue
		}
		seen[a.ID] = true
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = r.deliver(ctx, c, ic, s, a, target, handover[a.ID], budget, slots)
		}()
	}
	wg.Wait()
	return results
}

// deliver makes the artifact's VidraResource current. The artifact is downloaded only when its
// checksum differs from the one the VidraResource was written with, or the manifest there was
// edited by hand (defect 1; storage ids do not change with content, so they are not compared).
func (r *InfrahubSyncReconciler) deliver(ctx context.Context, c client.Client, ic *infrahub.Client, s *infrahubv1alpha1.InfrahubSync, a infrahub.Artifact, target infrahub.Target, from *infrahubv1alpha1.VidraResource, budget *policy.ByteBudget, slots *policy.WriteSlots) deliverResult {
	vr := &infrahubv1alpha1.VidraResource{}
	err := c.Get(ctx, client.ObjectKey{Name: a.ID}, vr)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("reading VidraResource %s: %w", a.ID, err))}
	}
	if exists {
		if !apply.OwnedBy(vr, s) {
			return deliverResult{err: lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict, "artifact %s: VidraResource %s exists and is not controlled by this InfrahubSync (%s)", a.ID, a.ID, controllerName(metav1.GetControllerOf(vr)))}
		}
		if !vr.DeletionTimestamp.IsZero() {
			// Being removed (by hand, say): its delete event brings the pass that recreates it.
			// Not a retry: a deletion stuck on its finalizer must not turn into a query loop.
			return deliverResult{pending: true}
		}
	}
	// The cache holds no manifest, only its digest (manifests/cachedmanifest.go).
	hash, size := manifests.Digest(vr)
	contentCurrent := exists && vr.Annotations[manifests.ChecksumAnnotation] == a.Checksum &&
		vr.Annotations[manifests.ManifestHashAnnotation] == hash
	seal := r.resourceSeal(ctx, s)
	if contentCurrent && vr.Labels[manifests.SyncLabel] == s.Name && vr.Spec.Destination == s.Spec.Destination &&
		slices.Equal(vr.Spec.DependsOn, s.Spec.DependsOn) && slices.Equal(vr.Spec.HealthExpressions, s.Spec.HealthExpressions) &&
		vr.Spec.DriftPolicy == s.Spec.DriftPolicy &&
		vr.Annotations[manifests.ArtifactNameAnnotation] == a.Name && r.sealCurrent(ctx, vr, seal) {
		if err := budget.Take(a.ID, size); err != nil {
			return deliverResult{err: err}
		}
		return deliverResult{}
	}
	if !slots.Take() {
		return deliverResult{deferred: true} // neither downloaded nor written: a later pass
	}
	manifest := ""
	if !contentCurrent {
		content, err := ic.DownloadArtifact(ctx, a.ID, target)
		if err != nil {
			return deliverResult{err: err}
		}
		manifest, size = string(content.Data), len(content.Data)
	}
	if err := budget.Take(a.ID, size); err != nil {
		return deliverResult{err: err}
	}
	if !exists {
		return r.create(ctx, c, s, a, manifest, from, seal)
	}
	if !contentCurrent {
		lost, err := r.shrinkOf(ctx, vr, manifest)
		if err != nil {
			return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, err)}
		}
		if lost > 0 {
			return deliverResult{shrink: &shrink{vr: vr, art: a, manifest: manifest, lost: lost}}
		}
	}
	return r.update(ctx, c, s, a, vr, manifest, contentCurrent, seal)
}

// update writes what the sync owns of an existing VidraResource: its manifest only when
// contentCurrent is false.
func (r *InfrahubSyncReconciler) update(ctx context.Context, c client.Client, s *infrahubv1alpha1.InfrahubSync, a infrahub.Artifact, vr *infrahubv1alpha1.VidraResource, manifest string, contentCurrent bool, seal sealing.Level) deliverResult {
	base := vr.DeepCopy()
	if !contentCurrent {
		// The cached copy holds no manifest: a base that differs from any makes the patch
		// carry the new one, even when it is empty.
		base.Spec.Manifest = "\x00"
	}
	r.shape(vr, s, a, manifest, !contentCurrent)
	if err := r.sealResource(ctx, vr, seal, !contentCurrent); err != nil {
		return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("sealing VidraResource %s: %w", a.ID, err))}
	}
	if err := c.Patch(ctx, vr, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return deliverResult{lagging: true}
		}
		return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("updating VidraResource %s: %w", a.ID, err))}
	}
	return deliverResult{wrote: true}
}

func (r *InfrahubSyncReconciler) create(ctx context.Context, c client.Client, s *infrahubv1alpha1.InfrahubSync, a infrahub.Artifact, manifest string, from *infrahubv1alpha1.VidraResource, seal sealing.Level) deliverResult {
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: a.ID}}
	r.shape(vr, s, a, manifest, true)
	if from != nil {
		// The same artifact under a new id: the new VidraResource takes the old one's objects
		// over (their owner marks move to it on its first apply), and the old one is deleted
		// only after that, so its finalizer finds nothing of them left to remove.
		vr.Annotations[infrahubv1alpha1.HandoverAnnotation] = from.Name + ":" + string(from.UID)
		logf.FromContext(ctx).Info("artifact id changed: handing its objects over", "from", from.Name, "to", a.ID)
	}
	// The VidraResource controller would add its finalizer as its first step; adding it here
	// saves a write and a pass per artifact.
	lifecycle.AddFinalizer(vr, manifests.Finalizer)
	if err := controllerutil.SetControllerReference(s, vr, r.scheme); err != nil {
		return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, err)}
	}
	if err := r.sealResource(ctx, vr, seal, true); err != nil {
		return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("sealing VidraResource %s: %w", a.ID, err))}
	}
	err := c.Create(ctx, vr)
	if apierrors.IsAlreadyExists(err) {
		// Our cache missed it: either it is ours and the cache lags, or it is someone else's.
		live := &infrahubv1alpha1.VidraResource{}
		if gerr := r.apiReader.Get(ctx, client.ObjectKey{Name: a.ID}, live); gerr == nil {
			if !apply.OwnedBy(live, s) {
				return deliverResult{err: lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict, "artifact %s: VidraResource %s exists and is not controlled by this InfrahubSync (%s)", a.ID, a.ID, controllerName(metav1.GetControllerOf(live)))}
			}
		}
		return deliverResult{lagging: true}
	}
	if err != nil {
		return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("creating VidraResource %s: %w", a.ID, err))}
	}
	return deliverResult{wrote: true}
}

// shape sets what the sync owns of a VidraResource: the manifest only with newContent (the
// one it has is current, and the cached copy does not hold it).
func (r *InfrahubSyncReconciler) shape(vr *infrahubv1alpha1.VidraResource, s *infrahubv1alpha1.InfrahubSync, a infrahub.Artifact, manifest string, newContent bool) {
	if vr.Labels == nil {
		vr.Labels = map[string]string{}
	}
	vr.Labels[manifests.SyncLabel] = s.Name
	if vr.Annotations == nil {
		vr.Annotations = map[string]string{}
	}
	vr.Annotations[manifests.ChecksumAnnotation] = a.Checksum
	vr.Annotations[manifests.ArtifactNameAnnotation] = a.Name
	vr.Spec.Destination = s.Spec.Destination
	vr.Spec.DependsOn = slices.Clone(s.Spec.DependsOn)
	vr.Spec.HealthExpressions = slices.Clone(s.Spec.HealthExpressions)
	vr.Spec.DriftPolicy = s.Spec.DriftPolicy
	if newContent {
		vr.Annotations[manifests.ManifestHashAnnotation] = manifests.Hash(manifest)
		vr.Spec.Manifest = manifest
	}
	if newContent || vr.Spec.ReconciledAt == nil {
		t := metav1.NewTime(r.now().Truncate(time.Second))
		vr.Spec.ReconciledAt = &t
	}
}

func controllerName(ref *metav1.OwnerReference) string {
	if ref == nil {
		return "no controller"
	}
	return "controlled by " + ref.Kind + " " + ref.Name + " (" + ref.APIVersion + ", uid " + string(ref.UID) + ")"
}

// resourceSeal is the seal the VidraResources of sync s get: admitted if admission sealed s,
// else only the mark that the operator wrote them for s.
func (r *InfrahubSyncReconciler) resourceSeal(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) sealing.Level {
	if level, _ := r.seals.Level(ctx, s); level == sealing.Admitted {
		return sealing.Admitted
	}
	return sealing.Owned
}

// sealCurrent: vr carries a valid seal of exactly level (a sync sealed or re-admitted since it
// was written raises it; one whose seal broke lowers it).
func (r *InfrahubSyncReconciler) sealCurrent(ctx context.Context, vr *infrahubv1alpha1.VidraResource, level sealing.Level) bool {
	if r.seals.AssumeSealed {
		return true
	}
	got, _ := r.seals.Level(ctx, vr)
	return got == level
}

// sealResource seals vr, which the sync is about to write, at level. With newContent the
// manifest vr holds is the one written, even when empty (not the cache's record of the old).
func (r *InfrahubSyncReconciler) sealResource(ctx context.Context, vr *infrahubv1alpha1.VidraResource, level sealing.Level, newContent bool) error {
	if newContent {
		if v, ok := vr.Annotations[manifests.CachedManifestAnnotation]; ok {
			delete(vr.Annotations, manifests.CachedManifestAnnotation)
			defer func() { vr.Annotations[manifests.CachedManifestAnnotation] = v }()
		}
	}
	return r.seals.Seal(ctx, vr, level)
}
