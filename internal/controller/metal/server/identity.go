package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/registry"
)

// A Server acts on one machine, proven before every action: the system it reads must report the
// Server's system UUID (and serial, where both are known). Addresses prove nothing: a DHCP lease
// or an IPAM swap hands a BMC's address to another box, and vendors give every box the same
// system path. The proof is bmc.Expect, under every BMC call of a pass; this file decides what
// the Server expects and what a pass does when another machine answers.

// uniqueStep keeps a pass away from the BMC when another Server names the same system UUID
// (made by hand, or left by a second registration): every such Server reports it and none acts.
// A deleted one that holds nothing lets go without touching the machine; one a claim or a
// maintenance still holds keeps holding it (and counts as a twin to the newcomer, which would
// otherwise rediscover a box in use) until its holder lets go. It reads the cache only.
func (r *Reconciler) uniqueStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	twins, err := twinsOf(ctx, p.c, p.Obj)
	if err != nil || len(twins) == 0 {
		return lifecycle.Continue(), err
	}
	if !p.Obj.DeletionTimestamp.IsZero() && p.Obj.Spec.ServerClaimRef == nil && p.Obj.Spec.ServerMaintenanceRef == nil {
		return r.release(ctx, p)
	}
	return r.refuse(p, metalv1alpha1.ReasonDuplicateIdentity, fmt.Sprintf(
		"system UUID %s is also Server %s: one machine, several Servers; none acts until one remains",
		p.Obj.Spec.SystemUUID, strings.Join(twins, ", ")), nil), nil
}

// twinsOf names the other Servers with s's system UUID that still hold it: live ones, and
// deleted ones whose finalizer is still on (a claim or a maintenance may still hold them).
func twinsOf(ctx context.Context, c client.Reader, s *metalv1alpha1.Server) ([]string, error) {
	u := registry.NormalizeUUID(s.Spec.SystemUUID)
	if u == "" {
		return nil, nil
	}
	list := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, list, client.MatchingFields{index.ServerUUID: u}); err != nil {
		return nil, fmt.Errorf("looking up system %s: %w", s.Spec.SystemUUID, err)
	}
	var names []string
	for i := range list.Items {
		if o := &list.Items[i]; o.UID != s.UID && (o.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(o, Finalizer)) {
			names = append(names, o.Name)
		}
	}
	return names, nil
}

// duplicateBMCStep keeps a Server whose BMC object the BMC controller found to be a second
// registration (DuplicateIdentity: its address or its systems belong to another BMC object)
// from acting through it. The verdict is the BMC controller's, from the live answer; a wiped
// BMC status loses it until that controller's next pass, and the identity check under every
// call still holds meanwhile.
func (r *Reconciler) duplicateBMCStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	ref := p.Obj.Spec.BMCRef
	if ref == nil || ref.Name == "" {
		return lifecycle.Continue(), nil
	}
	b := &metalv1alpha1.BMC{}
	if err := p.c.Get(ctx, client.ObjectKey{Name: ref.Name}, b); err != nil {
		return lifecycle.Continue(), client.IgnoreNotFound(err)
	}
	c := apimeta.FindStatusCondition(b.Status.Conditions, metalv1alpha1.ConditionReady)
	if c == nil || c.Reason != metalv1alpha1.ReasonDuplicateIdentity {
		return lifecycle.Continue(), nil
	}
	return r.refuse(p, metalv1alpha1.ReasonDuplicateIdentity, "BMC "+b.Name+" is a second registration: "+c.Message, nil), nil
}

// identityFailed handles a pass whose BMC answered for another machine. A replaced board the
// user accepted becomes the Server's; otherwise the Server reports what answered and waits,
// acting on nothing, in whatever state it is in: a claimed box elsewhere stays as it is.
func (r *Reconciler) identityFailed(ctx context.Context, p *serverPass, err error) (lifecycle.Result, error) {
	ie, _ := bmc.IdentityOf(err)
	msg := err.Error()
	if ie != nil {
		msg = fmt.Sprintf("the system at %s answers as %s; this Server is %s. Nothing is sent to it. "+
			"A replaced board is accepted with the annotation %s=<its UUID>", p.Obj.Spec.SystemURI, ie.Got, ie.Want, metalv1alpha1.AcceptSystemUUIDAnnotation)
	}
	identityMismatches.Inc()
	return r.refuse(p, metalv1alpha1.ReasonIdentityMismatch, msg, func(st *metalv1alpha1.ServerStatus) {
		lifecycle.SetCondition(&st.Conditions, p.Obj.Generation, metalv1alpha1.ConditionIdentityMismatch, metav1.ConditionTrue,
			metalv1alpha1.ReasonIdentityMismatch, msg)
	}), nil
}

