package rights

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
)

// seals is admission's sealer, on the key of the operator's namespace.
func (a *Admission) seals() *sealing.Sealer {
	a.sealOnce.Do(func() {
		a.sealer = &sealing.Sealer{Keys: sealing.NewKeys(a.Client, a.Reader, delivery.InventoryNamespace(a.Options)), Now: time.Now}
	})
	return a.sealer
}

// SealSync seals sync s as the mutating webhook's last step, for a write by user (old is nil on
// create): when user has every right s asks for (the checks of CheckSync for a create), s gets
// a seal bound to it; otherwise s keeps the seal it had, if any (it verifies only if nothing it
// covers changed), and the validating webhook decides whether the write is admitted at all (a
// label change to an unsealed sync is, and leaves it unsealed). A seal that s had and that still
// verifies stays without another look; the operator's own writes (its bookkeeping) keep
// whatever seal the object carried.
func (a *Admission) SealSync(ctx context.Context, user authenticationv1.UserInfo, old, s *infrahubv1alpha1.InfrahubSync) error {
	var prev client.Object
	if old != nil {
		prev = old
	}
	return a.sealWrite(ctx, user, prev, s, func() error { return a.syncRights(ctx, user, s) })
}

// SealResource is SealSync for a VidraResource (the checks of CheckResource).
func (a *Admission) SealResource(ctx context.Context, user authenticationv1.UserInfo, old, vr *infrahubv1alpha1.VidraResource) error {
	var prev client.Object
	if old != nil {
		prev = old
	}
	return a.sealWrite(ctx, user, prev, vr, func() error {
		if handoverSet(old, vr) {
			return fmt.Errorf("only the operator sets %s", infrahubv1alpha1.HandoverAnnotation)
		}
		who, err := a.resourceClaimant(ctx, vr)
		if err != nil {
			return err
		}
		return a.resourceRights(ctx, user, vr, who)
	})
}

func (a *Admission) sealWrite(ctx context.Context, user authenticationv1.UserInfo, old, obj client.Object, rights func() error) error {
	isOp, err := a.IsOperator(ctx, user)
	if err != nil {
		return err
	}
	if isOp {
		return nil
	}
	was := ""
	if old != nil {
		was = old.GetAnnotations()[infrahubv1alpha1.SealAnnotation]
		if was != "" && obj.GetAnnotations()[infrahubv1alpha1.SealAnnotation] == was {
			if level, _ := a.seals().Level(ctx, obj); level != sealing.Unsealed {
				return nil // nothing it covers changed
			}
		}
	}
	if err := rights(); err != nil {
		// No seal of this writer's: the object keeps the one it had (which verifies only if
		// nothing it covers changed) and a writer cannot drop another's seal.
		sealing.Unseal(obj)
		if was != "" {
			ann := obj.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[infrahubv1alpha1.SealAnnotation] = was
			obj.SetAnnotations(ann)
		}
		return nil
	}
	return a.seals().Seal(ctx, obj, sealing.Admitted)
}
