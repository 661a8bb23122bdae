package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/inventory"
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
// An unknown outcome goes to the checking phase where the system can settle it: its
// LastResetTime (reported before the issue) or, for force-off/on, its power state.
func (r *Reconciler) reportOperation(ctx context.Context, p *serverPass, i intent.Intent) (lifecycle.Result, error) {
	rep := r.outcomes.Report(p.Obj.UID, i)
	if rep.Uncertain && settleable(i) {
		rep = intent.Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationUncertain, Next: i.With(intent.Checking).String(),
			Msg: fmt.Sprintf("operation %s may not have reached the BMC: %s; the system will tell", i.Op, rep.Cause)}
	}
	r.Recorder.Eventf(p.Obj, nil, rep.EventType, rep.Reason, "Operation", "%s", rep.Msg)
	if err := r.patch(ctx, p, func(s *metalv1alpha1.Server) { intent.End(s, i, rep) }); err != nil {
		return lifecycle.Result{}, err
	}
	if rep.Retry {
		return lifecycle.RequeueAfter(r.Options.RetryAfter, "operation refused"), nil
	}
	return lifecycle.Wrote("operation reported"), nil
}

// settleable reports whether the system can say what became of an operation of unknown outcome:
// a system that reported its LastResetTime before the issue, or a force-off/on, whose power
// state says whether it was carried out.
func settleable(i intent.Intent) bool {
	if i.Sent.IsZero() {
		return false
	}
	a := operationActions[i.Op]
	return i.LastReset != "" || a.action == bmc.PowerOff || a.action == bmc.PowerOn
}

func (r *Reconciler) resetSettle() time.Duration {
	if r.Options.BMCResetSettle <= 0 {
		return intent.DefaultResetSettle
	}
	return r.Options.BMCResetSettle
}

// checkOperation settles an operation of unknown outcome from what the system shows now (see
// settleOperation): carried out, owed again, or uncertain and not repeated.
func (r *Reconciler) checkOperation(ctx context.Context, p *serverPass, i intent.Intent) (lifecycle.Result, error) {
	v, why := settleOperation(i, p.sys, r.Now().Sub(i.Sent), r.resetSettle(), r.Options.PowerTimeout)
	var rep intent.Report
	switch v {
	case settleWait:
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "operation "+i.Op+" being checked"), nil
	case settleDone:
		rep = intent.Report{EventType: corev1.EventTypeNormal, Reason: metalv1alpha1.ReasonOperation,
			Msg: fmt.Sprintf("operation %s carried out (%s)", i.Op, why)}
	case settleOwed:
		rep = intent.Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationFailed,
			Next: intent.Intent{Op: i.Op, Phase: intent.Owed, At: i.At, By: i.By}.String(),
			Msg:  fmt.Sprintf("operation %s did not reach the BMC (%s); issuing it again", i.Op, why)}
	default:
		rep = intent.Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationUncertain,
			Msg: fmt.Sprintf("operation %s may not have been carried out (%s); not repeated: check and ask again if needed", i.Op, why)}
	}
	r.Recorder.Eventf(p.Obj, nil, rep.EventType, rep.Reason, "Operation", "%s", rep.Msg)
	return lifecycle.Wrote("operation checked"), r.patch(ctx, p, func(s *metalv1alpha1.Server) { intent.End(s, i, rep) })
}

// settleVerdict is what the checking phase concludes.
type settleVerdict int

const (
	// settleWait: too early to tell.
	settleWait settleVerdict = iota
	// settleDone: carried out.
	settleDone
	// settleOwed: it never arrived; it is issued again.
	settleOwed
	// settleUncertain: the system cannot tell; it is not repeated.
	settleUncertain
)

