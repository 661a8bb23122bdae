package bmccontroller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func bmcOperation(op string) bool { return op == metalv1alpha1.OperationGracefulRestartBMC }

func (r *Reconciler) resetSettle() time.Duration {
	if r.ResetSettle <= 0 {
		return intent.DefaultResetSettle
	}
	return r.ResetSettle
}

// operation carries out the one-off operation asked for on a BMC with the operation annotation,
// through the same intent as a server's (intent.Annotation): recorded with an optimistic
// lock before the reset, reported by the pass after, never issued twice. It runs only in a pass
// whose inspection of the BMC (p.info) just succeeded, within that pass's BMC deadline.
func (r *Reconciler) operation(ctx context.Context, p *bmcPass) (lifecycle.Result, error) {
	b, c, info := p.Obj, p.Client(), p.info
	i, pending := intent.Parse(b.Annotations[intent.Annotation], bmcOperation)
	op, asked := b.Annotations[metalv1alpha1.OperationAnnotation]
	switch {
	case pending && i.Phase == intent.Checking:
		return r.checkReset(ctx, p.Pass, i, info)
	case pending && i.Phase == intent.Owed:
	case !asked:
		return lifecycle.Continue(), nil
	case bmcOperation(op) && !pending:
		i = intent.Intent{Op: op, Phase: intent.Owed, At: time.Now(), By: intent.Field(b.Annotations[intent.RequesterAnnotation])}
	default:
		why := "is not supported on a BMC"
		by := intent.Field(b.Annotations[intent.RequesterAnnotation])
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonUnsupportedOperation, "Operation", "operation %q %s; removed", op, why)
		return lifecycle.Wrote("operation " + op + " removed"), lifecycle.PatchMetadata(ctx, c, b, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
			lifecycle.RemoveAnnotation(o, intent.RequesterAnnotation)
			if by != "" {
				lifecycle.SetAnnotation(o, intent.ResultAnnotation, intent.AppendResult(o.GetAnnotations()[intent.ResultAnnotation], by+" "+intent.ResultRefused))
			}
		})
	}
	// The reset needs time of its own: with too little of the deadline left it would be sent
	// and cut off, an unknown outcome for nothing. A BMC slow enough to use most of it answers
	// no faster in the next pass, so the reset gets a request timeout of its own: such a pass
	// takes up to two request timeouts.
	rctx := p.bctx
	if dl, ok := p.bctx.Deadline(); ok && time.Until(dl) < r.requestTimeout()/2 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, r.requestTimeout())
		defer cancel()
	}
	issuing := i.With(intent.Issuing)
	issuing.Sent = time.Now()
	issuing.LastReset = ""
	if !strings.ContainsAny(info.LastResetTime, " \t\r\n") {
		issuing.LastReset = info.LastResetTime
	}
	if err := lifecycle.PatchMetadata(ctx, c, b, func(o client.Object) {
		lifecycle.SetAnnotation(o, intent.Annotation, issuing.String())
		lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
		lifecycle.RemoveAnnotation(o, intent.RequesterAnnotation)
	}); err != nil {
		return lifecycle.Result{}, err
	}
	err := p.conn.ResetManager(rctx)
	if err != nil {
		err = fmt.Errorf("operation %s: %w", i.Op, err)
	}
	r.outcomes.Issued(b.UID, issuing, err)
	return lifecycle.Wrote("operation " + i.Op + " issued"), nil
}

// reportOperation finishes a BMC's intent whose issue a previous pass claimed; it needs no BMC.
// An unknown outcome is settled by the BMC's LastResetTime where the BMC reports one.
func (r *Reconciler) reportOperation(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.BMC], i intent.Intent) (lifecycle.Result, error) {
	rep := r.outcomes.Report(p.Obj.UID, i)
	if rep.Uncertain && i.LastReset != "" {
		rep = intent.Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationUncertain, Next: i.With(intent.Checking).String(),
			Msg: fmt.Sprintf("operation %s may not have reached the BMC: %s; its LastResetTime will tell", i.Op, rep.Cause)}
	}
	r.Recorder.Eventf(p.Obj, nil, rep.EventType, rep.Reason, "Operation", "%s", rep.Msg)
	if err := lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) { intent.End(o, i, rep) }); err != nil {
		return lifecycle.Result{}, err
	}
	if rep.Retry {
		return lifecycle.RequeueAfter(r.RetryAfter, "operation refused"), nil
	}
	return lifecycle.Wrote("operation reported"), nil
}

// checkReset settles a BMC reset of unknown outcome from the BMC's LastResetTime: moved since
// the issue, it was carried out; unchanged a settle time after the issue, it never arrived and
// is owed again. A BMC that stopped saying cannot settle it, and it is not repeated.
func (r *Reconciler) checkReset(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.BMC], i intent.Intent, info *bmc.ManagerInfo) (lifecycle.Result, error) {
	var rep intent.Report
	switch now := info.LastResetTime; {
	case now == "":
		rep = intent.Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationUncertain,
			Msg: fmt.Sprintf("operation %s may not have been carried out and the BMC no longer reports LastResetTime; not repeated: check and ask again if needed", i.Op)}
	case now != i.LastReset:
		rep = intent.Report{EventType: corev1.EventTypeNormal, Reason: metalv1alpha1.ReasonOperation,
			Msg: fmt.Sprintf("operation %s carried out (the BMC's LastResetTime moved from %s to %s)", i.Op, i.LastReset, now)}
	case time.Since(i.Sent) < r.resetSettle():
		return lifecycle.RequeueAfter(time.Until(i.Sent.Add(r.resetSettle())), "operation "+i.Op+" being checked"), nil
	default:
		rep = intent.Report{EventType: corev1.EventTypeWarning, Reason: metalv1alpha1.ReasonOperationFailed, Next: i.With(intent.Owed).String(),
			Msg: fmt.Sprintf("operation %s did not reach the BMC (its LastResetTime is still %s); issuing it again", i.Op, now)}
	}
	r.Recorder.Eventf(p.Obj, nil, rep.EventType, rep.Reason, "Operation", "%s", rep.Msg)
	return lifecycle.Wrote("operation checked"), lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) { intent.End(o, i, rep) })
}
