package delivery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// vrControllerIndex indexes VidraResources by the UID of their controlling InfrahubSync.
const vrControllerIndex = ".metadata.controllerUID"

// lagRetry is how soon a pass that found the cache behind a write it just made looks again.
const lagRetry = time.Second

// InfrahubSyncReconciler keeps one VidraResource per artifact that the stored query returns:
// it downloads only artifacts whose checksum changed, and deletes only its own VidraResources
// that left the result.
type InfrahubSyncReconciler struct {
	client    client.Client // the manager's: cached reads
	apiReader client.Reader // uncached, to tell a lagging cache from a foreign object
	scheme    *runtime.Scheme
	settings  *settingsSource
	creds     *credentials
	clients   *infrahub.Cache
	recorder  recorder.EventRecorder
	downloads int
	// pruneMaxFraction is --delivery-prune-max-fraction: a pass that would delete more of a
	// sync's VidraResources holds until confirmed or agreed by a second answer.
	pruneMaxFraction float64
	// pruneAutoRelease is --delivery-prune-auto-release: a second agreeing answer releases a
	// held prune.
	pruneAutoRelease bool
	// limits bound each sync's artifacts, manifest bytes and pass time.
	limits Limits
	// hosts bounds the passes that query one Infrahub host at once.
	hosts *hostGate
	lc    *lifecycle.Reconciler[*infrahubv1alpha1.InfrahubSync]
	now   func() time.Time
	// identity refuses, before anything is queried, a destination its VidraResources could
	// not act as (a writer-named ServiceAccount without admission, the operator's own).
	identity *identity
	// inventories tell the prune guard how many objects a deletion removes.
	inventories *inventoryStore
	// seals verify what admission judged of a sync, and seal the VidraResources written for it.
	seals *sealer

	mu      sync.Mutex
	queried map[types.UID]queryRecord // the last successful query of each sync
}

// queryRecord is what the last successful query of a sync was made for: a pass brought by a
// VidraResource's report only summarises, unless the sync is due for a query anyway.
type queryRecord struct {
	at          time.Time
	generation  int64
	requestedAt string
	query       string
	ids         []string // the artifacts of the result: each must keep its VidraResource
	// more: artifacts were left for later passes, past the sync's apply window; a pass a
	// VidraResource's report brings queries again once half the window is free.
	more bool
}

// Reconcile runs one pass under the lifecycle discipline; its periodic look follows the sync
// interval of the current settings (lifecycle.Reconciler.ResyncFunc).
func (r *InfrahubSyncReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.lc.Reconcile(ctx, req)
}

// syncOutcome is what a sync pass did, for the report.
type syncOutcome struct {
	err        error
	checksums  []string // id:checksum of every artifact delivered and current
	keep       bool     // keep status.checksums (the pass never got to compare)
	progressed bool     // a VidraResource was written or deleted
	delivered  int
	deferred   int      // artifacts left for later passes: the apply window was full
	retrySoon  bool     // the cache lagged behind our own writes: look again shortly
	ids        []string // the artifacts of the result
	// recordPrune: the pass held a prune seen for the first time; the sync records it
	// (PrunePendingAnnotation) so that a second agreeing answer can release it.
	recordPrune string
}

// syncPass is one pass over an InfrahubSync: what the sync step did, for the report step.
type syncPass struct {
	*lifecycle.Pass[*infrahubv1alpha1.InfrahubSync]
	settings Settings
	out      syncOutcome
	// summaryOnly: nothing changed since the last successful query, which is not due yet: the
	// pass only summarises the VidraResources (a report of theirs brought it).
	summaryOnly bool
	summary     infrahubv1alpha1.ResourcesSummary
	anyPending  bool
}

func (r *InfrahubSyncReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*infrahubv1alpha1.InfrahubSync]) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, &syncPass{Pass: lp, settings: r.settings.Current(ctx)},
		// The garbage collector removes a deleted sync's VidraResources.
		lifecycle.OnDeletion(func(context.Context, *syncPass) (lifecycle.Result, error) { return lifecycle.Done(), nil }),
		r.syncStep,
		r.summarize,
		r.report,
	)
}

