package metal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// OperationIntentAnnotation records a one-off power operation (a user's operation annotation, or
// the reboot into a maintenance's boot configuration) from before it is issued until it has been
// reported: "<operation>/<phase>@<unix seconds>". A restart cannot be observed on the BMC
// afterwards, so the intent, not the hardware, says whether it is owed: it is written (with an
// optimistic lock) before the action, the action follows only once that write won, and the
// next pass reports and clears it. A crash or a lost write never issues it twice.
const OperationIntentAnnotation = "lifecycle.metalhub.io/operation"

// Phases of an operation intent.
const (
	// intentOwed: recorded, not issued yet (or refused by the BMC and to be issued again).
	intentOwed = "owed"
	// intentIssuing: the write that claimed the issue won; the action followed in that pass.
	intentIssuing = "issuing"
)

// Event reasons of one-off operations.
const (
	ReasonOperation            = "Operation"
	ReasonOperationFailed      = "OperationFailed"
	ReasonOperationUncertain   = "OperationUncertain"
	ReasonUnsupportedOperation = "UnsupportedOperation"
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

type opIntent struct {
	op, phase string
	at        time.Time
}

// parseOpIntent reads an intent of one of the operations known says it carries out.
func parseOpIntent(v string, known func(op string) bool) (opIntent, bool) {
	rest, at, ok := strings.Cut(v, "@")
	if !ok {
		return opIntent{}, false
	}
	op, phase, ok := strings.Cut(rest, "/")
	secs, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || (phase != intentOwed && phase != intentIssuing) || !known(op) {
		return opIntent{}, false
	}
	return opIntent{op: op, phase: phase, at: time.Unix(secs, 0)}, true
}

func serverOperation(op string) bool { _, ok := operationActions[op]; return ok }

func (i opIntent) String() string {
	return i.op + "/" + i.phase + "@" + strconv.FormatInt(i.at.Unix(), 10)
}

// opOutcomes holds what issuing an operation gave, in this process's memory, until the pass
// after reports it: only the process that issued it knows.
type opOutcomes struct{ m sync.Map }

type opOutcome struct{ err error }

func outcomeKey(uid types.UID, i opIntent) string {
	return string(uid) + "/" + i.op + "@" + strconv.FormatInt(i.at.Unix(), 10)
}

func (o *opOutcomes) issued(uid types.UID, i opIntent, err error) {
	o.m.Store(outcomeKey(uid, i), opOutcome{err: err})
}

// opReport is what the pass after an issue says and writes: next is the intent annotation's new
// value ("" removes it), retry asks for a later look at an operation still owed.
type opReport struct {
	eventType, reason, msg, next string
	retry                        bool
}

// report decides about an intent whose issue a previous pass claimed, and forgets it. Another
// process than the issuer (after a crash, a restart, a leader handover) cannot know whether the
// action reached the BMC, and does not repeat it.
func (o *opOutcomes) report(uid types.UID, i opIntent) opReport {
	v, known := o.m.LoadAndDelete(outcomeKey(uid, i))
	switch {
	case !known:
		return opReport{eventType: corev1.EventTypeWarning, reason: ReasonOperationUncertain,
			msg: fmt.Sprintf("operation %s may not have reached the BMC (the manager stopped while issuing it); not repeated: check and ask again if needed", i.op)}
	case v.(opOutcome).err == nil:
		return opReport{eventType: corev1.EventTypeNormal, reason: ReasonOperation, msg: fmt.Sprintf("operation %s carried out", i.op)}
	case retryable(v.(opOutcome).err):
		// The BMC answered and refused before acting: the operation is still owed.
		return opReport{eventType: corev1.EventTypeWarning, reason: ReasonOperationFailed, retry: true,
			msg:  fmt.Sprintf("operation %s refused, will retry: %v", i.op, v.(opOutcome).err),
			next: opIntent{op: i.op, phase: intentOwed, at: i.at}.String()}
	default:
		return opReport{eventType: corev1.EventTypeWarning, reason: ReasonOperationUncertain,
			msg: fmt.Sprintf("operation %s may not have been carried out (%v); not repeated: check and ask again if needed", i.op, v.(opOutcome).err)}
	}
}

// reportOperation finishes a server's intent whose issue a previous pass claimed; it needs no BMC.
func (r *ServerReconciler) reportOperation(ctx context.Context, p *pass, i opIntent) (lifecycle.Result, error) {
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

// setIntent sets the intent annotation, or removes it for "".
func setIntent(o client.Object, v string) {
	if v == "" {
		lifecycle.RemoveAnnotation(o, OperationIntentAnnotation)
		return
	}
	lifecycle.SetAnnotation(o, OperationIntentAnnotation, v)
}

// retryable reports whether a failed action certainly did not happen: the BMC answered and
// refused it, or the request was never sent (the BMC's breaker was open). A timeout or a dropped
// connection may have carried it out.
func retryable(err error) bool {
	if errors.Is(err, bmc.ErrUnreachable) {
		return true
	}
	switch bmc.ReasonOf(err) {
	case bmc.ReasonUnavailable, bmc.ReasonRejected, bmc.ReasonAuthenticationFailed:
		return true
	}
	return false
}

// issueOperation claims the issue of an operation with one optimistic-lock write (the user's
// annotation, if any, goes in the same write), and only once that write has won, issues it. The
// write is the commit point: nothing is written after the action in this pass, and the write's
// event brings the pass that reports it.
func (r *ServerReconciler) issueOperation(bctx, ctx context.Context, p *pass, i opIntent, extra func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	a := operationActions[i.op]
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
	aerr := p.conn.Power(bctx, p.sysID, a.action, bmc.WithForceFallback())
	if aerr != nil {
		aerr = fmt.Errorf("operation %s: %w", i.op, aerr)
	}
	r.outcomes.issued(p.Obj.UID, issuing, aerr)
	return lifecycle.Wrote("operation " + i.op + " issued"), nil
}

// operation carries out the one-off operation a user asked for with the operation annotation.
// Park and retry are lifecycle transitions; the power operations go through an intent.
func (r *ServerReconciler) operation(bctx, ctx context.Context, p *pass) (lifecycle.Result, bool, error) {
	if i, ok := parseOpIntent(p.Obj.Annotations[OperationIntentAnnotation], serverOperation); ok && i.phase == intentOwed {
		res, err := r.issueOperation(bctx, ctx, p, i, nil)
		return res, true, err
	}
	op, ok := p.Obj.Annotations[metalv1alpha1.OperationAnnotation]
	if !ok {
		return lifecycle.Result{}, false, nil
	}
	clearOp := func(s *metalv1alpha1.Server) { lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation) }
	switch {
	case op == metalv1alpha1.OperationPark:
		prev := p.state
		res, err := r.transition(ctx, p, metalv1alpha1.ServerStateParked, "parked by operation annotation", func(s *metalv1alpha1.Server) {
			clearOp(s)
			lifecycle.RemoveAnnotation(s, PowerAnnotation)
			lifecycle.SetAnnotation(s, metalv1alpha1.ParkedAnnotation, r.Now().UTC().Format(time.RFC3339))
			lifecycle.SetAnnotation(s, PreviousStateAnnotation, string(prev))
		})
		return res, true, err
	case op == metalv1alpha1.OperationRetry && p.state == metalv1alpha1.ServerStateError:
		res, err := r.transition(ctx, p, previousState(p.Obj), "retry requested", clearOp)
		return res, true, err
	}
	if _, ok := operationActions[op]; ok {
		// No other intent is pending here: handle() reports an issuing one first, and an owed
		// one is issued above, so operations run one at a time.
		res, err := r.issueOperation(bctx, ctx, p, opIntent{op: op, phase: intentOwed, at: r.Now()}, clearOp)
		return res, true, err
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, ReasonUnsupportedOperation, "Operation", "operation %q is not supported on a server in state %s; removed", op, p.state)
	return lifecycle.Wrote("operation " + op + " removed"), true, r.patch(ctx, p, clearOp)
}
