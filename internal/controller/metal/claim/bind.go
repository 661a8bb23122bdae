package claim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bootrequest"
	"github.com/metalhub/metalhub/internal/controller/metal/claimable"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/metadata"
)

// bind looks for a server for a claim that holds none.
func (r *Reconciler) bind(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim]) (lifecycle.Result, error) {
	c := p.Obj
	sel, bad, err := r.validate(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if bad != nil {
		return r.unbound(ctx, p, bad.Reason, bad.Msg)
	}
	if c.Spec.ServerRef != nil && c.Spec.ServerRef.Name != "" {
		return r.bindNamed(ctx, p, sel)
	}
	return r.bindAny(ctx, p, sel)
}

// validate checks what the user gave: an image, the ignition Secret if one is named, a valid
// selector. A claim with bad input does not bind; fixing it (or creating the Secret) brings it
// back through the watches.
func (r *Reconciler) validate(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim]) (labels.Selector, *bootrequest.Problem, error) {
	c := p.Obj
	sel := labels.Everything()
	if c.Spec.ServerSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(c.Spec.ServerSelector); err != nil {
			return nil, &bootrequest.Problem{Reason: metalv1alpha1.ReasonInvalidSelector, Msg: "spec.serverSelector is invalid: " + err.Error()}, nil
		}
	}
	if bad, err := bootrequest.InputProblem(ctx, p.Client(), c.Namespace, c.Spec.Image, c.Spec.IgnitionSecretRef); err != nil || bad != nil {
		return nil, bad, err
	}
	return sel, nil, nil
}

// bindNamed binds the server the user named in spec.serverRef.
func (r *Reconciler) bindNamed(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], sel labels.Selector) (lifecycle.Result, error) {
	c := p.Obj
	name := c.Spec.ServerRef.Name
	s := &metalv1alpha1.Server{}
	if err := p.Client().Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return r.unbound(ctx, p, metalv1alpha1.ReasonServerNotFound, fmt.Sprintf("server %s does not exist", name))
		}
		return lifecycle.Result{}, fmt.Errorf("reading server %s: %w", name, err)
	}
	if !claimable.Server(s) {
		return r.unbound(ctx, p, metalv1alpha1.ReasonServerNotClaimable, fmt.Sprintf("server %s %s", name, claimable.WhyNot(s)))
	}
	if c.Spec.ServerSelector != nil && !sel.Matches(labels.Set(s.Labels)) {
		return r.unbound(ctx, p, metalv1alpha1.ReasonServerSelectorMismatch, fmt.Sprintf("server %s does not match spec.serverSelector", name))
	}
	if ok, why := claimable.Tolerates(c.Spec.Tolerations, s.Spec.Taints); !ok {
		return r.unbound(ctx, p, metalv1alpha1.ReasonServerNotClaimable, fmt.Sprintf("server %s: %s", name, why))
	}
	if m, err := pendingMaintenance(ctx, p.Client(), name); err != nil || m != "" {
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.unbound(ctx, p, metalv1alpha1.ReasonServerNotClaimable, fmt.Sprintf("server %s awaits maintenance %s", name, m))
	}
	if paused, err := claimable.BMCPaused(ctx, p.Client(), s); err != nil || paused {
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.unbound(ctx, p, metalv1alpha1.ReasonServerNotClaimable, fmt.Sprintf("server %s: its BMC %s is paused", name, s.Spec.BMCRef.Name))
	}
	if only, whose, err := claimable.SettingsOnly(ctx, p.Client(), s); err != nil || only {
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.unbound(ctx, p, metalv1alpha1.ReasonServerNotClaimable, fmt.Sprintf("server %s is settings-only (marked on %s): its power and boot belong to another system", name, whose))
	}
	if r.lockedByOther(name, c.UID) {
		return lifecycle.RequeueAfter(lifecycle.StaleRetry, "server being bound by another claim"), nil
	}
	return r.claimServer(ctx, p, s)
}

