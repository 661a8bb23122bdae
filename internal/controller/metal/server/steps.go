package server

import (
	"cmp"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bootrequest"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// available keeps an unclaimed server off and clean, and hands it to a claim.
func (r *Reconciler) available(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if needsCleaning(p.Obj) && p.Obj.Spec.ServerClaimRef == nil {
		// Its last release was not cleaned (a status wiped or a state lost on the way, a
		// Released server let go by hand): cleaned before anything else.
		return r.transition(ctx, p, metalv1alpha1.ServerStateCleaning, "last release not cleaned (policy "+p.Obj.Annotations[serverstate.CleaningAnnotation]+")", nil)
	}
	if p.Obj.Spec.ServerClaimRef != nil {
		return r.reserve(bctx, ctx, p)
	}
	if err := r.deleteLeftRound(ctx, p); err != nil {
		return lifecycle.Result{}, err
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, false); err != nil || !res.IsContinue() {
		return res, err
	}
	// A medium of discovery, of a maintenance or of a claim whose release did not get to it:
	// nothing an unclaimed server boots needs one.
	if had, err := r.ejectRecorded(bctx, p); err != nil || had {
		if err != nil {
			return lifecycle.Result{}, err
		}
		return r.writeMediaRecord(ctx, p, "")
	}
	return lifecycle.Done(), nil
}

// reserve moves a claimed server to Reserved and, when the claim wants it on, powers it on and
// records the action in the same write (as Initial does with its boot): a claim costs the
// server one lifecycle write, not two. After a crash between the action and the write, the next
// pass sees the box on or powering on and does not act again. A BMC refusing the action does not
// hold the transition back: Reserved retries the power and reports the failure.
func (r *Reconciler) reserve(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	ref := p.Obj.Spec.ServerClaimRef
	claim, err := r.claimOf(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	rec, booted, media, mediaWant := "", "", false, ""
	ready, _, sbc, err := r.bootReady(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if ready && claim != nil && claim.DeletionTimestamp.IsZero() && claim.Spec.Power == metalv1alpha1.PowerOn {
		booted, mediaWant, media, err = r.claimBoot(bctx, p, sbc)
		if err == nil && !media {
			var issued bool
			issued, _, err = r.powerAction(bctx, p, metalv1alpha1.PowerOn, true)
			if issued {
				rec = powerRecord{target: metalv1alpha1.PowerOn, at: r.Now()}.String()
			}
		}
		if err != nil {
			booted, media = "", false
			ctrl.LoggerFrom(ctx).Info("booting for the claim failed; Reserved retries it", "error", err.Error())
		}
	}
	return r.transition(ctx, p, metalv1alpha1.ServerStateReserved, "claimed by "+ref.Namespace+"/"+ref.Name, func(s *metalv1alpha1.Server) {
		r.markForCleaning(s, claim)
		if media {
			// Recorded with the claim; the medium goes in on Reserved's first pass.
			setMediaRecord(s, mediaWant)
		}
		if rec != "" {
			lifecycle.SetAnnotation(s, serverstate.PowerAnnotation, rec)
			if booted != "" {
				lifecycle.SetAnnotation(s, serverstate.ClaimBootAnnotation, booted)
			}
		}
	})
}

// reserved follows the claim's power. When the claim is gone the box is powered off, and only
// once the BMC confirms it off does the server go back to Available (Recycle) or Released (Retain).
func (r *Reconciler) reserved(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	claim, err := r.claimOf(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if claim != nil && claim.DeletionTimestamp.IsZero() {
		var also func(*metalv1alpha1.Server)
		if claim.Spec.Power == metalv1alpha1.PowerOn && !reached(p.sys.PowerState, metalv1alpha1.PowerOn) {
			ready, why, sbc, err := r.bootReady(ctx, p)
			if err != nil || !ready {
				// The boot provider's Ready (watched) brings the next pass.
				return lifecycle.RequeueAfter(r.Options.RetryAfter, why), err
			}
			if p.sys.PowerState == bmc.PowerStateOff {
				booted, want, media, err := r.claimBoot(bctx, p, sbc)
				if err != nil {
					return lifecycle.Result{}, err
				}
				if media {
					return r.writeMediaRecord(ctx, p, want)
				}
				if booted != "" {
					also = func(s *metalv1alpha1.Server) { lifecycle.SetAnnotation(s, serverstate.ClaimBootAnnotation, booted) }
				}
			}
		}
		if res, err := r.convergeWith(ctx, p, claim.Spec.Power, true, also); err != nil || !res.IsContinue() {
			return res, err
		}
		if res, err := r.recordClaimBoot(ctx, p, claim); err != nil || !res.IsContinue() {
			return res, err
		}
		return lifecycle.Done(), nil
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, true); err != nil || !res.IsContinue() {
		return res, err
	}
	// The claim's medium goes with it (observed: a repeat after a crash sends nothing).
	if _, err := r.ejectRecorded(bctx, p); err != nil {
		return lifecycle.Result{}, err
	}
	if s.Spec.ReclaimPolicy == metalv1alpha1.ReclaimPolicyRetain {
		return r.transition(ctx, p, metalv1alpha1.ServerStateReleased, "claim gone, power off confirmed, reclaim policy Retain", func(s *metalv1alpha1.Server) {
			lifecycle.RemoveAnnotation(s, serverstate.ClaimBootAnnotation)
			lifecycle.RemoveAnnotation(s, serverstate.MediaAnnotation)
		})
	}
	to, why := metalv1alpha1.ServerStateAvailable, "claim gone, power off confirmed"
	if policy := r.releasePolicy(s); policy != metalv1alpha1.CleaningPolicyNone {
		to, why = metalv1alpha1.ServerStateCleaning, why+", cleaning policy "+string(policy)
	}
	return r.transition(ctx, p, to, why, func(s *metalv1alpha1.Server) {
		s.Spec.ServerClaimRef = nil
		s.Spec.BootConfigurationRef = nil
		lifecycle.RemoveAnnotation(s, serverstate.ClaimBootAnnotation)
		lifecycle.RemoveAnnotation(s, serverstate.MediaAnnotation)
		if to == metalv1alpha1.ServerStateCleaning {
			lifecycle.SetAnnotation(s, serverstate.CleaningAnnotation, string(r.releasePolicy(s)))
		} else {
			lifecycle.RemoveAnnotation(s, serverstate.CleaningAnnotation)
		}
	})
}

// needsCleaning reports whether s carries the mark of a release not cleaned yet.
func needsCleaning(s *metalv1alpha1.Server) bool {
	v := s.Annotations[serverstate.CleaningAnnotation]
	return v != "" && v != string(metalv1alpha1.CleaningPolicyNone)
}

// bootReady reports whether the boot configuration the server names (if any) is Ready: a box
// powered on for its claim before its boot provider serves the image boots whatever is on its
// disk. The reason says what it waits for.
func (r *Reconciler) bootReady(ctx context.Context, p *serverPass) (bool, string, *metalv1alpha1.ServerBootConfiguration, error) {
	ref := p.Obj.Spec.BootConfigurationRef
	if ref == nil || ref.Name == "" {
		return true, "", nil, nil
	}
	return r.bootConfigurationReady(ctx, p, ref.Namespace, ref.Name)
}

// bootConfigurationReady reports whether a boot configuration is Ready for this server; when
// not, why, and the object (nil when it does not exist). One that names another server is never
// Ready for this one. With the built-in provider, one it has not judged yet is judged here, by
// the same rule (bootrequest.InputProblem): waiting for the provider's status write would put it in
// every claim's path, a Server pass more per claim.
func (r *Reconciler) bootConfigurationReady(ctx context.Context, p *serverPass, ns, name string) (bool, string, *metalv1alpha1.ServerBootConfiguration, error) {
	sbc := &metalv1alpha1.ServerBootConfiguration{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sbc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("waiting for boot configuration %s/%s to exist", ns, name), nil, nil
		}
		return false, "", nil, fmt.Errorf("reading boot configuration %s/%s: %w", ns, name, err)
	}
	if sbc.Spec.ServerRef.Name != p.Obj.Name {
		return false, fmt.Sprintf("boot configuration %s/%s is for server %q", ns, name, sbc.Spec.ServerRef.Name), sbc, nil
	}
	switch {
	case sbc.Status.State == metalv1alpha1.ServerBootConfigurationStateReady:
		return true, "", sbc, nil
	case sbc.Status.State == "" && !r.Options.ExternalBootProvider:
		bad, err := bootrequest.InputProblem(ctx, p.c, ns, sbc.Spec.Image, sbc.Spec.IgnitionSecretRef)
		if err != nil {
			return false, "", sbc, err
		}
		if bad == nil {
			return true, "", sbc, nil
		}
		return false, fmt.Sprintf("boot configuration %s/%s: %s", ns, name, bad.Msg), sbc, nil
	}
	return false, fmt.Sprintf("waiting for boot configuration %s/%s to be Ready (%s)", ns, name,
		cmp.Or(string(sbc.Status.State), string(metalv1alpha1.ServerBootConfigurationStatePending))), sbc, nil
}

func (r *Reconciler) claimOf(ctx context.Context, p *serverPass) (*metalv1alpha1.ServerClaim, error) {
	ref := p.Obj.Spec.ServerClaimRef
	if ref == nil {
		return nil, nil
	}
	c := &metalv1alpha1.ServerClaim{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, c); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading claim %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return c, nil
}

// released waits, powered off, for its claim ref to be removed by hand.
func (r *Reconciler) released(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerClaimRef == nil {
		return r.transition(ctx, p, metalv1alpha1.ServerStateAvailable, "claim ref removed", nil)
	}
	if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, true); err != nil || !res.IsContinue() {
		return res, err
	}
	return lifecycle.Done(), nil
}

// parked leaves the box alone (no BMC calls at all) until it is unparked, which returns it to the
// state it was parked in: a claimed box stays claimed and is not powered off or rediscovered.
func (r *Reconciler) parked(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	switch p.Obj.Annotations[metalv1alpha1.OperationAnnotation] {
	case metalv1alpha1.OperationUnpark:
	case metalv1alpha1.OperationPark:
		// Parked already: the request is done.
		return lifecycle.Wrote("park again"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
			lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation)
		})
	default:
		return r.mirror(p)
	}
	to := unparkedState(p.Obj)
	return r.transition(ctx, p, to, "unparked", func(s *metalv1alpha1.Server) {
		lifecycle.RemoveAnnotation(s, metalv1alpha1.OperationAnnotation)
		lifecycle.RemoveAnnotation(s, metalv1alpha1.ParkedAnnotation)
		lifecycle.RemoveAnnotation(s, serverstate.PreviousStateAnnotation)
	})
}

