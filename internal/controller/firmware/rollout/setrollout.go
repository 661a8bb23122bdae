package rollout

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/controller/firmware/work"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// setChild is one per-server object of a *Set as the rollout sees it.
type setChild struct {
	obj    client.Object
	server string
	// maint is the object's spec.serverMaintenanceRef.
	maint *metalv1alpha1.ObjectReference
	// matches: its template is the set's.
	matches bool
}

// setTarget is one selected target of a *Set.
type setTarget struct {
	name string
	// rank orders targets (lower first); server is the target's Server (nil for a BMC), whose
	// maintenance says whether an ended object has handed it back yet.
	rank   int
	server *metalv1alpha1.Server
}

// serverTargets are the servers selector selects, unclaimed first, then those whose claim's
// owner approved maintenance, then the rest.
func serverTargets(ctx context.Context, c client.Reader, selector metav1.LabelSelector) (map[string]setTarget, error) {
	sel, err := metav1.LabelSelectorAsSelector(&selector)
	if err != nil {
		return nil, lifecycle.WithReason("InvalidSelector", err)
	}
	servers := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, servers, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing servers: %w", err)
	}
	approved, err := approvedClaims(ctx, c)
	if err != nil {
		return nil, err
	}
	out := map[string]setTarget{}
	for i := range servers.Items {
		s := &servers.Items[i]
		out[s.Name] = setTarget{name: s.Name, rank: claimRank(s, approved), server: s}
	}
	return out, nil
}

// setRollout is one pass of a *Set over its children (runSet).
type setRollout struct {
	set      client.Object
	targets  map[string]setTarget
	rollout  *systemv1alpha1.RolloutSpec
	children []setChild
	// newChild makes the object for a server (runSet names it and makes the set its owner).
	newChild func(server string) client.Object
}

// setResult is what runSet found and did, for the set's report.
type setResult struct {
	targets []rolloutTarget
	plan    rolloutPlan
	made    int // children that exist
	waiting bool
}

// runSet carries out one pass of a *Set's rollout: ended children that no longer match (template
// changed, target no longer selected) are deleted so they are planned afresh; the targets are
// put in rollout order; planRollout says which get their object now, and those are made.
func runSet(ctx context.Context, c client.Client, rec events.EventRecorder, in setRollout) (setResult, error) {
	byTarget := map[string]setChild{}
	deleted, extraInFlight := 0, 0
	for _, ch := range in.children {
		t, selected := in.targets[ch.server]
		st := childStateOf(ch.obj.GetAnnotations()[record.Annotation], ch.maint, t.server)
		if (!selected || !ch.matches) && (st == childCompleted || st == childFailed) {
			if ch.obj.GetDeletionTimestamp().IsZero() {
				if err := c.Delete(ctx, ch.obj); err != nil && !apierrors.IsNotFound(err) {
					return setResult{}, fmt.Errorf("deleting %s: %w", ch.obj.GetName(), err)
				}
				deleted++
			}
			continue
		}
		if !selected {
			// No longer selected, but it holds its target while it runs.
			if st.inFlight() {
				extraInFlight++
			}
			continue
		}
		byTarget[ch.server] = ch
	}
	if deleted > 0 {
		return setResult{waiting: true}, nil // their deletion (Owns) brings the next pass
	}
	targets := make([]rolloutTarget, 0, len(in.targets))
	for name, t := range in.targets {
		st := childNone
		if ch, ok := byTarget[name]; ok {
			st = childStateOf(ch.obj.GetAnnotations()[record.Annotation], ch.maint, t.server)
		}
		targets = append(targets, rolloutTarget{name: name, state: st})
	}
	sort.Slice(targets, func(i, j int) bool {
		ri, rj := in.targets[targets[i].name].rank, in.targets[targets[j].name].rank
		if ri != rj {
			return ri < rj
		}
		return targets[i].name < targets[j].name
	})
	plan := planRollout(targets, in.rollout, in.set.GetAnnotations()[systemv1alpha1.RolloutPausedAnnotation] == "true")
	if extraInFlight > 0 {
		plan.create = nil
	}
	for _, name := range plan.create {
		ch := in.newChild(name)
		ch.SetName(work.ChildName(in.set.GetName(), name))
		if err := controllerutil.SetControllerReference(in.set, ch, c.Scheme()); err != nil {
			return setResult{}, err
		}
		if err := c.Create(ctx, ch); err != nil && !apierrors.IsAlreadyExists(err) {
			return setResult{}, fmt.Errorf("creating %s: %w", ch.GetName(), err)
		}
	}
	if len(plan.create) > 0 {
		rec.Eventf(in.set, nil, corev1.EventTypeNormal, "WaveStarted", "Rollout", "wave %d/%d: %d server(s) %v", plan.wave, plan.waves, len(plan.create), plan.create)
	}
	return setResult{targets: targets, plan: plan, made: len(byTarget) + len(plan.create)}, nil
}