// bindAny binds one of the claimable servers that match the claim's selector (any, without
// one). Candidates come from the claimable index, one bucket at a time starting at a random one,
// read without copying, and the walk within a bucket starts at a random place too: claims created
// together spread over the fleet instead of all racing for the same server, and a pass costs a
// bucket, not the whole free pool.
func (r *Reconciler) bindAny(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], sel labels.Selector) (lifecycle.Result, error) {
	c, cl := p.Obj, p.Client()
	first, busy := rand.N(index.ClaimBuckets), false
	for b := range index.ClaimBuckets {
		list := &metalv1alpha1.ServerList{}
		if err := cl.List(ctx, list, client.MatchingFields{index.ServerClaimable: strconv.Itoa((first + b) % index.ClaimBuckets)},
			client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
			return lifecycle.Result{}, fmt.Errorf("listing claimable servers: %w", err)
		}
		n := len(list.Items)
		if n == 0 {
			continue
		}
		start := rand.N(n)
		for i := range n {
			s := &list.Items[(start+i)%n]
			if r.lockedByOther(s.Name, c.UID) {
				busy = true
				continue
			}
			if ok, _ := claimable.Tolerates(c.Spec.Tolerations, s.Spec.Taints); !ok {
				continue
			}
			if m, err := pendingMaintenance(ctx, cl, s.Name); err != nil {
				return lifecycle.Result{}, err
			} else if m != "" {
				continue
			}
			if paused, err := claimable.BMCPaused(ctx, cl, s); err != nil {
				return lifecycle.Result{}, err
			} else if paused {
				continue
			}
			if only, _, err := claimable.SettingsOnly(ctx, cl, s); err != nil {
				return lifecycle.Result{}, err
			} else if only {
				continue
			}
			return r.claimServer(ctx, p, s.DeepCopy())
		}
	}
	if busy {
		// Only servers other claims are binding right now: one of those may fail.
		return lifecycle.RequeueAfter(lifecycle.StaleRetry, "candidates being bound by other claims"), nil
	}
	reason, msg, err := r.noServerReason(ctx, p, sel)
	if err != nil {
		return lifecycle.Result{}, err
	}
	return r.unbound(ctx, p, reason, msg)
}

// noServerReason says why no server could be bound. It scans the servers matching the selector,
// which only a claim that found no candidate pays for, once per wake-up.
func (r *Reconciler) noServerReason(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], sel labels.Selector) (string, string, error) {
	c := p.Obj
	list := &metalv1alpha1.ServerList{}
	if err := p.Client().List(ctx, list, client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy); err != nil {
		return "", "", fmt.Errorf("listing servers: %w", err)
	}
	what := "no server"
	if c.Spec.ServerSelector != nil {
		what = "no server matches spec.serverSelector"
	}
	if len(list.Items) == 0 {
		return metalv1alpha1.ReasonNoMatchingServer, what, nil
	}
	var taken, tainted, maintained, other int
	for i := range list.Items {
		s := &list.Items[i]
		switch {
		case s.Spec.ServerClaimRef != nil:
			taken++
		case s.Spec.ServerMaintenanceRef != nil:
			maintained++
		case !claimable.Server(s):
			other++
		default:
			if ok, _ := claimable.Tolerates(c.Spec.Tolerations, s.Spec.Taints); !ok {
				tainted++
			} else {
				maintained++ // claimable but a maintenance is pending
			}
		}
	}
	msg := fmt.Sprintf("%d matching servers: %d claimed, %d in or awaiting maintenance, %d with taints not tolerated, %d not Available and off", len(list.Items), taken, maintained, tainted, other)
	if taken == len(list.Items) {
		return metalv1alpha1.ReasonAllMatchingServersTaken, msg, nil
	}
	return metalv1alpha1.ReasonNoClaimableServer, msg, nil
}

// pendingMaintenance returns the name of a live maintenance waiting for the server, if any: a
// server about to go into maintenance is not handed to a claim.
func pendingMaintenance(ctx context.Context, c client.Reader, server string) (string, error) {
	list := &metalv1alpha1.ServerMaintenanceList{}
	if err := c.List(ctx, list, client.MatchingFields{index.MaintenanceServer: server}, client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing maintenances of server %s: %w", server, err)
	}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			return list.Items[i].Namespace + "/" + list.Items[i].Name, nil
		}
	}
	return "", nil
}

