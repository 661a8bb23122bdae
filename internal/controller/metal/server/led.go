package server

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// ledStep sets the locator LED: a maintenance's locatorLED while the server is in it, else the
// Server's spec.indicatorLED (Lit, Blinking or Off; empty or Unknown leaves it as it is), in any
// state the server is looked after in. The LED is observed on every pass (status.indicatorLED),
// so setting it needs no record: a pass that finds it as asked does nothing, and one that lost
// its answer sets it again, which is harmless. Only a maintenance's LED is bookkeeping
// (MaintenanceLEDAnnotation, written before the LED is set): once the maintenance is over the
// LED goes back to what the Server asks, or Off. A system that reports no LED is not written
// blind every pass: nothing is done, and status says nothing.
func (r *Reconciler) ledStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if p.sys == nil || p.sys.IndicatorLED == "" || !p.Obj.DeletionTimestamp.IsZero() {
		return lifecycle.Continue(), nil
	}
	record := p.Obj.Annotations[serverstate.MaintenanceLEDAnnotation]
	want := settableLED(p.Obj.Spec.IndicatorLED)
	maint, err := r.maintenanceLED(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	switch {
	case maint != "" && record != maint:
		return lifecycle.Wrote("maintenance LED recorded"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, serverstate.MaintenanceLEDAnnotation, maint)
		})
	case maint != "":
		want = maint
	case record != "":
		// The maintenance that set it is over.
		if want == "" {
			want = string(metalv1alpha1.IndicatorLEDOff)
		}
		if p.sys.IndicatorLED == want {
			return lifecycle.Wrote("maintenance LED restored"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
				lifecycle.RemoveAnnotation(s, serverstate.MaintenanceLEDAnnotation)
			})
		}
	}
	if want == "" || p.sys.IndicatorLED == want {
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

// maintenanceLED is the LED the server's maintenance asks for while it is in it, or "".
func (r *Reconciler) maintenanceLED(ctx context.Context, p *serverPass) (string, error) {
	if p.state != metalv1alpha1.ServerStateMaintenance || p.Obj.Spec.ServerMaintenanceRef == nil {
		return "", nil
	}
	m, err := r.maintenanceObj(ctx, p)
	if err != nil || m == nil {
		return "", err
	}
	return settableLED(m.Spec.LocatorLED), nil
}

// settableLED is led if it is a state the LED can be set to, else "".
func settableLED(led metalv1alpha1.IndicatorLED) string {
	switch led {
	case metalv1alpha1.IndicatorLEDLit, metalv1alpha1.IndicatorLEDBlinking, metalv1alpha1.IndicatorLEDOff:
		return string(led)
	}
	return ""
}

// ledWrite is the last locator LED write to a server.
type ledWrite struct {
	led string
	at  time.Time
}