// refuse reports why the pass does not act (Ready False with reason), with an event when that
// is news, and looks again later, backing off like a failing BMC. It does not count towards
// Error: leaving Error would act on the box, and nothing here says the box needs it.
func (r *Reconciler) refuse(p *serverPass, reason, msg string, extra func(*metalv1alpha1.ServerStatus)) lifecycle.Result {
	s := p.Obj
	n := 1
	if v, ok := r.refusals.Load(s.UID); ok {
		n = v.(int) + 1
	}
	r.refusals.Store(s.UID, n)
	st := s.Status.DeepCopy()
	serverstate.Mirror(st, s.Generation, p.state)
	before := apimeta.FindStatusCondition(s.Status.Conditions, metalv1alpha1.ConditionReady)
	lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	if extra != nil {
		extra(st)
	}
	if before == nil || before.Reason != reason || before.Message != msg {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, reason, "Verify", "%s", msg)
	}
	if !equality.Semantic.DeepEqual(*st, s.Status) {
		s.Status = *st // the Reconciler writes it
	}
	return lifecycle.RequeueAfter(bmcaccess.FailureBackoff(r.Options.RetryAfter, r.Options.ServerResync, n, nil), reason)
}

// acceptReplacement makes an accepted replaced board the Server's, once the system that answers
// is the accepted one (connect proved it): first its UUID in spec, then, once the inventory of
// the new board is in status (observe reads it anew when the serial changed), the annotation
// goes. One write per pass.
func (r *Reconciler) acceptReplacement(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	acc := strings.TrimSpace(p.Obj.Annotations[metalv1alpha1.AcceptSystemUUIDAnnotation])
	if acc == "" {
		return lifecycle.Continue(), nil
	}
	if registry.NormalizeUUID(p.Obj.Spec.SystemUUID) != registry.NormalizeUUID(acc) {
		old := p.Obj.Spec.SystemUUID
		uuid := strings.ToLower(strings.TrimSpace(acc))
		// The board accepted may be owed a cleaning by an earlier Server of it (a Server made
		// anew while another board answered recorded that one): the write that makes it this
		// Server's takes the debt on, so no claim sees it Available with the last tenant's disks.
		owed, err := r.owedCleaning(ctx, &metalv1alpha1.Server{Spec: metalv1alpha1.ServerSpec{SystemUUID: uuid}})
		if err != nil {
			return lifecycle.Result{}, err
		}
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonSystemReplaced, "Accept",
			"replaced board accepted: system UUID %s (was %s)", p.sys.UUID, old)
		take := func(s *metalv1alpha1.Server) {
			s.Spec.SystemUUID = uuid
			if owed != nil {
				takeOwed(s, p.state, owed)
			}
		}
		if owed != nil {
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonCleaningOwed, "Clean", "%s", owed.String())
			if p.state == metalv1alpha1.ServerStateAvailable {
				return r.transition(ctx, p, metalv1alpha1.ServerStateCleaning, "replaced board accepted, "+owed.String(), take)
			}
		}
		return lifecycle.Wrote("replaced board accepted"), r.patch(ctx, p, take)
	}
	if p.Obj.Status.SerialNumber != "" && !strings.EqualFold(p.Obj.Status.SerialNumber, p.sys.SerialNumber) {
		return lifecycle.Continue(), nil // observe reads the new board's inventory first
	}
	return lifecycle.Wrote("replacement done"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.RemoveAnnotation(s, metalv1alpha1.AcceptSystemUUIDAnnotation)
	})
}

// takeOwed makes a cleaning owed to the machine a Server has just become the Server of part of
// its own bookkeeping, where its state will act on it: an Available server goes to Cleaning (the
// caller's transition), one in Cleaning starts a round of the wider policy, a Reserved one's
// release is cleaned by it. Elsewhere (Initial, Discovery) the end of discovery reads the record.
func takeOwed(s *metalv1alpha1.Server, state metalv1alpha1.ServerState, owed *cleaning.Owed) {
	switch state {
	case metalv1alpha1.ServerStateAvailable, metalv1alpha1.ServerStateCleaning, metalv1alpha1.ServerStateReserved:
	default:
		return
	}
	policy := owed.Policy
	if mark := metalv1alpha1.CleaningPolicy(s.Annotations[serverstate.CleaningAnnotation]); cleaning.Valid(mark) {
		policy = cleaning.Wider(policy, mark)
	}
	lifecycle.SetAnnotation(s, serverstate.CleaningAnnotation, string(policy))
	lifecycle.SetAnnotation(s, serverstate.CleaningOwedAnnotation, owed.SystemUUID)
	if state == metalv1alpha1.ServerStateCleaning {
		// A round booted for the board before proves nothing about this one.
		lifecycle.RemoveAnnotation(s, serverstate.CleaningRoundAnnotation)
		lifecycle.RemoveAnnotation(s, serverstate.CleaningTasksAnnotation)
	}
}

// isIdentityError reports whether err says another machine answered.
func isIdentityError(err error) bool { return bmc.ReasonOf(err) == bmc.ReasonIdentityMismatch }

// identityMismatches counts the passes that found another machine at a Server's address.
var identityMismatches = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "metalhub_server_identity_mismatches_total",
	Help: "Server passes that found another machine (system UUID or serial) at the Server's address and acted on nothing.",
})

func init() { metrics.Registry.MustRegister(identityMismatches) }