// approvedClaims is the set of claims ("namespace/name") whose owner approved maintenance.
func approvedClaims(ctx context.Context, c client.Reader) (map[string]bool, error) {
	list := &metalv1alpha1.ServerClaimList{}
	if err := c.List(ctx, list, client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{metalv1alpha1.MaintenanceApprovedLabel: "true"})}); err != nil {
		return nil, fmt.Errorf("listing approved claims: %w", err)
	}
	out := map[string]bool{}
	for i := range list.Items {
		out[list.Items[i].Namespace+"/"+list.Items[i].Name] = true
	}
	return out, nil
}

// claimRank orders targets: unclaimed servers first, then those whose claim's owner approved
// maintenance, then the rest.
func claimRank(s *metalv1alpha1.Server, approved map[string]bool) int {
	switch cl := s.Spec.ServerClaimRef; {
	case cl == nil:
		return 0
	case approved[cl.Namespace+"/"+cl.Name]:
		return 1
	}
	return 2
}

// childStateOf reads a per-server object's state from its record: ended, it still counts in
// flight until its server is out of its maintenance.
func childStateOf(annotation string, maint *metalv1alpha1.ObjectReference, s *metalv1alpha1.Server) childState {
	rec, ok := record.Parse(annotation)
	switch {
	case !ok || rec.Phase == record.PhaseMaintenance:
		return childPending
	case !rec.Terminal():
		return childInProgress
	}
	if maint != nil && s != nil && s.Spec.ServerMaintenanceRef != nil &&
		s.Spec.ServerMaintenanceRef.Namespace == maint.Namespace && s.Spec.ServerMaintenanceRef.Name == maint.Name {
		return childInProgress // handing the server back
	}
	if rec.Phase == record.PhaseCompleted {
		return childCompleted
	}
	return childFailed
}

// setCounts counts the targets by state.
type setCounts struct {
	pending, inProgress, completed, failed int32
	failedNames                            []string
}

func countTargets(targets []rolloutTarget) setCounts {
	var n setCounts
	for _, t := range targets {
		switch t.state {
		case childPending:
			n.pending++
		case childInProgress:
			n.inProgress++
		case childCompleted:
			n.completed++
		case childFailed:
			n.failed++
			n.failedNames = append(n.failedNames, t.name)
		}
	}
	return n
}