// syncStep brings the VidraResources in line with the query; a cache behind our own writes
// ends the pass to look again shortly, before anything is reported from it.
func (r *InfrahubSyncReconciler) syncStep(ctx context.Context, p *syncPass) (lifecycle.Result, error) {
	if !r.queryDue(ctx, p) {
		p.summaryOnly = true // the last query succeeded: nothing is held
		return r.clearPruneRecord(ctx, p, true)
	}
	if e, err := parseEndpoint(p.Obj.Spec.Source.InfrahubAPIURL); err == nil { // a bad URL fails in sync
		leave, ok := r.hosts.enter(e.String())
		if !ok {
			logf.FromContext(ctx).V(1).Info("Infrahub host busy with other syncs' passes; queued again", "host", e.String())
			return lifecycle.RequeueAfter(busyRetry(), "Infrahub host busy"), nil
		}
		defer leave()
	}
	p.out = r.sync(ctx, p.Client(), p.Obj, p.settings)
	if p.out.retrySoon && p.out.err == nil {
		return lifecycle.RequeueAfter(lagRetry, "cache behind our writes"), nil
	}
	r.mu.Lock()
	for uid, rec := range r.queried {
		// A live sync refreshes its record every interval; one this old is a deleted sync's.
		if r.now().Sub(rec.at) > 2*p.settings.RequeueSyncAfter {
			delete(r.queried, uid)
		}
	}
	if p.out.err == nil {
		r.queried[p.Obj.UID] = queryRecord{at: r.now(), generation: p.Obj.Generation,
			requestedAt: p.Obj.Annotations[infrahubv1alpha1.RequestedAtAnnotation], query: p.settings.QueryName, ids: p.out.ids, more: p.out.deferred > 0}
	} else {
		delete(r.queried, p.Obj.UID)
	}
	r.mu.Unlock()
	if p.out.recordPrune != "" {
		// The first answer of a held prune, recorded on the sync: a restart neither loses it
		// nor invents a second agreeing answer. Its event brings the pass that reports it.
		if err := lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
			lifecycle.SetAnnotation(o, infrahubv1alpha1.PrunePendingAnnotation, p.out.recordPrune)
		}); err != nil {
			return lifecycle.Result{}, err
		}
		return lifecycle.Wrote("held prune recorded"), nil
	}
	return r.clearPruneRecord(ctx, p, p.out.err == nil)
}

// clearPruneRecord removes a held prune's record and its confirmation once a pass holds nothing:
// a confirmation is for one prune, and a record kept would let the same answer, seen again
// much later, pass as a second agreeing one.
func (r *InfrahubSyncReconciler) clearPruneRecord(ctx context.Context, p *syncPass, nothingHeld bool) (lifecycle.Result, error) {
	a := p.Obj.Annotations
	_, pending := a[infrahubv1alpha1.PrunePendingAnnotation]
	_, confirm := a[infrahubv1alpha1.ConfirmPruneAnnotation]
	if !nothingHeld || (!pending && !confirm) {
		return lifecycle.Continue(), nil
	}
	if err := lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		lifecycle.RemoveAnnotation(o, infrahubv1alpha1.PrunePendingAnnotation)
		lifecycle.RemoveAnnotation(o, infrahubv1alpha1.ConfirmPruneAnnotation)
	}); err != nil {
		return lifecycle.Result{}, err
	}
	return lifecycle.Wrote("prune record cleared"), nil
}

// queryDue reports whether the pass queries Infrahub: always, unless the last successful query
// was for the same spec, request and settings, its interval has not run out, and every
// VidraResource it delivered is still there (one deleted by hand is re-created at once) and no
// other is (one handing its objects over is deleted once its successor has applied).
func (r *InfrahubSyncReconciler) queryDue(ctx context.Context, p *syncPass) bool {
	s := p.Obj
	r.mu.Lock()
	rec, ok := r.queried[s.UID]
	r.mu.Unlock()
	if !ok || rec.generation != s.Generation || rec.requestedAt != s.Annotations[infrahubv1alpha1.RequestedAtAnnotation] ||
		rec.query != p.settings.QueryName || r.now().Sub(rec.at) >= p.settings.RequeueSyncAfter*9/10 {
		return true
	}
	owned, err := r.ownedResources(ctx, p.Client(), s)
	if err != nil {
		return true
	}
	if rec.more {
		// The rest of the answer waits for room in the apply window: a VidraResource's report
		// only summarises until half of it is free, so a big sync does not query per apply.
		return unsettled(owned) <= r.limits.withDefaults().forSync(s).ApplyWindow/2
	}
	for _, id := range rec.ids {
		if vr, ok := owned[id]; !ok || !vr.DeletionTimestamp.IsZero() {
			return true
		}
	}
	// One the result no longer holds is still there: it waits for its successor to take its
	// objects over, and the pass that deletes it is a querying one.
	return len(owned) > len(rec.ids)
}

