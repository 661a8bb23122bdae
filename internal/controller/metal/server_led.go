package metal

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// ledStep sets the locator LED to spec.indicatorLED (Lit, Blinking or Off; empty or Unknown
// leaves it as it is), in any state the server is looked after in. The LED is observed on
// every pass (status.indicatorLED), so setting it needs no record: a pass that finds it as
// asked does nothing, and one that lost its answer sets it again, which is harmless. A system
// that reports no LED is not written blind every pass: nothing is done, and status says nothing.
func (r *ServerReconciler) ledStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	want := string(p.Obj.Spec.IndicatorLED)
	if want == "" || want == string(metalv1alpha1.IndicatorLEDUnknown) || p.sys == nil || p.sys.IndicatorLED == "" ||
		p.sys.IndicatorLED == want || !p.Obj.DeletionTimestamp.IsZero() {
		return lifecycle.Continue(), nil
	}
	if last, ok := r.ledSetAt.Load(p.Obj.UID); ok && last.(ledWrite).led == want && r.Now().Sub(last.(ledWrite).at) < r.Options.RetryAfter {
		return lifecycle.Continue(), nil
	}
	r.ledSetAt.Store(p.Obj.UID, ledWrite{led: want, at: r.Now()})
	if err := p.conn.SetIndicatorLED(p.bctx, p.sysID, want); err != nil {
		if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
			r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, "IndicatorLEDUnsupported", "SetIndicatorLED", "%v", err)
			return lifecycle.Continue(), nil
		}
		return lifecycle.Result{}, fmt.Errorf("setting the locator LED to %s: %w", want, err)
	}
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, "IndicatorLED", "SetIndicatorLED", "locator LED set to %s (was %s)", want, p.sys.IndicatorLED)
	// The LED never holds the lifecycle back: the state's step runs in the same pass, and the
	// next pass observes the LED and reports it.
	p.lookAgain = r.Options.PowerPoll
	return lifecycle.Continue(), nil
}

// ledWrite is the last locator LED write to a server.
type ledWrite struct {
	led string
	at  time.Time
}