// settleOperation decides an operation of unknown outcome from the system as it is now, elapsed
// after the issue. A reset that arrived moves LastResetTime within settle; a power change lands
// within powerBound (--power-timeout), and so does a graceful restart, which the OS may take its
// time over. Only what is certain counts:
//   - restarts: LastResetTime moved → carried out; unchanged past the bound with the system On
//     → never arrived; a system that does not say, or one off or in transition with an
//     unchanged LastResetTime past the bound → uncertain.
//   - force-off/on: the system at (or on its way to) the operation's end → carried out (asking
//     again would send nothing); still where it was, LastResetTime unchanged, past the bound →
//     never arrived; else uncertain.
func settleOperation(i intent.Intent, now *bmc.SystemStatus, elapsed, settle, powerBound time.Duration) (settleVerdict, string) {
	a := operationActions[i.Op]
	unchanged := i.LastReset != "" && now.LastResetTime == i.LastReset
	switch a.action {
	case bmc.PowerOff, bmc.PowerOn:
		if reached(now.PowerState, a.ends) || moving(now.PowerState, a.ends) {
			return settleDone, fmt.Sprintf("the system was %s and is %s", orUnknown(i.Power), now.PowerState)
		}
		if elapsed < max(settle, powerBound) {
			return settleWait, ""
		}
		if unchanged && i.Power != "" && now.PowerState == bmc.PowerState(i.Power) {
			return settleOwed, fmt.Sprintf("the system is still %s and its LastResetTime still %s", now.PowerState, now.LastResetTime)
		}
		return settleUncertain, fmt.Sprintf("the system was %s and is %s", orUnknown(i.Power), orUnknown(string(now.PowerState)))
	}
	switch {
	case now.LastResetTime == "":
		return settleUncertain, "the BMC does not report the system's LastResetTime"
	case i.LastReset == "":
		return settleUncertain, "the system's LastResetTime before the issue is unknown"
	case !unchanged:
		return settleDone, fmt.Sprintf("the system's LastResetTime moved from %s to %s", i.LastReset, now.LastResetTime)
	}
	bound := settle
	if a.action == bmc.PowerRestart || now.PowerState != bmc.PowerStateOn {
		bound = max(settle, powerBound)
	}
	if elapsed < bound {
		return settleWait, ""
	}
	if now.PowerState == bmc.PowerStateOn {
		return settleOwed, fmt.Sprintf("the system's LastResetTime is still %s", now.LastResetTime)
	}
	return settleUncertain, fmt.Sprintf("the system is %s and its LastResetTime still %s", orUnknown(string(now.PowerState)), now.LastResetTime)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// issueOperation claims the issue of an operation with one optimistic-lock write (the user's
// annotation, if any, goes in the same write), and only once that write has won, issues it. The
// write is the commit point: nothing is written after the action in this pass, and the write's
// event brings the pass that reports it.
func (r *Reconciler) issueOperation(bctx, ctx context.Context, p *serverPass, i intent.Intent, extra func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	a := operationActions[i.Op]
	// Everything before the reset request comes before the intent: a manager stopped in
	// between then leaves nothing uncertain, and only the request itself lies between the
	// intent and the BMC.
	req, perr := p.conn.PreparePower(bctx, p.sysID, a.action, bmc.WithForceFallback())
	if errors.Is(perr, bmc.ErrNotSent) {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonOperationFailed, "Operation",
			"operation %s not sent yet (%v); will retry", i.Op, perr)
		return lifecycle.RequeueAfter(r.Options.RetryAfter, "operation not sent"), nil
	}
	// What the system says just before the request, for settling an unknown outcome.
	issuing := intent.Intent{Op: i.Op, Phase: intent.Issuing, At: i.At, Sent: r.Now(),
		LastReset: p.sys.LastResetTime, Power: string(p.sys.PowerState), By: i.By}
	if req != nil {
		issuing.LastReset, issuing.Power = req.LastResetTime(), string(req.PowerState())
	}
	issuing.LastReset, issuing.Power = intent.Field(issuing.LastReset), intent.Field(issuing.Power)
	err := r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, intent.Annotation, issuing.String())
		// The operation supersedes our own power action in flight; what it ends in is awaited
		// by the steps that follow, so they do not act on its transient states.
		lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, powerRecord{target: a.ends, at: r.Now()}.String())
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
		aerr = fmt.Errorf("operation %s: %w", i.Op, aerr)
	}
	r.outcomes.Issued(p.Obj.UID, issuing, aerr)
	return lifecycle.Wrote("operation " + i.Op + " issued"), nil
}

// operation carries out the one-off power operation a user asked for with the operation
// annotation, through an intent (park and retry are transitionOperation's).
func (r *Reconciler) operation(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	bctx := p.bctx
	if i, ok := intent.Parse(p.Obj.Annotations[intent.Annotation], serverOperation); ok {
		switch i.Phase {
		case intent.Owed:
			if p.settingsOnly != "" {
				return r.refuseSettingsOnlyOperation(ctx, p, i, true)
			}
			return r.issueOperation(bctx, ctx, p, i, nil)
		case intent.Checking:
			// Nothing else acts on the box until it is settled.
			return r.checkOperation(ctx, p, i)
		}
	}
	op, ok := p.Obj.Annotations[metalv1alpha1.OperationAnnotation]
	if !ok {
		return lifecycle.Continue(), nil
	}
	by := intent.Field(p.Obj.Annotations[intent.RequesterAnnotation])
	clearOp := func(s *metalv1alpha1.Server) {
		lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation)
		lifecycle.RemoveAnnotation(s, intent.RequesterAnnotation)
	}
	if _, ok := operationActions[op]; ok && p.settingsOnly != "" {
		return r.refuseSettingsOnlyOperation(ctx, p, intent.Intent{Op: op, By: by}, false)
	}
	if _, ok := operationActions[op]; ok {
		// No other intent is pending here: reportIssued reports an issuing one first, and an owed
		// one is issued above, so operations run one at a time.
		return r.issueOperation(bctx, ctx, p, intent.Intent{Op: op, Phase: intent.Owed, At: r.Now(), By: by}, clearOp)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonUnsupportedOperation, "Operation", "operation %q is not supported on a server in state %s; removed", op, p.state)
	return lifecycle.Wrote("operation " + op + " removed"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		clearOp(s)
		if by != "" {
			lifecycle.SetAnnotation(s, intent.ResultAnnotation, intent.AppendResult(s.Annotations[intent.ResultAnnotation], by+" "+intent.ResultRefused))
		}
	})
}

