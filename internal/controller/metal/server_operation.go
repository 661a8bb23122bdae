package metal

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// operationActions maps the power operations to their Redfish reset and the power state they end in.
var operationActions = map[string]struct {
	action bmc.PowerAction
	ends   metalv1alpha1.Power
}{
	metalv1alpha1.OperationGracefulRestartServer: {bmc.PowerRestart, metalv1alpha1.PowerOn},
	metalv1alpha1.OperationHardRestartServer:     {bmc.PowerForceRestart, metalv1alpha1.PowerOn},
	metalv1alpha1.OperationPowerCycleServer:      {bmc.PowerForceRestart, metalv1alpha1.PowerOn},
	metalv1alpha1.OperationForceOffServer:        {bmc.PowerOff, metalv1alpha1.PowerOff},
	metalv1alpha1.OperationForceOnServer:         {bmc.PowerOn, metalv1alpha1.PowerOn},
}

func serverOperation(op string) bool { _, ok := operationActions[op]; return ok }

// reportOperation finishes a server's intent whose issue a previous pass claimed; it needs no BMC.
func (r *ServerReconciler) reportOperation(ctx context.Context, p *serverPass, i opIntent) (lifecycle.Result, error) {
	rep := r.outcomes.report(p.Obj.UID, i)
	r.Recorder.Eventf(p.Obj, nil, rep.eventType, rep.reason, "Operation", "%s", rep.msg)
	if err := r.patch(ctx, p, func(s *metalv1alpha1.Server) { setIntent(s, rep.next) }); err != nil {
		return lifecycle.Result{}, err
	}
	if rep.retry {
		return lifecycle.RequeueAfter(r.Options.RetryAfter, "operation refused"), nil
	}
	return lifecycle.Wrote("operation reported"), nil
}

// issueOperation claims the issue of an operation with one optimistic-lock write (the user's
// annotation, if any, goes in the same write), and only once that write has won, issues it. The
// write is the commit point: nothing is written after the action in this pass, and the write's
// event brings the pass that reports it.
func (r *ServerReconciler) issueOperation(bctx, ctx context.Context, p *serverPass, i opIntent, extra func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	a := operationActions[i.op]
	// Everything before the reset request comes before the intent: a manager stopped in
	// between then leaves nothing uncertain, and only the request itself lies between the
	// intent and the BMC.
	req, perr := p.conn.PreparePower(bctx, p.sysID, a.action, bmc.WithForceFallback())
	if errors.Is(perr, bmc.ErrNotSent) {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonOperationFailed, "Operation",
			"operation %s not sent yet (%v); will retry", i.op, perr)
		return lifecycle.RequeueAfter(r.Options.RetryAfter, "operation not sent"), nil
	}
	issuing := opIntent{op: i.op, phase: intentIssuing, at: i.at}
	err := r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, OperationIntentAnnotation, issuing.String())
		// The operation supersedes our own power action in flight; what it ends in is awaited
		// by the steps that follow, so they do not act on its transient states.
		lifecycle.SetAnnotation(s, PowerAnnotation, powerRecord{target: a.ends, at: r.Now()}.String())
		if extra != nil {
			extra(s)
		}
	})
	if err != nil {
		return lifecycle.Result{}, err
	}
	aerr := perr
	if aerr == nil && req != nil {
		aerr = req.Send()
	}
	if aerr != nil {
		aerr = fmt.Errorf("operation %s: %w", i.op, aerr)
	}
	r.outcomes.issued(p.Obj.UID, issuing, aerr)
	return lifecycle.Wrote("operation " + i.op + " issued"), nil
}

// operation carries out the one-off power operation a user asked for with the operation
// annotation, through an intent (park and retry are transitionOperation's).
func (r *ServerReconciler) operation(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	bctx := p.bctx
	if i, ok := parseOpIntent(p.Obj.Annotations[OperationIntentAnnotation], serverOperation); ok && i.phase == intentOwed {
		return r.issueOperation(bctx, ctx, p, i, nil)
	}
	op, ok := p.Obj.Annotations[metalv1alpha1.OperationAnnotation]
	if !ok {
		return lifecycle.Continue(), nil
	}
	clearOp := func(s *metalv1alpha1.Server) { lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation) }
	if _, ok := operationActions[op]; ok {
		// No other intent is pending here: reportIssued reports an issuing one first, and an owed
		// one is issued above, so operations run one at a time.
		return r.issueOperation(bctx, ctx, p, opIntent{op: op, phase: intentOwed, at: r.Now()}, clearOp)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonUnsupportedOperation, "Operation", "operation %q is not supported on a server in state %s; removed", op, p.state)
	return lifecycle.Wrote("operation " + op + " removed"), r.patch(ctx, p, clearOp)
}

// transitionOperation carries out the operations that are lifecycle transitions, park and retry:
// they need no BMC, so a dead or failing one does not hold them up. It runs before the BMC is
// reached, unless an operation is pending (which goes first, on the BMC) or the server is
// being deleted.
func (r *ServerReconciler) transitionOperation(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if !p.Obj.DeletionTimestamp.IsZero() {
		return lifecycle.Continue(), nil
	}
	if _, pending := parseOpIntent(p.Obj.Annotations[OperationIntentAnnotation], serverOperation); pending {
		return lifecycle.Continue(), nil
	}
	op := p.Obj.Annotations[metalv1alpha1.OperationAnnotation]
	clearOp := func(s *metalv1alpha1.Server) { lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation) }
	switch {
	case op == metalv1alpha1.OperationPark:
		prev := p.state
		return r.transition(ctx, p, metalv1alpha1.ServerStateParked, "parked by operation annotation", func(s *metalv1alpha1.Server) {
			clearOp(s)
			lifecycle.RemoveAnnotation(s, PowerAnnotation)
			lifecycle.SetAnnotation(s, metalv1alpha1.ParkedAnnotation, r.Now().UTC().Format(time.RFC3339))
			lifecycle.SetAnnotation(s, PreviousStateAnnotation, string(prev))
		})
	case op == metalv1alpha1.OperationRetry && p.state == metalv1alpha1.ServerStateError:
		return r.transition(ctx, p, previousState(p.Obj), "retry requested", clearOp)
	}
	return lifecycle.Continue(), nil
}
