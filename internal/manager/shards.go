package manager

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/shard"
)

// validateShards checks the shard flags against the others.
func (o *Options) validateShards() error {
	if o.Shards < 0 {
		return fmt.Errorf("--shards %d: want 0 (off) or more", o.Shards)
	}
	if o.Shards == 0 {
		return nil
	}
	if o.LeaderElect {
		return errors.New("--shards and --leader-elect exclude each other: with shards every replica acts, on its own part of the fleet")
	}
	if o.Controllers.Has(FamilyDelivery) {
		return errors.New("--shards splits the metal fleet only: run the delivery family in its own deployment with --leader-elect (--controllers metal here)")
	}
	if o.ShardLeaseName == "" {
		return errors.New("--shards needs --shard-lease-name")
	}
	if err := shard.CheckRequestTimeout(o.Metal.BMCRequestTimeout, o.LeaseDuration, o.RetryPeriod); err != nil {
		return fmt.Errorf("--shards: %w", err)
	}
	return nil
}

// newShardSet builds this replica's shard membership and adds it to mgr. Its Leases are read and
// written by a client of their own, outside the controllers' bound on writes in flight: a renewal
// must not queue behind a burst of binding writes.
func newShardSet(cfg *rest.Config, mgr ctrl.Manager, o Options, log logr.Logger) (*shard.Set, error) {
	ns := o.ShardNamespace
	if ns == "" {
		ns = o.LeaderElectionNamespace
	}
	if ns == "" {
		ns = operatorNamespace(o.Namespace)
	}
	if ns == "" {
		return nil, errors.New("--shards needs --shard-namespace outside a cluster")
	}
	c, err := client.New(rest.CopyConfig(cfg), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, fmt.Errorf("shard lease client: %w", err)
	}
	leases, err := shard.NewLeaseCache(cfg, mgr.GetScheme(), ns)
	if err != nil {
		return nil, fmt.Errorf("shard lease cache: %w", err)
	}
	if err := mgr.Add(leases); err != nil {
		return nil, fmt.Errorf("adding the shard lease cache: %w", err)
	}
	set, err := shard.New(shard.Options{Count: o.Shards, Namespace: ns, Name: o.ShardLeaseName,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod, Client: c, Leases: leases, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(set); err != nil {
		return nil, fmt.Errorf("adding shard membership: %w", err)
	}
	log.Info("sharding the fleet", "shards", o.Shards, "namespace", ns, "identity", set.Identity())
	return set, nil
}
