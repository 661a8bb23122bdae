package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func reached(obs bmc.PowerState, want metalv1alpha1.Power) bool {
	return (want == metalv1alpha1.PowerOn && obs == bmc.PowerStateOn) || (want == metalv1alpha1.PowerOff && obs == bmc.PowerStateOff)
}

func moving(obs bmc.PowerState, want metalv1alpha1.Power) bool {
	return (want == metalv1alpha1.PowerOn && obs == bmc.PowerStatePoweringOn) || (want == metalv1alpha1.PowerOff && obs == bmc.PowerStatePoweringOff)
}

// inFlight reports whether an action towards want was issued recently enough to wait for it.
func (r *Reconciler) inFlight(p *serverPass, want metalv1alpha1.Power) bool {
	rec, ok := parsePowerRecord(p.Obj.Annotations[serverstate.PowerAnnotation])
	return ok && rec.target == want && r.Now().Sub(rec.at) < r.Options.PowerTimeout
}

// powerAction issues the BMC action towards want, unless the system is there, on its way, or
// an action towards it is already in flight. It returns done=false when there is nothing to do.
// The caller records the action in the same write as whatever else its step writes.
func (r *Reconciler) powerAction(ctx context.Context, p *serverPass, want metalv1alpha1.Power, graceful bool) (issued bool, wait bool, err error) {
	if reached(p.sys.PowerState, want) {
		return false, false, nil
	}
	if moving(p.sys.PowerState, want) || r.inFlight(p, want) {
		return false, true, nil
	}
	if rec, ok := parsePowerRecord(p.Obj.Annotations[serverstate.PowerAnnotation]); ok && rec.target != want &&
		r.Now().Sub(rec.at) < r.Options.PowerTimeout && !reached(p.sys.PowerState, rec.target) {
		// Another change (an operation's, say) is on its way: let it land before undoing it,
		// so a restart's PoweringOff is not answered with a second action.
		return false, true, nil
	}
	action := bmc.PowerOn
	if want == metalv1alpha1.PowerOff {
		action = bmc.PowerOff
		// Graceful first; a graceful off that timed out (its record is still there) is forced.
		if rec, ok := parsePowerRecord(p.Obj.Annotations[serverstate.PowerAnnotation]); graceful && !(ok && rec.target == want) {
			action = bmc.PowerGracefulOff
		}
	}
	var opts []bmc.PowerOption
	if action == bmc.PowerGracefulOff {
		opts = append(opts, bmc.WithForceFallback())
	}
	if err := p.conn.Power(ctx, p.sysID, action, opts...); err != nil {
		return false, false, fmt.Errorf("power %s: %w", action, err)
	}
	r.actionEvent(p, nil, "Power"+string(want), string(action), "power %s requested (was %s)", action, p.sys.PowerState)
	return true, true, nil
}

// converge drives power towards want as a step of its own: issue and record in one write, then
// observe on later passes. Continue: the box is there. BMC calls use the pass's deadline
// (p.bctx); the record is written with ctx.
func (r *Reconciler) converge(ctx context.Context, p *serverPass, want metalv1alpha1.Power, graceful bool) (lifecycle.Result, error) {
	return r.convergeWith(ctx, p, want, graceful, nil)
}

// convergeWith is converge whose write, when it issues the action, also applies also.
func (r *Reconciler) convergeWith(ctx context.Context, p *serverPass, want metalv1alpha1.Power, graceful bool, also func(*metalv1alpha1.Server)) (lifecycle.Result, error) {
	issued, wait, err := r.powerAction(p.bctx, p, want, graceful)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if issued {
		rec := powerRecord{target: want, at: r.Now()}
		return lifecycle.Wrote("power " + string(want)), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, rec.String())
			if also != nil {
				also(s)
			}
		})
	}
	if wait {
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "power in flight"), nil
	}
	return lifecycle.Continue(), nil
}

// powerRecord is a parsed PowerAnnotation.
type powerRecord struct {
	target metalv1alpha1.Power
	at     time.Time
}

func parsePowerRecord(v string) (powerRecord, bool) {
	target, at, ok := strings.Cut(v, "@")
	if !ok {
		return powerRecord{}, false
	}
	secs, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return powerRecord{}, false
	}
	return powerRecord{target: metalv1alpha1.Power(target), at: time.Unix(secs, 0)}, true
}

func (r powerRecord) String() string {
	return string(r.target) + "@" + strconv.FormatInt(r.at.Unix(), 10)
}