// summarize counts the sync's VidraResources by their report: the sync reads Succeeded only
// when every one of them does.
func (r *InfrahubSyncReconciler) summarize(ctx context.Context, p *syncPass) (lifecycle.Result, error) {
	owned, err := r.ownedResources(ctx, p.Client(), p.Obj)
	if err != nil {
		return lifecycle.Result{}, err
	}
	sum := infrahubv1alpha1.ResourcesSummary{Total: int32(len(owned))}
	names := make([]string, 0, len(owned))
	for name := range owned {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch owned[name].Status.DeployState {
		case infrahubv1alpha1.StateSucceeded:
			sum.Succeeded++
		case infrahubv1alpha1.StateFailed:
			if len(sum.Failed) < 20 {
				sum.Failed = append(sum.Failed, name)
			}
		default:
			p.anyPending = true
		}
	}
	p.summary = sum
	return lifecycle.Continue(), nil
}

// sync queries Infrahub and brings the sync's VidraResources in line. It never writes the sync.
func (r *InfrahubSyncReconciler) sync(ctx context.Context, c client.Client, s *infrahubv1alpha1.InfrahubSync, settings Settings) syncOutcome {
	query := settings.QueryName
	src := s.Spec.Source
	limits := r.limits.withDefaults().forSync(s)
	ctx, cancel := context.WithTimeout(ctx, limits.PassTimeout)
	defer cancel()
	target := infrahub.Target{Branch: src.TargetBranch, At: src.TargetDate}
	// An identity its VidraResources could not apply as: nothing is fetched either. A query
	// would only read, with credentials that may be bound to the sync's name alone, what
	// nothing can deliver (with no webhook, anyone may create a sync of that name).
	if _, err := r.identity.actAs(ctx, s.Spec.Destination, r.seals.view(ctx, "InfrahubSync", s)); err != nil {
		if reason, _ := lifecycle.ReasonOf(err); reason == infrahubv1alpha1.ReasonAdmissionRequired || reason == infrahubv1alpha1.ReasonOperatorServiceAccount ||
			reason == infrahubv1alpha1.ReasonUnsealed || reason == infrahubv1alpha1.ReasonNoServiceAccount {
			return syncOutcome{err: err, keep: true}
		}
	}
	if err := infrahub.ValidateTargetDate(src.TargetDate); err != nil {
		return syncOutcome{err: err, keep: true}
	}
	cfg, err := r.creds.config(ctx, s)
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
	if err := tooManyArtifacts(distinctIDs(arts), limits); err != nil {
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

	handover := pairRenamed(arts, owned)
	slots := newWriteSlots(limits.ApplyWindow - unsettled(owned))
	results := r.deliverAll(ctx, c, ic, s, arts, target, handover, newByteBudget(limits.MaxSyncBytes), slots)
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
		case tookOver(successor, vr):
			handedOver = append(handedOver, name)
		default:
			// Kept until its successor has applied: the successor's report brings that pass.
		}
	}
	survivors := slices.Collect(maps.Keys(inResult))
	decision := pruneDecision{}
	stake := pruneStake{doomed: doomed, total: total}
	for _, i := range shrinks {
		sh := results[i].shrink
		stake.shrunk = append(stake.shrunk, sh.vr.Name+"@"+sh.art.Checksum)
		stake.shrunkObjects += sh.lost
	}
	// An empty answer the user allowed is its own confirmation.
	if !(len(arts) == 0 && src.AllowEmpty) && len(doomed)+len(handedOver)+len(shrinks) > 0 {
		if err := r.weigh(ctx, &stake, owned); err != nil {
			// Nothing is deleted on a guess of what it would remove.
			errs = append(errs, lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("weighing the prune: %w", err)))
			doomed, handedOver, shrinks = nil, nil, nil
		} else {
			stake.objects += stake.shrunkObjects
			decision = decidePrune(s, stake, survivors, maxFraction(r.pruneMaxFraction, s), r.now(), r.pruneSettle(settings))
		}
	}
	if !decision.hold {
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
	if decision.reason != "" {
		logf.FromContext(ctx).Info("prune beyond the guard released", "token", decision.token, "why", decision.reason,
			"deleting", len(doomed), "of", total, "objects", stake.objects, "ofObjects", stake.objectsTotal)
	}
	var toDelete []string
	for _, name := range handedOver {
		// One that leaves objects behind goes only with the whole answer weighed, and allowed.
		if !slices.Contains(stake.lossy, name) || (!decision.hold && !stake.unsettled) {
			toDelete = append(toDelete, name)
		}
	}
	if !decision.hold {
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
	if err := deadlineError(ctx, limits, out.delivered, len(inResult)); err != nil {
		out.err = err
	} else if len(errs) > 0 {
		out.err = lifecycle.WithReason(reasonOf(errs[0]), fmt.Errorf("%d of %d artifacts not delivered: %w", len(errs), len(arts), errors.Join(errs...)))
	}
	if decision.hold {
		out.keep = true
		out.recordPrune = decision.record
		held := lifecycle.Reasonf(infrahubv1alpha1.ReasonPruneHeld, "%s", heldMessage(s, decision, stake, maxFraction(r.pruneMaxFraction, s), r.pruneSettle(settings)))
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
		if n, uid, ok := handoverOf(next); ok && n == vr.Name && uid == string(vr.UID) {
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
		if OwnedBy(&list.Items[i], s) { // the index holds the UID; the name must match too
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out, nil
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
func (r *InfrahubSyncReconciler) deliverAll(ctx context.Context, c client.Client, ic *infrahub.Client, s *infrahubv1alpha1.InfrahubSync, arts []infrahub.Artifact, target infrahub.Target, handover map[string]*infrahubv1alpha1.VidraResource, budget *byteBudget, slots *writeSlots) []deliverResult {
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
func (r *InfrahubSyncReconciler) deliver(ctx context.Context, c client.Client, ic *infrahub.Client, s *infrahubv1alpha1.InfrahubSync, a infrahub.Artifact, target infrahub.Target, from *infrahubv1alpha1.VidraResource, budget *byteBudget, slots *writeSlots) deliverResult {
	vr := &infrahubv1alpha1.VidraResource{}
	err := c.Get(ctx, client.ObjectKey{Name: a.ID}, vr)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return deliverResult{err: lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, fmt.Errorf("reading VidraResource %s: %w", a.ID, err))}
	}
	if exists {
		if !OwnedBy(vr, s) {
			return deliverResult{err: lifecycle.Reasonf(infrahubv1alpha1.ReasonOwnershipConflict, "artifact %s: VidraResource %s exists and is not controlled by this InfrahubSync (%s)", a.ID, a.ID, controllerName(metav1.GetControllerOf(vr)))}
		}
		if !vr.DeletionTimestamp.IsZero() {
			// Being removed (by hand, say): its delete event brings the pass that recreates it.
			// Not a retry: a deletion stuck on its finalizer must not turn into a query loop.
			return deliverResult{pending: true}
		}
	}
	// The cache holds no manifest, only its digest (cachedmanifest.go).
	hash, size := manifestDigest(vr)
	contentCurrent := exists && vr.Annotations[ChecksumAnnotation] == a.Checksum &&
		vr.Annotations[ManifestHashAnnotation] == hash
	seal := r.resourceSeal(ctx, s)
	if contentCurrent && vr.Labels[SyncLabel] == s.Name && vr.Spec.Destination == s.Spec.Destination &&
		vr.Annotations[ArtifactNameAnnotation] == a.Name && r.sealCurrent(ctx, vr, seal) {
		if err := budget.take(a.ID, size); err != nil {
			return deliverResult{err: err}
		}
		return deliverResult{}
	}
	if !slots.take() {
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
	if err := budget.take(a.ID, size); err != nil {
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
func (r *InfrahubSyncReconciler) update(ctx context.Context, c client.Client, s *infrahubv1alpha1.InfrahubSync, a infrahub.Artifact, vr *infrahubv1alpha1.VidraResource, manifest string, contentCurrent bool, seal sealLevel) deliverResult {
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

func (r *InfrahubSyncReconciler) create(ctx context.Context, c client.Client, s *infrahubv1alpha1.InfrahubSync, a infrahub.Artifact, manifest string, from *infrahubv1alpha1.VidraResource, seal sealLevel) deliverResult {
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
	lifecycle.AddFinalizer(vr, finalizer)
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
			if !OwnedBy(live, s) {
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
	vr.Labels[SyncLabel] = s.Name
	if vr.Annotations == nil {
		vr.Annotations = map[string]string{}
	}
	vr.Annotations[ChecksumAnnotation] = a.Checksum
	vr.Annotations[ArtifactNameAnnotation] = a.Name
	vr.Spec.Destination = s.Spec.Destination
	if newContent {
		vr.Annotations[ManifestHashAnnotation] = manifestHash(manifest)
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

// report writes the status if, and only if, it changed.
func (r *InfrahubSyncReconciler) report(ctx context.Context, p *syncPass) (lifecycle.Result, error) {
	s, out, requeue := p.Obj, p.out, p.settings.RequeueSyncAfter
	st := s.Status.DeepCopy()
	rep := lifecycle.Report{LastSuccess: &st.LastSyncTime, LastError: &st.LastError}
	st.Resources = p.summary
	if !p.summaryOnly && !out.keep && out.deferred == 0 {
		st.Checksums = out.checksums
	}
	r.mu.Lock()
	rec := r.queried[s.UID]
	r.mu.Unlock()
	waiting := out.deferred
	if p.summaryOnly && rec.more {
		waiting = len(rec.ids) - int(p.summary.Total)
	}
	failed := len(p.summary.Failed) > 0
	switch {
	case out.err != nil: // a summary-only pass has none: it follows a successful query
		st.SyncState = infrahubv1alpha1.StateFailed
		if rep.Failed(out.err) {
			r.recorder.Eventf(s, nil, "Warning", reasonOf(out.err), "Sync", "%s", clipNote(out.err.Error()))
		}
		lifecycle.SetCondition(&st.Conditions, s.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, reasonOf(out.err), clip(out.err.Error()))
	default:
		if !p.summaryOnly {
			rep.Succeeded(r.now(), true) // lastSyncTime: the last successful pass, changed or not
		}
		switch {
		case failed:
			st.SyncState = infrahubv1alpha1.StateFailed
			msg := fmt.Sprintf("%d of %d VidraResources failed: %s", len(p.summary.Failed), p.summary.Total, strings.Join(p.summary.Failed, ", "))
			if cur := meta.FindStatusCondition(st.Conditions, infrahubv1alpha1.ConditionReady); cur == nil || cur.Message != msg {
				r.recorder.Eventf(s, nil, "Warning", infrahubv1alpha1.ReasonResourcesFailed, "Sync", "%s", clipNote(msg))
			}
			lifecycle.SetCondition(&st.Conditions, s.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonResourcesFailed, clip(msg))
			// Failed always says why: the resources' failures are the sync's last error too.
			st.LastError = clip(msg + r.firstFailure(ctx, p.summary.Failed))
		case waiting > 0:
			st.SyncState = infrahubv1alpha1.StateRunning
			lifecycle.SetCondition(&st.Conditions, s.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonResourcesProgressing,
				fmt.Sprintf("%d of %d VidraResources deployed; %d more artifacts follow as these apply (--delivery-sync-apply-window)", p.summary.Succeeded, p.summary.Total, waiting))
		case p.anyPending || out.progressed:
			// A VidraResource written in this pass has not applied yet, and the cache the
			// summary counts from may not even hold it: not Succeeded before its report.
			st.SyncState = infrahubv1alpha1.StateRunning
			lifecycle.SetCondition(&st.Conditions, s.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonResourcesProgressing,
				fmt.Sprintf("%d of %d VidraResources deployed", p.summary.Succeeded, p.summary.Total))
		default:
			st.SyncState = infrahubv1alpha1.StateSucceeded
			lifecycle.SetCondition(&st.Conditions, s.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionTrue, infrahubv1alpha1.ReasonSynced,
				fmt.Sprintf("%d artifacts delivered", p.summary.Total))
		}
	}
	st.ObservedGeneration = s.Generation
	next := lifecycle.RequeueAfter(lifecycle.Jitter(requeue), "sync interval")
	if p.summaryOnly {
		next = lifecycle.RequeueAfter(max(time.Second, rec.at.Add(requeue).Sub(r.now())), "sync interval")
	}
	if waiting > 0 {
		// The reports of the VidraResources written bring the next pass; this is the net
		// under them.
		next = lifecycle.RequeueAfter(lagRetry, "more artifacts to deliver")
	}
	if out.retrySoon {
		next = lifecycle.RequeueAfter(lagRetry, "cache behind our writes")
	}
	if equality.Semantic.DeepEqual(*st, s.Status) {
		return next, nil
	}
	s.Status = *st // the Reconciler writes it
	return next, nil
}

// firstFailure is "; <name>: <its last error>" of the first failed VidraResource that says why.
func (r *InfrahubSyncReconciler) firstFailure(ctx context.Context, failed []string) string {
	for _, name := range failed {
		vr := &infrahubv1alpha1.VidraResource{}
		if err := r.client.Get(ctx, client.ObjectKey{Name: name}, vr); err == nil && vr.Status.LastError != "" {
			return "; " + name + ": " + vr.Status.LastError
		}
	}
	return ""
}

// resourceSeal is the seal the VidraResources of sync s get: admitted if admission sealed s,
// else only the mark that the operator wrote them for s.
func (r *InfrahubSyncReconciler) resourceSeal(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) sealLevel {
	if level, _ := r.seals.level(ctx, s); level == sealAdmitted {
		return sealAdmitted
	}
	return sealOwned
}

// sealCurrent: vr carries a valid seal of exactly level (a sync sealed or re-admitted since it
// was written raises it; one whose seal broke lowers it).
func (r *InfrahubSyncReconciler) sealCurrent(ctx context.Context, vr *infrahubv1alpha1.VidraResource, level sealLevel) bool {
	if r.seals.assumeSealed {
		return true
	}
	got, _ := r.seals.level(ctx, vr)
	return got == level
}

// sealResource seals vr, which the sync is about to write, at level. With newContent the
// manifest vr holds is the one written, even when empty (not the cache's record of the old).
func (r *InfrahubSyncReconciler) sealResource(ctx context.Context, vr *infrahubv1alpha1.VidraResource, level sealLevel, newContent bool) error {
	if newContent {
		if v, ok := vr.Annotations[cachedManifestAnnotation]; ok {
			delete(vr.Annotations, cachedManifestAnnotation)
			defer func() { vr.Annotations[cachedManifestAnnotation] = v }()
		}
	}
	return r.seals.seal(ctx, vr, level)
}

// shrinkOf counts the objects vr's inventory records that manifest, its new content, no longer
// names (by group, kind and name: the namespace a manifest leaves out is the destination's).
// A manifest that does not decode names none of them: applying it fails and removes nothing,
// but it is weighed as the loss it announces.
func (r *InfrahubSyncReconciler) shrinkOf(ctx context.Context, vr *infrahubv1alpha1.VidraResource, manifest string) (int, error) {
	st, err := r.inventories.load(ctx, vr)
	if err != nil {
		return 0, fmt.Errorf("weighing the new content of %s: %w", vr.Name, err)
	}
	if len(st.Objects) == 0 {
		return 0, nil
	}
	named := map[string]bool{}
	if objs, err := decodeManifest(manifest); err == nil {
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			named[gvk.Group+"/"+gvk.Kind+"/"+o.GetName()] = true
		}
	}
	lost := 0
	for _, ref := range st.refs() {
		if !named[ref.GVK.Group+"/"+ref.GVK.Kind+"/"+ref.Name] {
			lost++
		}
	}
	return lost, nil
}

// pruneSettle is how long after a held answer an agreeing one releases it; 0: never (only a
// confirmation does).
func (r *InfrahubSyncReconciler) pruneSettle(settings Settings) time.Duration {
	if !r.pruneAutoRelease {
		return 0
	}
	return settings.RequeueSyncAfter * 9 / 10
}
