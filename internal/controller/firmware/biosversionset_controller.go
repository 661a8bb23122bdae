package firmware

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversionsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversionsets/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=system.metal.ironcore.dev,resources=biosversions,verbs=create;delete
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverclaims,verbs=get;list;watch

// indexVersionSet indexes BIOSVersions by the BIOSVersionSet that controls them.
const indexVersionSet = "metadata.controller.biosversionset"

// BIOSVersionSetReconciler rolls a BIOS version out over the selected servers in waves
// (planRollout): it makes each server's BIOSVersion when its wave comes, and deletes ended ones
// that no longer match (template changed, server no longer selected) so they are made again.
// The per-server objects and their records are the rollout's bookkeeping: nothing of it lives
// in status, which is rebuilt every pass.
type BIOSVersionSetReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	Options  Options
}

// SetupWithManager registers the reconciler.
func (r *BIOSVersionSetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &systemv1alpha1.BIOSVersion{}, indexVersionSet, func(obj client.Object) []string {
		if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "BIOSVersionSet" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing BIOSVersions by set: %w", err)
	}
	rec := lifecycle.NewReconciler(r.Client, func() *systemv1alpha1.BIOSVersionSet { return &systemv1alpha1.BIOSVersionSet{} }, r.handle)
	return ctrl.NewControllerManagedBy(mgr).
		Named("biosversionset").
		For(&systemv1alpha1.BIOSVersionSet{}, builder.WithPredicates(lifecycle.Predicate())).
		// A BIOSVersion's record moving on (its annotation) is the rollout's progress.
		Owns(&systemv1alpha1.BIOSVersion{}, builder.WithPredicates(lifecycle.Predicate())).
		// Selection (labels), claims and maintenance (the order, handing back) are the servers'.
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(r.allSets), builder.WithPredicates(lifecycle.Predicate())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Options.Concurrency/4, 1)}).
		Complete(rec)
}

func (r *BIOSVersionSetReconciler) allSets(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &systemv1alpha1.BIOSVersionSetList{}
	if err := r.Client.List(ctx, list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// childName is the BIOSVersion of set for server: readable, and within the name limit.
func childName(set, server string) string {
	n := set + "-" + server
	if len(n) <= 253 {
		return n
	}
	h := sha256.Sum256([]byte(n))
	return n[:240] + "-" + hex.EncodeToString(h[:])[:12]
}

func (r *BIOSVersionSetReconciler) handle(ctx context.Context, p *lifecycle.Pass[*systemv1alpha1.BIOSVersionSet]) (lifecycle.Result, error) {
	set := p.Obj
	c := p.Client()
	sel, err := metav1.LabelSelectorAsSelector(&set.Spec.ServerSelector)
	if err != nil {
		lifecycle.SetCondition(&set.Status.Conditions, set.Generation, systemv1alpha1.ConditionRolledOut, metav1.ConditionFalse, "InvalidSelector", err.Error())
		return lifecycle.Done(), nil
	}
	servers := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, servers, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing servers: %w", err)
	}
	children := &systemv1alpha1.BIOSVersionList{}
	if err := c.List(ctx, children, client.MatchingFields{indexVersionSet: set.Name}); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing BIOSVersions: %w", err)
	}
	byServer := map[string]*systemv1alpha1.BIOSVersion{}
	for i := range children.Items {
		ch := &children.Items[i]
		if ch.Spec.ServerRef != nil {
			byServer[ch.Spec.ServerRef.Name] = ch
		}
	}
	selected := map[string]*metalv1alpha1.Server{}
	for i := range servers.Items {
		selected[servers.Items[i].Name] = &servers.Items[i]
	}

	// Ended objects that no longer match go, so their servers are planned afresh.
	var deleted int
	for name, ch := range byServer {
		s := selected[name]
		st := childStateOf(ch, s)
		stale := s == nil || !equality.Semantic.DeepEqual(ch.Spec.BIOSVersionTemplate, set.Spec.BIOSVersionTemplate)
		if stale && (st == childCompleted || st == childFailed) && ch.DeletionTimestamp.IsZero() {
			if err := c.Delete(ctx, ch); err != nil && !apierrors.IsNotFound(err) {
				return lifecycle.Result{}, fmt.Errorf("deleting BIOSVersion %s: %w", ch.Name, err)
			}
			deleted++
		}
	}
	if deleted > 0 {
		return lifecycle.Done(), nil // their deletion (Owns) brings the next pass
	}

	claims, err := r.approvals(ctx, c)
	if err != nil {
		return lifecycle.Result{}, err
	}
	targets := make([]rolloutTarget, 0, len(selected))
	rank := map[string]int{}
	for name, s := range selected {
		st := childNone
		if ch := byServer[name]; ch != nil {
			st = childStateOf(ch, s)
		}
		targets = append(targets, rolloutTarget{name: name, state: st})
		rank[name] = claimRank(s, claims)
	}
	// Children of servers no longer selected still hold theirs while they run.
	var extraInFlight int
	for name, ch := range byServer {
		if selected[name] == nil && childStateOf(ch, nil).inFlight() {
			extraInFlight++
		}
	}
	sort.Slice(targets, func(i, j int) bool {
		if rank[targets[i].name] != rank[targets[j].name] {
			return rank[targets[i].name] < rank[targets[j].name]
		}
		return targets[i].name < targets[j].name
	})
	plan := planRollout(targets, set.Spec.Rollout, set.Annotations[systemv1alpha1.RolloutPausedAnnotation] == "true")
	if extraInFlight > 0 {
		plan.create = nil
	}
	for _, name := range plan.create {
		ch := &systemv1alpha1.BIOSVersion{
			ObjectMeta: metav1.ObjectMeta{Name: childName(set.Name, name)},
			Spec: systemv1alpha1.BIOSVersionSpec{BIOSVersionTemplate: *set.Spec.BIOSVersionTemplate.DeepCopy(),
				ServerRef: &corev1.LocalObjectReference{Name: name}},
		}
		if err := controllerutil.SetControllerReference(set, ch, c.Scheme()); err != nil {
			return lifecycle.Result{}, err
		}
		if err := c.Create(ctx, ch); err != nil && !apierrors.IsAlreadyExists(err) {
			return lifecycle.Result{}, fmt.Errorf("creating BIOSVersion %s: %w", ch.Name, err)
		}
	}
	if len(plan.create) > 0 {
		r.Recorder.Eventf(set, nil, corev1.EventTypeNormal, "WaveStarted", "Rollout", "wave %d/%d: %d server(s) %v", plan.wave, plan.waves, len(plan.create), plan.create)
	}
	r.report(set, targets, byServer, plan)
	return lifecycle.Done(), nil
}

