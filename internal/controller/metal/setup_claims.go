package metal

import (
	"cmp"
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalhub/metalhub/internal/controller/metal/bootconfig"
	"github.com/metalhub/metalhub/internal/controller/metal/claim"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/maintenance"
	"github.com/metalhub/metalhub/internal/controller/metal/readiness"
)

// setupClaims registers the indexes and reconcilers of claims, boot configurations and
// maintenance.
func setupClaims(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if err := index.SetupClaims(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	co := o.Claims.WithDefaults()
	if err := (&claim.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: o.Events.Recorder("serverclaim-controller"),
		Options: co, Concurrency: cmp.Or(co.Concurrency, o.Concurrency), RetryAfter: o.RetryAfter, Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("serverclaim controller: %w", err)
	}
	if err := (&bootconfig.Reconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("serverbootconfiguration-controller"),
		External: o.ExternalBootProvider, Concurrency: o.Concurrency, Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("serverbootconfiguration controller: %w", err)
	}
	if err := (&maintenance.Reconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("servermaintenance-controller"),
		Concurrency: o.Concurrency, RetryAfter: o.RetryAfter, Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("servermaintenance controller: %w", err)
	}
	if err := (&readiness.Reconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("serverreadinessrule-controller"), Concurrency: 1, Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("serverreadinessrule controller: %w", err)
	}
	if err := (&maintenance.GroupReconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("maintenancegroup-controller"), Concurrency: o.Concurrency, Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("maintenance group controller: %w", err)
	}
	return nil
}
