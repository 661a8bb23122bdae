package metal

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func bmcOperation(op string) bool { return op == metalv1alpha1.OperationGracefulRestartBMC }

// operation carries out the one-off operation asked for on a BMC with the operation annotation,
// through the same intent as a server's (OperationIntentAnnotation): recorded with an optimistic
// lock before the reset, reported by the pass after, never issued twice.
func (r *BMCReconciler) operation(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.BMC], conn bmc.BMC) (lifecycle.Result, bool, error) {
	b, c := p.Obj, p.Client()
	i, owed := parseOpIntent(b.Annotations[OperationIntentAnnotation], bmcOperation)
	op, asked := b.Annotations[metalv1alpha1.OperationAnnotation]
	switch {
	case owed && i.phase == intentOwed:
	case !asked:
		return lifecycle.Result{}, false, nil
	case bmcOperation(op) && !owed:
		i = opIntent{op: op, phase: intentOwed, at: time.Now()}
	default:
		why := "is not supported on a BMC"
		if op == metalv1alpha1.OperationRotateCredentials {
			why = "is not supported by metalhub yet: the BMC's credentials and its BMCSecret are unchanged"
		}
		r.Recorder.Eventf(b, nil, corev1.EventTypeWarning, ReasonUnsupportedOperation, "Operation", "operation %q %s; removed", op, why)
		return lifecycle.Wrote("operation " + op + " removed"), true, lifecycle.PatchMetadata(ctx, c, b, func(o client.Object) {
			lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
		})
	}
	issuing := opIntent{op: i.op, phase: intentIssuing, at: i.at}
	if err := lifecycle.PatchMetadata(ctx, c, b, func(o client.Object) {
		lifecycle.SetAnnotation(o, OperationIntentAnnotation, issuing.String())
		lifecycle.RemoveAnnotation(o, metalv1alpha1.OperationAnnotation)
	}); err != nil {
		return lifecycle.Result{}, true, err
	}
	bctx, cancel := context.WithTimeout(ctx, r.requestTimeout())
	defer cancel()
	err := conn.ResetManager(bctx)
	if err != nil {
		err = fmt.Errorf("operation %s: %w", i.op, err)
	}
	r.outcomes.issued(b.UID, issuing, err)
	return lifecycle.Wrote("operation " + i.op + " issued"), true, nil
}

// reportOperation finishes a BMC's intent whose issue a previous pass claimed; it needs no BMC.
func (r *BMCReconciler) reportOperation(ctx context.Context, p *lifecycle.Pass[*metalv1alpha1.BMC], i opIntent) (lifecycle.Result, error) {
	rep := r.outcomes.report(p.Obj.UID, i)
	r.Recorder.Eventf(p.Obj, nil, rep.eventType, rep.reason, "Operation", "%s", rep.msg)
	if err := lifecycle.PatchMetadata(ctx, p.Client(), p.Obj, func(o client.Object) { setIntent(o, rep.next) }); err != nil {
		return lifecycle.Result{}, err
	}
	if rep.retry {
		return lifecycle.RequeueAfter(r.RetryAfter, "operation refused"), nil
	}
	return lifecycle.Wrote("operation reported"), nil
}
