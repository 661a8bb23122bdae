package server

import (
	"context"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// claimBoot prepares the power-on of a claimed server that is Off: the root volume the
// configuration asks for is made first (ensureRootVolume), or its root device hints resolved
// (ensureRootDevice), then the configuration (sbc, Ready)
// is booted the configuration's way (prepareBoot: a one-time PXE override, as
// metal-operator does before every power-on of a Reserved server, or UEFI HTTP, or virtual
// media). It returns the record the power write carries (the configuration's UID), or "" when
// the power-on boots the disk: no configuration, the box not Off, or networkBoot FirstPowerOn
// after the first. When media is true, a virtual media record (value want) must be written
// first and nothing may be powered on this pass.
func (r *Reconciler) claimBoot(bctx context.Context, p *serverPass, sbc *metalv1alpha1.ServerBootConfiguration) (booted, want string, media bool, err error) {
	if sbc == nil || p.sys.PowerState != bmc.PowerStateOff {
		return "", "", false, nil
	}
	if sbc.Spec.NetworkBoot == metalv1alpha1.NetworkBootFirstPowerOn && claimBooted(p.Obj.Annotations[serverstate.ClaimBootAnnotation], sbc) {
		// The disk from now on: a medium left in the drive could come first in the box's own
		// boot order.
		had, err := r.ejectRecorded(bctx, p)
		return "", "", had, err
	}
	if err := r.ensureRootVolume(bctx, p, sbc); err != nil {
		return "", "", false, err
	}
	if err := r.ensureRootDevice(bctx, p, sbc); err != nil {
		return "", "", false, err
	}
	if want, media, err = r.prepareBoot(bctx, p, bootOf(sbc)); err != nil || media {
		return "", want, media, err
	}
	return string(sbc.UID), "", false, nil
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
func (r *Reconciler) recordClaimBoot(ctx context.Context, p *serverPass, claim *metalv1alpha1.ServerClaim) (lifecycle.Result, error) {
	if claim.Spec.Power != metalv1alpha1.PowerOn || p.sys.PowerState != bmc.PowerStateOn {
		return lifecycle.Continue(), nil
	}
	ready, _, sbc, err := r.bootReady(ctx, p)
	if err != nil || !ready || sbc == nil || sbc.Spec.NetworkBoot != metalv1alpha1.NetworkBootFirstPowerOn ||
		claimBooted(p.Obj.Annotations[serverstate.ClaimBootAnnotation], sbc) {
		return lifecycle.Continue(), err
	}
	return lifecycle.Wrote("claim boot recorded"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		lifecycle.SetAnnotation(s, serverstate.ClaimBootAnnotation, string(sbc.UID))
	})
}