// unparkedState is where an unparked server goes: what its refs say first (a claim keeps it
// Reserved, or Released under Retain; a maintenance ref is entered from there by the next
// pass), else the state saved at park. Only a server that was not past discovery, or whose saved
// state is lost, starts over.
func unparkedState(s *metalv1alpha1.Server) metalv1alpha1.ServerState {
	prev := metalv1alpha1.ServerState(s.Annotations[serverstate.PreviousStateAnnotation])
	if s.Spec.ServerClaimRef != nil {
		if prev == metalv1alpha1.ServerStateReleased {
			return metalv1alpha1.ServerStateReleased
		}
		return metalv1alpha1.ServerStateReserved
	}
	switch prev {
	case metalv1alpha1.ServerStateAvailable, metalv1alpha1.ServerStateReleased:
		return metalv1alpha1.ServerStateAvailable
	case metalv1alpha1.ServerStateReserved:
		// The claim went while parked: Reserved powers it off and hands it back.
		return metalv1alpha1.ServerStateReserved
	case metalv1alpha1.ServerStateCleaning:
		// A cleaning is never skipped by a park: it starts again with a round of its own.
		return metalv1alpha1.ServerStateCleaning
	case metalv1alpha1.ServerStateMaintenance:
		if s.Spec.ServerMaintenanceRef != nil {
			return metalv1alpha1.ServerStateMaintenance
		}
	}
	return metalv1alpha1.ServerStateInitial
}