// transitionOperation carries out the operations that need no BMC: park, retry, rediscover (a
// transition back to Initial), accept-inventory and clear-hardware-fault:
// they need no BMC, so a dead or failing one does not hold them up. It runs before the BMC is
// reached, unless an operation is pending (which goes first, on the BMC) or the server is
// being deleted.
func (r *Reconciler) transitionOperation(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if !p.Obj.DeletionTimestamp.IsZero() {
		return lifecycle.Continue(), nil
	}
	if _, pending := intent.Parse(p.Obj.Annotations[intent.Annotation], serverOperation); pending {
		return lifecycle.Continue(), nil
	}
	op := p.Obj.Annotations[metalv1alpha1.OperationAnnotation]
	clearOp := func(s *metalv1alpha1.Server) {
		lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation)
		lifecycle.RemoveAnnotation(s, intent.RequesterAnnotation)
	}
	switch {
	case op == metalv1alpha1.OperationPark:
		prev := p.state
		return r.transition(ctx, p, metalv1alpha1.ServerStateParked, "parked by operation annotation", func(s *metalv1alpha1.Server) {
			clearOp(s)
			lifecycle.RemoveAnnotation(s, serverstate.PowerAnnotation)
			lifecycle.SetAnnotation(s, metalv1alpha1.ParkedAnnotation, r.Now().UTC().Format(time.RFC3339))
			lifecycle.SetAnnotation(s, serverstate.PreviousStateAnnotation, string(prev))
		})
	case op == metalv1alpha1.OperationRetry && p.state == metalv1alpha1.ServerStateError:
		return r.transition(ctx, p, previousState(p.Obj), "retry requested", clearOp)
	case op == metalv1alpha1.OperationRediscover && p.state == metalv1alpha1.ServerStateAvailable &&
		p.Obj.Spec.ServerClaimRef == nil && p.Obj.Spec.ServerMaintenanceRef == nil:
		// Initial powers it off and boots a new discovery round; the registry compares what
		// that round finds with the baseline. A claim or maintenance that got there first wins:
		// the operation is then refused by operation (not supported in that state).
		return r.transition(ctx, p, metalv1alpha1.ServerStateInitial, "rediscovery requested", clearOp)
	case op == metalv1alpha1.OperationAcceptInventory:
		return r.acceptInventory(ctx, p, clearOp)
	case op == metalv1alpha1.OperationClearHardwareFault:
		return r.clearHardwareFault(ctx, p, clearOp)
	}
	return lifecycle.Continue(), nil
}

// acceptInventory makes the last discovery's inventory the server's baseline (the record first,
// then the drift annotation goes with the operation in one write: after a crash in between,
// accepting again changes nothing).
func (r *Reconciler) acceptInventory(ctx context.Context, p *serverPass, clearOp func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	var rd client.Reader = p.c
	if r.APIReader != nil {
		rd = r.APIReader
	}
	cm := &corev1.ConfigMap{}
	switch err := rd.Get(ctx, client.ObjectKey{Namespace: r.Options.DiscoveryNamespace, Name: inventory.ObjectName(p.Obj.Name)}, cm); {
	case apierrors.IsNotFound(err):
		// No record (discovered before records were kept): the next discovery starts one.
	case err != nil:
		return lifecycle.Result{}, fmt.Errorf("reading the inventory record: %w", err)
	default:
		rec, err := inventory.Decode(cm)
		if err != nil {
			return lifecycle.Result{}, err
		}
		next, err := inventory.ConfigMap(cm.Namespace, p.Obj.Name, rec.Accept())
		if err != nil {
			return lifecycle.Result{}, err
		}
		cm.Data = next.Data
		if err := p.c.Update(ctx, cm); err != nil {
			return lifecycle.Result{}, fmt.Errorf("accepting the inventory: %w", err)
		}
	}
	if d := p.Obj.Annotations[metalv1alpha1.InventoryDriftAnnotation]; d != "" {
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonInventoryAccepted, "Operation",
			"inventory of the last discovery accepted as the baseline; no longer missing: %s", d)
	}
	return lifecycle.Wrote("inventory accepted"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		clearOp(s)
		lifecycle.RemoveAnnotation(s, metalv1alpha1.InventoryDriftAnnotation)
	})
}