// approvals is the set of claims ("namespace/name") whose owner approved maintenance.
func (r *BIOSVersionSetReconciler) approvals(ctx context.Context, c client.Reader) (map[string]bool, error) {
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

// childStateOf reads a BIOSVersion's state from its record: ended, it still counts in flight
// until its server is out of its maintenance.
func childStateOf(ch *systemv1alpha1.BIOSVersion, s *metalv1alpha1.Server) childState {
	rec, ok := parseRecord(ch.Annotations[RecordAnnotation])
	switch {
	case !ok || rec.Phase == phaseMaintenance:
		return childPending
	case !rec.terminal():
		return childInProgress
	}
	if ref := ch.Spec.ServerMaintenanceRef; ref != nil && s != nil && s.Spec.ServerMaintenanceRef != nil &&
		s.Spec.ServerMaintenanceRef.Namespace == ref.Namespace && s.Spec.ServerMaintenanceRef.Name == ref.Name {
		return childInProgress // handing the server back
	}
	if rec.Phase == phaseCompleted {
		return childCompleted
	}
	return childFailed
}

// report rebuilds status from the children and the plan.
func (r *BIOSVersionSetReconciler) report(set *systemv1alpha1.BIOSVersionSet, targets []rolloutTarget, byServer map[string]*systemv1alpha1.BIOSVersion, plan rolloutPlan) {
	st := set.Status.DeepCopy()
	st.ObservedGeneration = set.Generation
	st.FullyLabeledServers = int32(len(targets))
	st.AvailableBIOSVersion = int32(len(byServer))
	st.PendingBIOSVersion, st.InProgressBIOSVersion, st.CompletedBIOSVersion, st.FailedBIOSVersion = 0, 0, 0, 0
	var failed []string
	for _, t := range targets {
		switch t.state {
		case childPending:
			st.PendingBIOSVersion++
		case childInProgress:
			st.InProgressBIOSVersion++
		case childCompleted:
			st.CompletedBIOSVersion++
		case childFailed:
			st.FailedBIOSVersion++
			failed = append(failed, t.name)
		}
	}
	st.Rollout = systemv1alpha1.RolloutStatus{Phase: plan.phase, Wave: plan.wave, Waves: plan.waves, FailedTargets: failed}
	status, reason, msg := metav1.ConditionFalse, systemv1alpha1.ReasonRolloutRolling, fmt.Sprintf("wave %d of %d", plan.wave, plan.waves)
	switch plan.phase {
	case systemv1alpha1.RolloutDone:
		status, reason, msg = metav1.ConditionTrue, systemv1alpha1.ReasonRolloutComplete, fmt.Sprintf("%d completed, %d failed", st.CompletedBIOSVersion, st.FailedBIOSVersion)
	case systemv1alpha1.RolloutCanary:
		reason, msg = systemv1alpha1.ReasonRolloutCanary, "canary wave: the rest waits for it to complete"
	case systemv1alpha1.RolloutPaused:
		reason, msg = systemv1alpha1.ReasonRolloutPaused, fmt.Sprintf("paused (%s): no new wave starts", systemv1alpha1.RolloutPausedAnnotation)
	case systemv1alpha1.RolloutStopped:
		reason, msg = systemv1alpha1.ReasonRolloutStopped, fmt.Sprintf("stopped: %d server(s) failed %v; fix them and change the spec, or delete their BIOSVersions", len(failed), failed)
	}
	if c := findCondition(st.Conditions, systemv1alpha1.ConditionRolledOut); (c == nil || c.Reason != reason) && plan.phase == systemv1alpha1.RolloutStopped {
		r.Recorder.Eventf(set, nil, corev1.EventTypeWarning, systemv1alpha1.ReasonRolloutStopped, "Rollout", "%s", msg)
	}
	lifecycle.SetCondition(&st.Conditions, set.Generation, systemv1alpha1.ConditionRolledOut, status, reason, msg)
	set.Status = *st
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
