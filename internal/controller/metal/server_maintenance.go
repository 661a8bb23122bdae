package metal

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func (r *ServerReconciler) maintenanceObj(ctx context.Context, p *serverPass) (*metalv1alpha1.ServerMaintenance, error) {
	ref := p.Obj.Spec.ServerMaintenanceRef
	if ref == nil {
		return nil, nil
	}
	m := &metalv1alpha1.ServerMaintenance{}
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, m); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading maintenance %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return m, nil
}

// maintenance moves a server into Maintenance when a maintenance ref appears, remembering the
// state to return to.
func (r *ServerReconciler) maintenance(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if p.Obj.Spec.ServerMaintenanceRef == nil || p.state == metalv1alpha1.ServerStateMaintenance {
		return lifecycle.Continue(), nil
	}
	prev, ref := p.state, p.Obj.Spec.ServerMaintenanceRef
	return r.transition(ctx, p, metalv1alpha1.ServerStateMaintenance, "maintenance "+ref.Namespace+"/"+ref.Name, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, PreviousStateAnnotation, string(prev))
	})
}

// inMaintenance boots the maintenance's boot configuration once it is Ready (a one-time PXE
// override, then power on, or a restart of a running box through an operation intent so it
// happens exactly once), applies the maintenance's power otherwise, and returns to the previous
// state when the maintenance ref is removed.
func (r *ServerReconciler) inMaintenance(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	if s.Spec.ServerMaintenanceRef == nil {
		prev := previousState(s)
		if s.Spec.ServerClaimRef != nil && prev != metalv1alpha1.ServerStateReleased {
			prev = metalv1alpha1.ServerStateReserved
		}
		return r.transition(ctx, p, prev, "maintenance ended", func(s *metalv1alpha1.Server) {
			lifecycle.RemoveAnnotation(s, PreviousStateAnnotation)
			lifecycle.RemoveAnnotation(s, MaintenanceBootAnnotation)
		})
	}
	m, err := r.maintenanceObj(ctx, p)
	if err != nil || m == nil {
		return lifecycle.Done(), err
	}
	ref := s.Spec.MaintenanceBootConfigurationRef
	if ref == nil || ref.Name == "" || m.Spec.ServerPower == metalv1alpha1.PowerOff {
		if m.Spec.ServerPower != "" {
			if res, err := r.converge(ctx, p, m.Spec.ServerPower, true); err != nil || !res.IsContinue() {
				return res, err
			}
		}
		return lifecycle.Done(), nil
	}
	if s.Annotations[MaintenanceBootAnnotation] == string(m.UID) {
		// Booted into it: keep it on.
		if res, err := r.converge(ctx, p, metalv1alpha1.PowerOn, true); err != nil || !res.IsContinue() {
			return res, err
		}
		return lifecycle.Done(), nil
	}
	ready, why, _, err := r.bootConfigurationReady(ctx, p, ref.Namespace, ref.Name)
	if err != nil || !ready {
		// The boot provider's Ready (watched) brings the next pass.
		return lifecycle.RequeueAfter(r.Options.RetryAfter, why), err
	}
	switch p.sys.PowerState {
	case bmc.PowerStatePoweringOn, bmc.PowerStatePoweringOff:
		return lifecycle.RequeueAfter(r.Options.PowerPoll, "power in transition"), nil
	}
	if !pxeSet(p.sys.Boot) {
		// Observable and idempotent: a lost write after it finds it set and goes on.
		if err := p.conn.SetBootOnce(bctx, p.sysID, bmc.BootPxe); err != nil {
			return lifecycle.Result{}, fmt.Errorf("setting one-time PXE boot for maintenance: %w", err)
		}
		r.Recorder.Eventf(s, m, corev1.EventTypeNormal, "BootOnce", "SetBootOnce", "one-time PXE boot set for maintenance %s/%s", m.Namespace, m.Name)
	}
	booted := func(s *metalv1alpha1.Server) { lifecycle.SetAnnotation(s, MaintenanceBootAnnotation, string(m.UID)) }
	if p.sys.PowerState == bmc.PowerStateOn {
		return r.issueOperation(bctx, ctx, p, opIntent{op: metalv1alpha1.OperationPowerCycleServer, phase: intentOwed, at: r.Now()}, booted)
	}
	issued, _, err := r.powerAction(bctx, p, metalv1alpha1.PowerOn, false)
	if err != nil {
		return lifecycle.Result{}, err
	}
	return lifecycle.Wrote("maintenance boot"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		booted(s)
		if issued {
			lifecycle.SetAnnotation(s, PowerAnnotation, powerRecord{target: metalv1alpha1.PowerOn, at: r.Now()}.String())
		}
	})
}
