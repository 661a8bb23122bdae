// Package readiness is the ServerReadinessRule controller: a rule's taint on exactly the servers
// it selects that do not meet its conditions, off for good once a BootstrapOnly rule was met.
package readiness

import (
	"context"
	"fmt"
	"slices"
	"time"

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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/shard"
)

// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverreadinessrules,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=serverreadinessrules/status,verbs=get;update;patch

const (
	// Finalizer lets a deleted rule take its taint off the servers first.
	Finalizer = "metal.metalhub.io/readiness-rule"
	// MetAnnotationPrefix + a rule's name, on a Server, records (the rule's UID) that a
	// BootstrapOnly rule took its taint off for good: bookkeeping, so that a wiped status or a
	// restart never taints the server again.
	MetAnnotationPrefix = "readiness.metalhub.io/"
)

// Reconciler keeps a rule's taint on exactly the servers it selects that do
// not meet its conditions. The taint is in the Server's spec, so it is written with an
// optimistic lock; a conflict leaves that server to the next pass.
type Reconciler struct {
	// Shards, set, limits the reconciler to the objects of the shards this replica holds.
	Shards      *shard.Set
	Client      client.Client
	Recorder    events.EventRecorder
	Concurrency int
}

// SetupWithManager registers the reconciler. A Server's labels, conditions or taints bring the
// rules: they are few, and each pass looks at every server once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	rec := lifecycle.NewReconciler(r.Client, func() *metalv1alpha1.ServerReadinessRule { return &metalv1alpha1.ServerReadinessRule{} }, r.handle)
	b := ctrl.NewControllerManagedBy(mgr).
		Named("serverreadinessrule").
		For(&metalv1alpha1.ServerReadinessRule{}, builder.WithPredicates(lifecycle.Predicate())).
		Watches(&metalv1alpha1.Server{}, handler.EnqueueRequestsFromMapFunc(r.allRules), builder.WithPredicates(readinessRelevant())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.Concurrency, 1)})
	return shard.Gate(r.Shards, mgr.GetCache(), b, rec, func() client.ObjectList { return &metalv1alpha1.ServerReadinessRuleList{} },
		shardkey.ForObject[*metalv1alpha1.ServerReadinessRule]).Complete(rec)
}

func (r *Reconciler) allRules(ctx context.Context, _ client.Object) []reconcile.Request {
	var list metalv1alpha1.ServerReadinessRuleList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, rule := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Name: rule.Name}})
	}
	return reqs
}

// readinessRelevant passes the Server changes a rule judges by.
func readinessRelevant() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*metalv1alpha1.Server)
			n, okN := e.ObjectNew.(*metalv1alpha1.Server)
			if !okO || !okN {
				return true
			}
			return !equality.Semantic.DeepEqual(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
				!sameConditionStatus(o.Status.Conditions, n.Status.Conditions)
		},
	}
}

// sameConditionStatus compares conditions by type and status only (their messages and times
// change without changing what a rule decides).
func sameConditionStatus(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		if i := slices.IndexFunc(b, func(d metav1.Condition) bool { return d.Type == c.Type }); i < 0 || b[i].Status != c.Status {
			return false
		}
	}
	return true
}

type rulePass = lifecycle.Pass[*metalv1alpha1.ServerReadinessRule]

func (r *Reconciler) handle(ctx context.Context, p *rulePass) (lifecycle.Result, error) {
	return lifecycle.Steps(ctx, p,
		lifecycle.OnDeletion(r.release),
		r.ensureFinalizer,
		r.enforce,
	)
}

func (r *Reconciler) ensureFinalizer(ctx context.Context, p *rulePass) (lifecycle.Result, error) {
	if slices.Contains(p.Obj.Finalizers, Finalizer) || p.Obj.Spec.Taint == nil {
		return lifecycle.Continue(), nil
	}
	return lifecycle.Wrote("finalizer added"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		lifecycle.AddFinalizer(o, Finalizer)
	})
}

// release takes the rule's taint and records off every server, then lets the rule go.
func (r *Reconciler) release(ctx context.Context, p *rulePass) (lifecycle.Result, error) {
	if !slices.Contains(p.Obj.Finalizers, Finalizer) {
		return lifecycle.Done(), nil
	}
	var servers metalv1alpha1.ServerList
	if err := p.Client().List(ctx, &servers); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing servers: %w", err)
	}
	key := MetAnnotationPrefix + p.Obj.Name
	for i := range servers.Items {
		s := &servers.Items[i]
		_, recorded := s.Annotations[key]
		if !recorded && (p.Obj.Spec.Taint == nil || !slices.Contains(s.Spec.Taints, *p.Obj.Spec.Taint)) {
			continue
		}
		if err := r.patchServer(ctx, p.Client(), s, func(s *metalv1alpha1.Server) {
			if p.Obj.Spec.Taint != nil {
				s.Spec.Taints = slices.DeleteFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t == *p.Obj.Spec.Taint })
			}
			lifecycle.RemoveAnnotation(s, key)
		}); err != nil {
			return lifecycle.Result{}, fmt.Errorf("releasing server %s: %w", s.Name, err)
		}
	}
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
	})
}