// reportRollout sets the rollout status and condition RolledOut, and tells of a stop once.
func reportRollout(rec events.EventRecorder, set client.Object, conds *[]metav1.Condition, ro *systemv1alpha1.RolloutStatus, res setResult, n setCounts, err error) {
	if err != nil {
		reason, ok := lifecycle.ReasonOf(err)
		if !ok {
			reason = "Error"
		}
		lifecycle.SetCondition(conds, set.GetGeneration(), systemv1alpha1.ConditionRolledOut, metav1.ConditionFalse, reason, err.Error())
		return
	}
	if res.waiting {
		return
	}
	plan := res.plan
	*ro = systemv1alpha1.RolloutStatus{Phase: plan.phase, Wave: plan.wave, Waves: plan.waves, FailedTargets: n.failedNames}
	status, reason, msg := metav1.ConditionFalse, systemv1alpha1.ReasonRolloutRolling, fmt.Sprintf("wave %d of %d", plan.wave, plan.waves)
	switch plan.phase {
	case systemv1alpha1.RolloutDone:
		status, reason, msg = metav1.ConditionTrue, systemv1alpha1.ReasonRolloutComplete, fmt.Sprintf("%d completed, %d failed", n.completed, n.failed)
	case systemv1alpha1.RolloutCanary:
		reason, msg = systemv1alpha1.ReasonRolloutCanary, "canary wave: the rest waits for it to complete"
	case systemv1alpha1.RolloutPaused:
		reason, msg = systemv1alpha1.ReasonRolloutPaused, fmt.Sprintf("paused (%s): no new wave starts", systemv1alpha1.RolloutPausedAnnotation)
	case systemv1alpha1.RolloutStopped:
		reason, msg = systemv1alpha1.ReasonRolloutStopped, fmt.Sprintf("stopped: %d server(s) failed %v; fix them and change the spec, or delete their objects", n.failed, n.failedNames)
	}
	if c := findCondition(*conds, systemv1alpha1.ConditionRolledOut); (c == nil || c.Reason != reason) && plan.phase == systemv1alpha1.RolloutStopped {
		rec.Eventf(set, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonRolloutStopped, "Rollout", "%s", msg)
	}
	lifecycle.SetCondition(conds, set.GetGeneration(), systemv1alpha1.ConditionRolledOut, status, reason, msg)
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// enqueueAll maps any event to every object of a kind: sets are few, and a server's labels,
// claim or maintenance may concern any of them.
func enqueueAll(c client.Reader, list client.ObjectList) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		l := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, l); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		_ = forEachItem(l, func(o client.Object) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		})
		return reqs
	}
}

// setPass is the pass of any *Set: the rollout (runSet) over targets, then the report: counts
// (total selected, objects made, by state) through counts, and condition RolledOut.
func setPass(ctx context.Context, c client.Client, rec events.EventRecorder, in setRollout, terr error,
	conds *[]metav1.Condition, ro *systemv1alpha1.RolloutStatus, counts func(total, made int32, n setCounts)) (lifecycle.Result, error) {
	var res setResult
	err := terr
	if err == nil {
		res, err = runSet(ctx, c, rec, in)
	}
	n := countTargets(res.targets)
	if err == nil && !res.waiting {
		counts(int32(len(res.targets)), int32(res.made), n)
	}
	reportRollout(rec, in.set, conds, ro, res, n, err)
	if _, invalid := lifecycle.ReasonOf(err); invalid {
		return lifecycle.Done(), nil // reported; a spec change brings the next pass
	}
	return lifecycle.Done(), err
}

// indexControllerName indexes per-server objects by the name of the *Set that controls them.
const indexControllerName = "metadata.controller.name"

func controllerName(kind string) client.IndexerFunc {
	return func(obj client.Object) []string {
		if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == kind {
			return []string{ref.Name}
		}
		return nil
	}
}

// forEachItem calls fn on every item of a list.
func forEachItem(l client.ObjectList, fn func(client.Object)) error {
	items, err := apimeta.ExtractList(l)
	if err != nil {
		return err
	}
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			fn(o)
		}
	}
	return nil
}

// bmcTargets are the BMCs selector selects, in name order.
func bmcTargets(ctx context.Context, c client.Reader, selector metav1.LabelSelector) (map[string]setTarget, error) {
	sel, err := metav1.LabelSelectorAsSelector(&selector)
	if err != nil {
		return nil, lifecycle.WithReason("InvalidSelector", err)
	}
	bmcs := &metalv1alpha1.BMCList{}
	if err := c.List(ctx, bmcs, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing BMCs: %w", err)
	}
	out := map[string]setTarget{}
	for i := range bmcs.Items {
		out[bmcs.Items[i].Name] = setTarget{name: bmcs.Items[i].Name}
	}
	return out, nil
}
