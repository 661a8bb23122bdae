package telemetry

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/shard"
)

// Defaults of the Collector's fields left zero.
const (
	DefaultConcurrency = 8
	DefaultReadTimeout = 30 * time.Second
)

// Collector reads every eligible Server's telemetry each Interval into Metrics. It is a manager
// Runnable of its own: no reconcile worker waits for it, nor it for one.
type Collector struct {
	// Client lists Servers and reads their BMCs' addresses and secrets (the manager's cache).
	Client client.Reader
	// Pool is the BMC pool the controllers share: its per-BMC request cap and breaker hold for
	// these reads too.
	Pool    *bmc.Pool
	Metrics *Metrics
	// Interval between the starts of two rounds (> 0).
	Interval time.Duration
	// Concurrency bounds the BMCs read at once (default 8); ReadTimeout one server's read
	// (default 30s).
	Concurrency int
	ReadTimeout time.Duration
	// Shards, set, limits the reads to the Servers of the shards this replica holds; unset, the
	// collector runs on the leader only.
	Shards *shard.Set
	Log    logr.Logger
	// Now is the clock of the reads' timestamps (default time.Now).
	Now func() time.Time
	// Yield, when set and true, holds back the reads not yet started: lifecycle work is going
	// on (the manager's: claims binding, the controllers' writes queueing), and on a fleet's
	// scale the reads' CPU and requests would slow it down. They go on once it is false again
	// (checked every YieldCheck); a round then ends later, and the next starts at the next tick
	// after it. A round held back longer than Interval (and at least MinHold) reads on
	// regardless, one server at a time and at most one read per YieldCheck: a fleet that never
	// stops working still gets its readings (and its PSU alerts), at a bounded cost.
	Yield func() bool
}

// YieldCheck is how often a collector held back by Yield looks whether it may go on.
const YieldCheck = 100 * time.Millisecond

// MinHold is the least a round yields before it reads on regardless: bursts of lifecycle work
// (a wave of claims) pass without a read.
const MinHold = time.Minute

// NeedLeaderElection implements manager.LeaderElectionRunnable: with shards every replica reads
// its own servers, without them only the leader reads (once per fleet).
func (c *Collector) NeedLeaderElection() bool { return c.Shards == nil }

// Start implements manager.Runnable: a round at once, then one every Interval, until ctx ends.
func (c *Collector) Start(ctx context.Context) error {
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		c.Round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// work is one server to read.
type work struct {
	server *metalv1alpha1.Server
	ep     bmc.Endpoint
}

// Round reads every eligible server once and drops the series of the others. BMCs are read in
// parallel up to Concurrency, the servers of one BMC one after the other.
func (c *Collector) Round(ctx context.Context) {
	list := &metalv1alpha1.ServerList{}
	// The cache's own objects: a round only reads them, and copying a fleet's every round was
	// most of what the listing cost.
	if err := c.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		c.Log.Error(err, "listing servers for telemetry")
		return
	}
	keep := map[string]bool{}
	byBMC := map[string][]work{}
	var order []string
	for i := range list.Items {
		s := &list.Items[i]
		if !c.eligible(s) {
			continue
		}
		ep, err := bmcaccess.ServerEndpoint(ctx, c.Client, s)
		if err != nil {
			continue // the server controller reports it
		}
		addr, err := bmc.NormalizeAddress(ep.Address)
		if err != nil {
			continue
		}
		keep[s.Name] = true
		if _, ok := byBMC[addr]; !ok {
			order = append(order, addr)
		}
		byBMC[addr] = append(byBMC[addr], work{server: s, ep: ep})
	}
	// Series go before the reads: a server deleted since the last round is not shown meanwhile.
	c.Metrics.Retain(keep)

	sem := make(chan struct{}, c.concurrency())
	overdue := c.now().Add(max(c.Interval, MinHold))
	trickle := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, addr := range order {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func(addr string, ws []work) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, w := range ws {
				release, ok := c.yield(ctx, overdue, trickle)
				if !ok {
					return
				}
				c.read(ctx, addr, w)
				release()
			}
		}(addr, byBMC[addr])
	}
	wg.Wait()
}

// yield waits while Yield says lifecycle work goes first; false when ctx ended meanwhile. Past
// overdue it lets reads through one at a time (trickle), at most one per tick, while Yield
// still holds: the returned release frees the next.
func (c *Collector) yield(ctx context.Context, overdue time.Time, trickle chan struct{}) (release func(), ok bool) {
	none := func() {}
	if c.Yield == nil || !c.Yield() {
		return none, ctx.Err() == nil
	}
	t := time.NewTicker(YieldCheck)
	defer t.Stop()
	for c.Yield() {
		select {
		case <-ctx.Done():
			return none, false
		case <-t.C:
		}
		if !c.now().Before(overdue) {
			// One read in flight at most, and one started per tick.
			select {
			case trickle <- struct{}{}:
				return func() { <-trickle }, true
			default:
			}
		}
	}
	return none, ctx.Err() == nil
}

func (c *Collector) concurrency() int {
	if c.Concurrency > 0 {
		return c.Concurrency
	}
	return DefaultConcurrency
}

// eligible: a live Server with an identity to prove, not known to be answered by another machine,
// of this replica's shards.
func (c *Collector) eligible(s *metalv1alpha1.Server) bool {
	if !s.DeletionTimestamp.IsZero() || bmcaccess.Identity(s).UUID == "" {
		return false
	}
	if apimeta.IsStatusConditionTrue(s.Status.Conditions, metalv1alpha1.ConditionIdentityMismatch) {
		return false
	}
	if c.Shards != nil && !c.Shards.Owns(c.Shards.ShardOf(shardkey.Server(s))) {
		return false
	}
	return true
}

// read reads one server's telemetry into Metrics, unless its BMC is busy.
func (c *Collector) read(ctx context.Context, addr string, w work) {
	log := c.Log.WithValues("server", w.server.Name)
	if busy, why := c.Pool.Busy(addr); busy {
		c.Metrics.Count(ResultSkipped)
		log.V(1).Info("BMC busy, telemetry skipped this round", "why", why)
		return
	}
	timeout := c.ReadTimeout
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, sysID, err := bmcaccess.ServerBMC(rctx, c.Client, c.Pool, w.server)
	var t *bmc.Telemetry
	if err == nil {
		t, err = conn.Telemetry(rctx, sysID)
	}
	switch {
	case bmc.ReasonOf(err) == bmc.ReasonIdentityMismatch:
		c.Metrics.Count(ResultMismatch)
		c.Metrics.Delete(w.server.Name)
		log.V(1).Info("another machine answers: no telemetry", "error", err.Error())
	case isUnreachable(err):
		c.Metrics.Count(ResultSkipped)
	case err != nil:
		c.Metrics.Count(ResultFailed)
		log.V(1).Info("telemetry read failed", "error", err.Error())
	default:
		c.Metrics.Set(w.server.Name, float64(c.now().UnixMilli())/1000, t)
		if len(t.Failed) > 0 {
			c.Metrics.Count(ResultPartial)
			log.V(1).Info("some telemetry could not be read", "failed", len(t.Failed), "first", t.Failed[0].Error())
		} else {
			c.Metrics.Count(ResultOK)
		}
	}
}

func (c *Collector) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// isUnreachable: the BMC failed fast (its breaker opened during the round), a skip like Busy.
func isUnreachable(err error) bool {
	_, failingFast := bmc.RetryAt(err)
	return failingFast || errors.Is(err, bmc.ErrUnreachable)
}