// claimServer points the server at the claim (and at the claim's boot configuration, created
// right after) with an optimistic lock. A conflict means someone else changed the server: the pass is
// retried on fresh data, where the server may be taken.
func (r *Reconciler) claimServer(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.ServerClaim], s *metalv1alpha1.Server) (lifecycle.Result, error) {
	c := p.Obj
	if !r.lock(s.Name, c.UID) {
		return lifecycle.RequeueAfter(lifecycle.StaleRetry, "server being bound by another claim"), nil
	}
	// The claim's metadata token is recorded on the server with the binding: the machine's
	// first request may come before the claim's next pass. From the cache only: a token Secret
	// it does not show yet is the next pass's to reconcile with the record.
	token, stored, conflict, err := r.metadataToken(ctx, p.Client(), c, false)
	if err != nil {
		r.unlock(s.Name, c.UID)
		return lifecycle.Result{}, err
	}
	replaced := s.ResourceVersion
	err = lifecycle.PatchMetadata(ctx, p.Client(), s, func(o client.Object) {
		srv := o.(*metalv1alpha1.Server)
		srv.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: c.Namespace, Name: c.Name}
		srv.Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: c.Namespace, Name: c.Name}
		if conflict == "" {
			lifecycle.SetAnnotation(srv, metadata.TokenAnnotation, metadata.TokenRecord(c.UID, token))
		} else {
			lifecycle.RemoveAnnotation(srv, metadata.TokenAnnotation) // an earlier claim's
		}
	})
	if err != nil {
		r.unlock(s.Name, c.UID)
		if apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
			// Lost the race (or the server was claimed in between and CEL refused to re-point
			// it): decide again on fresh data.
			return lifecycle.RequeueAfter(lifecycle.ConflictRetry, "lost the race for "+s.Name), nil
		}
		return lifecycle.Result{}, fmt.Errorf("claiming server %s: %w", s.Name, err)
	}
	r.recordBind(c.UID, s.Name, replaced)
	ctrl.LoggerFrom(ctx).V(1).Info("server reserved for claim", "server", s.Name)
	// With the server ours, its boot configuration and the claim's own record of the server go
	// out together: neither depends on the other, the Server's first look at its claim finds the
	// configuration (Reserved and powered on in one write), and the claim's next pass, brought
	// by its own write, reports Bound. The configuration never goes before the lock: a boot
	// provider serves what a configuration names for its server. A failure of either is the
	// next pass's to retry or report (bound), which finds the server through the index.
	// The configuration is made from a copy of the claim: the record's write decodes the API
	// server's answer into the pass's object meanwhile.
	var sbcErr, tokenErr error
	var wg sync.WaitGroup
	owner, cl := c.DeepCopy(), p.Client()
	wg.Go(func() { _, _, sbcErr = r.ensureBootConfigurationOf(ctx, cl, owner, s) })
	if !stored && conflict == "" {
		wg.Go(func() { _, tokenErr = storeMetadataToken(ctx, cl, owner, token) })
	}
	recErr := r.recordServer(ctx, p, s)
	wg.Wait()
	if sbcErr != nil {
		ctrl.LoggerFrom(ctx).Info("boot configuration not created with the binding; the next pass retries", "server", s.Name, "error", sbcErr.Error())
	}
	if tokenErr != nil {
		ctrl.LoggerFrom(ctx).Info("metadata token Secret not created with the binding; the next pass retries", "server", s.Name, "error", tokenErr.Error())
	}
	if recErr != nil {
		ctrl.LoggerFrom(ctx).Info("server not recorded in the claim with the binding; the next pass retries", "server", s.Name, "error", recErr.Error())
		return lifecycle.RequeueAfter(lifecycle.ConflictRetry, "recording the server in the claim"), nil
	}
	// The claim's own watch event brings the next pass, ahead of claims not yet bound; the
	// requeue is a safety net, and carries the priority.
	return lifecycle.RequeueAfter(time.Second, "server reserved").Ahead(), nil
}
