package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/preview"
)

// errNothingApplied: a sync with no VidraResource has no identity to preview as yet.
var errNothingApplied = errors.New("the sync has applied nothing yet: a preview dry-runs as its VidraResources apply")

// preview previews sync s on branch: the branch's artifacts against what s's VidraResources
// applied, dry-run on their destination as the identity they apply as (one of them stands for
// all: the sync writes its destination into each).
func (rs *reconcilers) preview(ctx context.Context, s *infrahubv1alpha1.InfrahubSync, branch string) (preview.Report, error) {
	r, vrr := rs.sync, rs.resource
	cfg, err := r.creds.Config(ctx, s)
	if err != nil {
		return preview.Report{}, err
	}
	ic, err := r.clients.Get(cfg)
	if err != nil {
		return preview.Report{}, err
	}
	owned, err := r.ownedResources(ctx, r.client, s)
	if err != nil {
		return preview.Report{}, err
	}
	current := make([]infrahubv1alpha1.VidraResource, 0, len(owned))
	for _, vr := range owned {
		if vr.DeletionTimestamp.IsZero() {
			current = append(current, *vr)
		}
	}
	if len(current) == 0 {
		return preview.Report{}, errNothingApplied
	}
	slices.SortFunc(current, func(a, b infrahubv1alpha1.VidraResource) int { return strings.Compare(a.Name, b.Name) })
	model := &current[0]
	as, err := vrr.actAs(ctx, model)
	if err != nil {
		return preview.Report{}, err
	}
	t, err := vrr.clusters.GetAs(ctx, vrr.claimant(ctx, model), model.Spec.Destination.Server, as)
	if err != nil {
		return preview.Report{}, fmt.Errorf("reaching the destination: %w", err)
	}
	return preview.Run(ctx, preview.Input{Sync: s, Branch: branch, Query: r.settings.Current(ctx).QueryName,
		Source: ic, Target: t, Policy: vrr.policy, Current: current})
}