// enforce brings every server in line and reports.
func (r *Reconciler) enforce(ctx context.Context, p *rulePass) (lifecycle.Result, error) {
	rule := p.Obj
	st := rule.Status.DeepCopy()
	if rule.Spec.Taint == nil {
		lifecycle.SetCondition(&st.Conditions, rule.Generation, metalv1alpha1.ConditionReady, metav1.ConditionFalse, metalv1alpha1.ReasonInvalidSpec, "spec.taint is empty: nothing to keep on the servers")
		rule.Status = *st
		return lifecycle.Done(), nil
	}
	sel := labels.Everything()
	if rule.Spec.ServerSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(rule.Spec.ServerSelector); err != nil {
			lifecycle.SetCondition(&st.Conditions, rule.Generation, metalv1alpha1.ConditionReady, metav1.ConditionFalse, metalv1alpha1.ReasonInvalidSpec, "spec.serverSelector: "+err.Error())
			rule.Status = *st
			return lifecycle.Done(), nil
		}
	}
	var servers metalv1alpha1.ServerList
	if err := p.Client().List(ctx, &servers); err != nil {
		return lifecycle.Result{}, fmt.Errorf("listing servers: %w", err)
	}
	taint, key := *rule.Spec.Taint, MetAnnotationPrefix+rule.Name
	var matching, tainted, conflicts int
	for i := range servers.Items {
		s := &servers.Items[i]
		if !s.DeletionTimestamp.IsZero() {
			continue
		}
		has := slices.Contains(s.Spec.Taints, taint)
		match := sel.Matches(labels.Set(s.Labels))
		done := rule.Spec.EnforcementMode == metalv1alpha1.EnforcementBootstrapOnly && s.Annotations[key] == string(rule.UID)
		var mutate func(*metalv1alpha1.Server)
		switch {
		case !match && has:
			// Selected no longer: not the rule's to keep.
			mutate = func(s *metalv1alpha1.Server) {
				s.Spec.Taints = slices.DeleteFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t == taint })
			}
		case !match, done:
		case meetsRule(s, rule.Spec.Conditions):
			if has || rule.Spec.EnforcementMode == metalv1alpha1.EnforcementBootstrapOnly {
				mutate = func(s *metalv1alpha1.Server) {
					s.Spec.Taints = slices.DeleteFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t == taint })
					if rule.Spec.EnforcementMode == metalv1alpha1.EnforcementBootstrapOnly {
						lifecycle.SetAnnotation(s, key, string(rule.UID))
					}
				}
			}
		case !has:
			mutate = func(s *metalv1alpha1.Server) { s.Spec.Taints = append(s.Spec.Taints, taint) }
		}
		if match {
			matching++
		}
		if mutate == nil {
			if match && has {
				tainted++
			}
			continue
		}
		err := r.patchServer(ctx, p.Client(), s, mutate)
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			conflicts++
		case err != nil:
			return lifecycle.Result{}, fmt.Errorf("server %s: %w", s.Name, err)
		}
		if match && slices.Contains(s.Spec.Taints, taint) {
			tainted++
		}
	}
	status, reason := metav1.ConditionTrue, metalv1alpha1.ReasonRuleEnforced
	msg := fmt.Sprintf("%d servers selected, %d tainted %s=%s:%s", matching, tainted, taint.Key, taint.Value, taint.Effect)
	if conflicts > 0 {
		status, reason = metav1.ConditionFalse, metalv1alpha1.ReasonRuleEnforcing
		msg += fmt.Sprintf("; %d servers changed while being written, looked at again", conflicts)
	}
	lifecycle.SetCondition(&st.Conditions, rule.Generation, metalv1alpha1.ConditionReady, status, reason, msg)
	rule.Status = *st // the Reconciler writes it when changed
	if conflicts > 0 {
		return lifecycle.RequeueAfter(time.Second, "servers changed while being written"), nil
	}
	return lifecycle.Done(), nil
}

// patchServer writes a server's taints or records, optimistically locked.
func (r *Reconciler) patchServer(ctx context.Context, c client.Client, s *metalv1alpha1.Server, mutate func(*metalv1alpha1.Server)) error {
	base := s.DeepCopy()
	mutate(s)
	if equality.Semantic.DeepEqual(base, s) {
		return nil
	}
	return c.Patch(ctx, s, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}

// meetsRule reports whether the server's conditions are as the rule requires (a missing one is
// Unknown).
func meetsRule(s *metalv1alpha1.Server, reqs []metalv1alpha1.ConditionRequirement) bool {
	for _, req := range reqs {
		got := metav1.ConditionUnknown
		if i := slices.IndexFunc(s.Status.Conditions, func(c metav1.Condition) bool { return c.Type == req.Type }); i >= 0 {
			got = s.Status.Conditions[i].Status
		}
		if got != req.RequiredStatus {
			return false
		}
	}
	return true
}
