package metal

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalhub/metalhub/internal/controller/metal/bootconfig"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/maintenance"
	"github.com/metalhub/metalhub/internal/controller/metal/readiness"
)

// ClaimOptions configure the claim, boot configuration and maintenance controllers. The zero
// value is usable: the built-in boot provider on, the default safety-net resync.
type ClaimOptions struct {
	// ExternalBootProvider leaves ServerBootConfigurations to another boot provider (the IronCore
	// boot-operator consumes the same objects and reports their state itself): the built-in
	// provider then only marks new ones Pending.
	ExternalBootProvider bool
	// Resync is how often a claim that could not bind looks again by itself. A freed server wakes
	// waiting claims at once, so this is only a safety net.
	Resync time.Duration
	// WakeFanOut bounds how many waiting claims one freed server wakes (oldest first).
	WakeFanOut int
	// Concurrency is the number of parallel claim reconciles; 0 takes the family's. Binding
	// makes no BMC calls, only API writes that wait on the API server, so it runs wider than
	// the Server controller (BenchmarkClaims measures a burst at either width).
	Concurrency int
}

const (
	defaultClaimResync = time.Minute
	defaultWakeFanOut  = 4
	// defaultClaimConcurrency: see ClaimOptions.Concurrency.
	defaultClaimConcurrency = 64
)

// DefaultClaimOptions are the settings for a real fleet.
func DefaultClaimOptions() ClaimOptions {
	return ClaimOptions{Resync: defaultClaimResync, WakeFanOut: defaultWakeFanOut, Concurrency: defaultClaimConcurrency}
}

// BindFlags registers the flags of the claim family.
func (o *ClaimOptions) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.ExternalBootProvider, "external-boot-provider", o.ExternalBootProvider,
		"Another boot provider (the IronCore boot-operator) reports ServerBootConfigurations; the built-in one stays out.")
	fs.DurationVar(&o.Resync, "claim-resync", o.Resync, "Safety-net interval at which a claim that could not bind looks again.")
	fs.IntVar(&o.WakeFanOut, "claim-wake-fan-out", o.WakeFanOut, "Waiting claims one freed server wakes, oldest first.")
	fs.IntVar(&o.Concurrency, "claim-concurrency", o.Concurrency, "Parallel claim reconciles (0: --metal-concurrency); binding only writes to the API server, so it runs wider.")
}

func (o ClaimOptions) withDefaults() ClaimOptions {
	if o.Resync <= 0 {
		o.Resync = defaultClaimResync
	}
	if o.WakeFanOut <= 0 {
		o.WakeFanOut = defaultWakeFanOut
	}
	return o
}

// setupClaims registers the indexes and reconcilers of claims, boot configurations and
// maintenance.
func setupClaims(ctx context.Context, mgr ctrl.Manager, o Options) error {
	if err := index.SetupClaims(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	co := o.Claims.withDefaults()
	if err := (&ServerClaimReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: o.Events.Recorder("serverclaim-controller"),
		Options: co, Concurrency: cmp.Or(co.Concurrency, o.Concurrency), RetryAfter: o.RetryAfter, Shards: o.Shards,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("serverclaim controller: %w", err)
	}
	if err := (&bootconfig.Reconciler{
		Client: mgr.GetClient(), Recorder: o.Events.Recorder("serverbootconfiguration-controller"),
		External: co.ExternalBootProvider, Concurrency: o.Concurrency, Shards: o.Shards,
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
