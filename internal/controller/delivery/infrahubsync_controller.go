package delivery

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/depends"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// vrControllerIndex indexes VidraResources by the UID of their controlling InfrahubSync.
const vrControllerIndex = ".metadata.controllerUID"

// lagRetry is how soon a pass that found the cache behind a write it just made looks again.
const lagRetry = time.Second

// dependencyRecheck is how often a sync or VidraResource held back by spec.dependsOn looks
// again without a dependency's change bringing it.
const dependencyRecheck = time.Minute

// InfrahubSyncReconciler keeps one VidraResource per artifact that the stored query returns:
// it downloads only artifacts whose checksum changed, and deletes only its own VidraResources
// that left the result.
type InfrahubSyncReconciler struct {
	client    client.Client // the manager's: cached reads
	apiReader client.Reader // uncached, to tell a lagging cache from a foreign object
	scheme    *runtime.Scheme
	settings  *policy.SettingsSource
	creds     *target.Credentials
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
	limits policy.Limits
	// hosts bounds the passes that query one Infrahub host at once.
	hosts *policy.HostGate
	lc    *lifecycle.Reconciler[*infrahubv1alpha1.InfrahubSync]
	now   func() time.Time
	// identity refuses, before anything is queried, a destination its VidraResources could
	// not act as (a writer-named ServiceAccount without admission, the operator's own).
	identity *target.Identity
	// inventories tell the prune guard how many objects a deletion removes.
	inventories *apply.InventoryStore
	// seals verify what admission judged of a sync, and seal the VidraResources written for it.
	seals *sealing.Sealer

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
	settings policy.Settings
	out      syncOutcome
	// summaryOnly: nothing changed since the last successful query, which is not due yet: the
	// pass only summarises the VidraResources (a report of theirs brought it).
	summaryOnly bool
	summary     infrahubv1alpha1.ResourcesSummary
	anyPending  bool
	// waitingOn is the dependency (spec.dependsOn) that holds the sync back, cycle the
	// dependency cycle through it: either way the pass queries and delivers nothing.
	waitingOn *depends.NotReady
	cycle     []string
}

func (r *InfrahubSyncReconciler) handle(ctx context.Context, lp *lifecycle.Pass[*infrahubv1alpha1.InfrahubSync]) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, &syncPass{Pass: lp, settings: r.settings.Current(ctx)},
		// The garbage collector removes a deleted sync's VidraResources.
		lifecycle.OnDeletion(func(context.Context, *syncPass) (lifecycle.Result, error) { return lifecycle.Done(), nil }),
		r.dependStep,
		r.syncStep,
		r.summarize,
		r.report,
	)
}

// dependStep holds the sync back while spec.dependsOn leads back to it or names a sync not
// ready for it (depends.Check): nothing is queried or delivered, and the report says which.
// The dependency's status changes bring the next pass (setup's watch).
func (r *InfrahubSyncReconciler) dependStep(ctx context.Context, p *syncPass) (lifecycle.Result, error) {
	deps := p.Obj.Spec.DependsOn
	if len(deps) == 0 {
		return lifecycle.Continue(), nil
	}
	g, err := depends.Load(ctx, p.Client())
	if err != nil {
		return lifecycle.Result{}, err
	}
	if p.cycle = g.Cycle(p.Obj.Name, deps); p.cycle != nil {
		return lifecycle.Continue(), nil
	}
	p.waitingOn, err = depends.Check(ctx, p.Client(), deps)
	return lifecycle.Continue(), err
}

// syncStep brings the VidraResources in line with the query; a cache behind our own writes
// ends the pass to look again shortly, before anything is reported from it.
func (r *InfrahubSyncReconciler) syncStep(ctx context.Context, p *syncPass) (lifecycle.Result, error) {
	if p.waitingOn != nil || p.cycle != nil {
		p.out.keep = true
		return lifecycle.Continue(), nil
	}
	if !r.queryDue(ctx, p) {
		p.summaryOnly = true // the last query succeeded: nothing is held
		return r.clearPruneRecord(ctx, p, true)
	}
	if e, err := target.ParseEndpoint(p.Obj.Spec.Source.InfrahubAPIURL); err == nil { // a bad URL fails in sync
		leave, ok := r.hosts.Enter(e.String())
		if !ok {
			logf.FromContext(ctx).V(1).Info("Infrahub host busy with other syncs' passes; queued again", "host", e.String())
			return lifecycle.RequeueAfter(policy.BusyRetry(), "Infrahub host busy"), nil
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
		return policy.Unsettled(owned) <= r.limits.WithDefaults().ForSync(s).ApplyWindow/2
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
	names := slices.Sorted(maps.Keys(owned))
	for _, name := range names {
		vr := owned[name]
		if c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionHealthy); c != nil && c.Status == metav1.ConditionTrue &&
			vr.Status.ObservedGeneration == vr.Generation {
			sum.Healthy++
		}
		switch vr.Status.DeployState {
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
	st.WaitingOn = ""
	switch {
	case p.cycle != nil:
		st.SyncState = infrahubv1alpha1.StateFailed
		msg := fmt.Sprintf("spec.dependsOn leads back to this sync: %s; nothing is delivered", depends.Describe(p.cycle))
		if rep.Failed(lifecycle.Reasonf(infrahubv1alpha1.ReasonDependencyCycle, "%s", msg)) {
			r.recorder.Eventf(s, nil, "Warning", infrahubv1alpha1.ReasonDependencyCycle, "Sync", "%s", clipNote(msg))
		}
		lifecycle.SetCondition(&st.Conditions, s.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonDependencyCycle, clip(msg))
	case p.waitingOn != nil:
		st.SyncState, st.WaitingOn = infrahubv1alpha1.StatePending, p.waitingOn.Name
		msg := "waiting on " + p.waitingOn.Error() + "; nothing is delivered until it is Succeeded and every VidraResource of it Healthy"
		if cur := meta.FindStatusCondition(st.Conditions, infrahubv1alpha1.ConditionReady); cur == nil || cur.Reason != infrahubv1alpha1.ReasonDependencyNotReady ||
			s.Status.WaitingOn != p.waitingOn.Name {
			r.recorder.Eventf(s, nil, "Normal", infrahubv1alpha1.ReasonDependencyNotReady, "Sync", "%s", clipNote(msg))
		}
		lifecycle.SetCondition(&st.Conditions, s.Generation, infrahubv1alpha1.ConditionReady, metav1.ConditionFalse, infrahubv1alpha1.ReasonDependencyNotReady, clip(msg))
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
	if p.waitingOn != nil || p.cycle != nil {
		// The dependencies' status changes bring the next pass (setup's watch); this is the
		// net under it.
		next = lifecycle.RequeueAfter(min(requeue, dependencyRecheck), "waiting on a dependency")
	}
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
