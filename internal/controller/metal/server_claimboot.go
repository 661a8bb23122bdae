package metal

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// claimBoot prepares the power-on of a claimed server that is Off: its boot configuration (sbc,
// Ready) is booted from the network, so a one-time PXE override is set first, as metal-operator
// does before every power-on of a Reserved server. The override is observable and idempotent:
// a pass that lost its write finds it set and only powers on. It returns the record the power
// write carries (the configuration's UID), or "" when the power-on boots the disk: no
// configuration, the box not Off, or networkBoot FirstPowerOn after the first.
func (r *ServerReconciler) claimBoot(bctx context.Context, p *serverPass, sbc *metalv1alpha1.ServerBootConfiguration) (string, error) {
	if sbc == nil || p.sys.PowerState != bmc.PowerStateOff {
		return "", nil
	}
	if sbc.Spec.NetworkBoot == metalv1alpha1.NetworkBootFirstPowerOn && claimBooted(p.Obj.Annotations[ClaimBootAnnotation], sbc) {
		return "", nil
	}
	if !pxeSet(p.sys.Boot) {
		if err := p.conn.SetBootOnce(bctx, p.sysID, bmc.BootPxe); err != nil {
			return "", fmt.Errorf("setting one-time PXE boot for boot configuration %s/%s: %w", sbc.Namespace, sbc.Name, err)
		}
		r.Recorder.Eventf(p.Obj, sbc, corev1.EventTypeNormal, "BootOnce", "SetBootOnce", "one-time PXE boot set for boot configuration %s/%s", sbc.Namespace, sbc.Name)
	}
	return string(sbc.UID), nil
}

// claimBooted reports whether record says the server booted sbc from the network (a moved
// configuration keeps its old UID in the moved-from annotation).
func claimBooted(record string, sbc *metalv1alpha1.ServerBootConfiguration) bool {
	return record != "" && (record == string(sbc.UID) || record == sbc.Annotations[lifecycle.MovedFromAnnotation])
}

// recordClaimBoot records, for a configuration that network-boots only the first power-on, that
// a claimed server running under it has booted it: when the power-on's own write was lost (a
// crash after the action), or the box was running when it came to us, the next power-on boots
// the disk all the same.
func (r *ServerReconciler) recordClaimBoot(ctx context.Context, p *serverPass, claim *metalv1alpha1.ServerClaim) (lifecycle.Result, error) {
	if claim.Spec.Power != metalv1alpha1.PowerOn || p.sys.PowerState != bmc.PowerStateOn {
		return lifecycle.Continue(), nil
	}
	ready, _, sbc, err := r.bootReady(ctx, p)
	if err != nil || !ready || sbc == nil || sbc.Spec.NetworkBoot != metalv1alpha1.NetworkBootFirstPowerOn ||
		claimBooted(p.Obj.Annotations[ClaimBootAnnotation], sbc) {
		return lifecycle.Continue(), err
	}
	return lifecycle.Wrote("claim boot recorded"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, ClaimBootAnnotation, string(sbc.UID))
	})
}
