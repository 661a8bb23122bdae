package server

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/claimable"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// A settings-only server (metalv1alpha1.SettingsOnlyAnnotation on it or on its BMC) has its
// power and boot owned by another system. Its passes read it (power, inventory, logs, LED) and
// take it in and out of maintenance, but nothing of them powers it, boots it, changes its boot
// order or media, cleans it or hands it to a claim. It sits in Initial, where discovery would
// start; it leaves Initial only for a maintenance and comes back after it. The BMC client of
// its passes refuses every power and boot call (bmc.WithoutPower): a path missed here fails
// instead of acting.

// settingsOnlyStep reads the mark (the server's own, or its BMC's) for the steps after it.
func (r *Reconciler) settingsOnlyStep(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	only, whose, err := claimable.SettingsOnly(ctx, p.c, p.Obj)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if only {
		p.settingsOnly = whose
	}
	return lifecycle.Continue(), nil
}

// settingsOnlyState is the state step of a settings-only server outside Maintenance. Initial
// is where it stays, acting on nothing. Any other state is left for Initial in one bookkeeping
// write and no BMC call: the server was marked after metalhub managed it, and Available (a
// claim's), Discovery, Cleaning or Released (both boot it) are states metalhub acts in. A
// Reserved server keeps its state while its claim holds it: the claim's holder and the owner
// share the box, and metalhub follows neither the claim's power nor its boot.
func (r *Reconciler) settingsOnlyState(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	switch {
	case p.state == metalv1alpha1.ServerStateInitial && p.stateSource == lifecycle.FromAnnotation:
		return lifecycle.Done(), nil
	case p.state == metalv1alpha1.ServerStateInitial:
		// A new server: Initial is recorded, with the finalizer, as any state metalhub keeps.
		r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeNormal, metalv1alpha1.ReasonSettingsOnly, "Discover",
			"settings-only (marked on %s): not discovered, power and boot belong to their owner", p.settingsOnly)
		return lifecycle.Wrote("settings-only Initial"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.SetAnnotation(s, lifecycle.StateAnnotation, string(metalv1alpha1.ServerStateInitial))
			lifecycle.AddFinalizer(s, Finalizer)
		})
	case p.state == metalv1alpha1.ServerStateReserved && p.Obj.Spec.ServerClaimRef != nil:
		return lifecycle.Done(), nil
	}
	prev := p.state
	return r.transition(ctx, p, metalv1alpha1.ServerStateInitial, "settings-only (marked on "+p.settingsOnly+"): power and boot belong to their owner",
		func(s *metalv1alpha1.Server) {
			if prev == metalv1alpha1.ServerStateCleaning {
				// The cleaning round is not booted: the next one, once the mark is gone,
				// starts afresh (the cleaning mark stays, so it is still owed).
				lifecycle.RemoveAnnotation(s, serverstate.CleaningRoundAnnotation)
				lifecycle.RemoveAnnotation(s, serverstate.CleaningTasksAnnotation)
			}
		})
}

// refuseSettingsOnlyOperation refuses, on a settings-only server, an operation that powers or
// boots it: the user's annotation (removed, a Warning event) or an intent owed from before the
// mark (ended, never issued). A requester named with either is answered refused, so a firmware
// flow waiting on it does not wait forever.
func (r *Reconciler) refuseSettingsOnlyOperation(ctx context.Context, p *serverPass, i intent.Intent, owed bool) (lifecycle.Result, error) {
	r.Recorder.Eventf(p.Obj, nil, corev1.EventTypeWarning, metalv1alpha1.ReasonPowerRefused, "Operation",
		"operation %s refused: the server is settings-only (marked on %s), its power and boot belong to their owner", i.Op, p.settingsOnly)
	return lifecycle.Wrote("operation " + i.Op + " refused"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		if owed {
			intent.Set(s, "")
		} else {
			lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation)
			lifecycle.RemoveAnnotation(s, intent.RequesterAnnotation)
		}
		if i.By != "" {
			lifecycle.SetAnnotation(s, intent.ResultAnnotation, intent.AppendResult(s.Annotations[intent.ResultAnnotation], i.By+" "+intent.ResultRefused))
		}
	})
}
