package claim

import (
	"context"
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/claimable"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// serverEvents maps a server change to the claims it can affect, and only those: the claim it
// points (or pointed) at, the claims naming it, and — when it just became claimable — a bounded
// number of the oldest waiting claims it could serve.
func (r *Reconciler) serverEvents() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if s, ok := e.Object.(*metalv1alpha1.Server); ok {
				r.enqueueForServer(ctx, nil, s, q)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okO := e.ObjectOld.(*metalv1alpha1.Server)
			s, okN := e.ObjectNew.(*metalv1alpha1.Server)
			if okO && okN && claimRelevant(old, s) {
				r.enqueueForServer(ctx, old, s, q)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if s, ok := e.Object.(*metalv1alpha1.Server); ok {
				r.enqueueForServer(ctx, nil, s, q)
			}
		},
	}
}

// claimRelevant filters server updates: status churn of a server nobody waits for is dropped.
func claimRelevant(old, s *metalv1alpha1.Server) bool {
	if !equality.Semantic.DeepEqual(old.Spec.ServerClaimRef, s.Spec.ServerClaimRef) ||
		!equality.Semantic.DeepEqual(old.Spec.BootConfigurationRef, s.Spec.BootConfigurationRef) ||
		!equality.Semantic.DeepEqual(old.DeletionTimestamp, s.DeletionTimestamp) ||
		claimable.Server(old) != claimable.Server(s) ||
		old.Annotations[lifecycle.StateAnnotation] != s.Annotations[lifecycle.StateAnnotation] {
		return true
	}
	if !equality.Semantic.DeepEqual(old.Labels, s.Labels) || !equality.Semantic.DeepEqual(old.Spec.Taints, s.Spec.Taints) {
		return true
	}
	if s.Spec.ServerClaimRef != nil && !equality.Semantic.DeepEqual(bootCondition(old), bootCondition(s)) {
		return true // the claim mirrors why its image cannot be booted
	}
	// A claim shows its server's settled power (and a deleted claim whose server is in
	// maintenance waits for it to be observed off).
	return s.Spec.ServerClaimRef != nil && old.Status.PowerState != s.Status.PowerState &&
		settledPower(old.Status.PowerState, s.Status.PowerState) != old.Status.PowerState
}

// bootCondition is a server's BootMethod condition without its timestamps, nil when none.
func bootCondition(s *metalv1alpha1.Server) *metav1.Condition {
	c := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionBootMethod)
	if c == nil {
		return nil
	}
	out := *c
	out.LastTransitionTime, out.ObservedGeneration = metav1.Time{}, 0
	return &out
}

func (r *Reconciler) enqueueForServer(ctx context.Context, old, s *metalv1alpha1.Server, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	add := func(ns, name string) {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
	if ref := s.Spec.ServerClaimRef; ref != nil {
		add(ref.Namespace, ref.Name)
	}
	if old != nil && old.Spec.ServerClaimRef != nil {
		add(old.Spec.ServerClaimRef.Namespace, old.Spec.ServerClaimRef.Name)
	}
	named := &metalv1alpha1.ServerClaimList{}
	if err := r.Client.List(ctx, named, client.MatchingFields{index.ClaimServer: s.Name}, client.UnsafeDisableDeepCopy); err == nil {
		for i := range named.Items {
			add(named.Items[i].Namespace, named.Items[i].Name)
		}
	}
	if claimable.Server(s) && (old == nil || !claimable.Server(old) ||
		!equality.Semantic.DeepEqual(old.Labels, s.Labels) || !equality.Semantic.DeepEqual(old.Spec.Taints, s.Spec.Taints)) {
		for _, key := range r.waitingFor(ctx, s) {
			add(key.Namespace, key.Name)
		}
	}
}

// waitingFor picks the waiting claims a freshly claimable server wakes: the oldest ones it could
// serve (selector, tolerations, valid input), skipping claims already woken and not yet run, at
// most WakeFanOut. Oldest first is the fairness rule: a claim that has waited longest gets the
// first chance at a freed server; the fan-out bound keeps one server from waking every waiting
// claim (each of which would list the fleet) while giving it a few tries in case some of those
// claims lose a race to another server.
func (r *Reconciler) waitingFor(ctx context.Context, s *metalv1alpha1.Server) []types.NamespacedName {
	list := &metalv1alpha1.ServerClaimList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.ClaimWaiting: "true"}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	cands := make([]*metalv1alpha1.ServerClaim, 0, len(list.Items))
	for i := range list.Items {
		c := &list.Items[i]
		if strings.TrimSpace(c.Spec.Image) == "" {
			continue
		}
		if c.Spec.ServerSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(c.Spec.ServerSelector)
			if err != nil || !sel.Matches(labels.Set(s.Labels)) {
				continue
			}
		}
		if ok, _ := claimable.Tolerates(c.Spec.Tolerations, s.Spec.Taints); !ok {
			continue
		}
		cands = append(cands, c)
	}
	slices.SortFunc(cands, func(a, b *metalv1alpha1.ServerClaim) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(index.ClaimRefKey(a), index.ClaimRefKey(b))
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []types.NamespacedName
	for _, c := range cands {
		if len(out) >= r.Options.WakeFanOut {
			break
		}
		key := client.ObjectKeyFromObject(c)
		if _, queued := r.woken[key]; queued {
			continue
		}
		if b, ok := r.binds[c.UID]; ok && time.Since(b.at) < bindTTL {
			continue // binding another server right now
		}
		r.woken[key] = struct{}{}
		out = append(out, key)
	}
	return out
}
