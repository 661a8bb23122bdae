// Package shard splits a fleet between manager replicas. Objects map to a fixed number of shards
// by consistent hashing of a key (a BMC's name for everything that acts on that BMC); each shard is
// a Lease that one replica holds at a time. Replicas find each other through member Leases, and
// each holds its share of the shards: a replica that joins takes shards the others give up, one
// that dies loses its shards once their Leases expire. Kubernetes Leases are the whole membership
// protocol.
//
// A replica acts on an object only while it holds the object's shard: controllers skip the
// objects of other shards (Gate), and every BMC request of a pass carries a fence (bmc.WithFence)
// that refuses to send once the shard is no longer held for certain. Held for certain means: the
// last renewal was sent less than the renew deadline ago. Another replica takes an expired shard
// only a lease duration after it last saw it change, which is later, so the two never act at
// once; a shard given up on purpose is given up only after the requests under it have returned.
package shard

import (
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Labels on the Leases of a shard set.
const (
	// SetLabel names the set a Lease belongs to (Options.Name).
	SetLabel = "metalhub.io/shard-set"
	// RoleLabel is RoleShard or RoleMember.
	RoleLabel  = "metalhub.io/shard-role"
	RoleShard  = "shard"
	RoleMember = "member"
)

var (
	heldGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "metalhub_shards_held",
		Help: "Shards this replica holds for certain (--shards)."})
	membersGauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "metalhub_shard_members",
		Help: "Replicas this one counted in its last membership round, itself included (--shards)."})
)

func init() { ctrlmetrics.Registry.MustRegister(heldGauge, membersGauge) }

// Of maps key to one of n shards by jump consistent hashing (Lamping and Veach): when n grows to
// n+1, only about 1/(n+1) of the keys move, all of them to the new shard.
func Of(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	k := h.Sum64()
	b, j := int64(-1), int64(0)
	for j < int64(n) {
		b = j
		k = k*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((k>>33)+1)))
	}
	return int(b)
}

// Options configure a Set.
type Options struct {
	// Count is the number of shards; several per replica spread a fleet more evenly and move
	// less of it when a replica comes or goes.
	Count int
	// Namespace and Name locate the Leases: <Name>-<i> for shard i, <Name>-member-<id> for
	// each replica.
	Namespace, Name string
	// Identity names this replica in the Leases (default: host name and a random suffix).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as for leader election: RenewDeadline <
	// LeaseDuration; a dead replica's shards move within LeaseDuration plus about one
	// RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Client writes and reads the Leases directly (not through a cache) and should not share
	// the controllers' write bound: a renewal must not queue behind a burst of their writes.
	Client client.Client
	// Leases, if set, is a cache of the set's Leases (NewLeaseCache): a round reads them from
	// it, and each change is observed when its watch event arrives rather than at the next
	// round, so that a dead replica's Leases expire a lease duration after its last write, not
	// after our next look. Without it, rounds list through Client.
	Leases cache.Cache
	// Now is the clock (tests move it). Default time.Now.
	Now    func() time.Time
	Logger logr.Logger
}

// Set is this replica's view of the shards: which it holds, until when for certain, and the
// controllers' gates to tell when it takes one. It is a manager Runnable.
type Set struct {
	o Options

	mu      sync.Mutex
	held    map[int]*holding
	gates   []acquirer
	members int
	// observed is when each Lease was last seen to change (by resourceVersion), on our clock:
	// expiry is measured from it, so clocks of other replicas do not matter.
	observed map[string]observation
	memberID string
	// kick brings a round before the next tick: a shard was given up, a member came or went.
	kick chan struct{}
	// expiry is the earliest time a Lease of another replica expires, if that is before the
	// next round (zero otherwise).
	expiry time.Time
}

type observation struct {
	rv   string
	seen time.Time
}

// holding is one shard this replica holds. Requests under the shard hold inflight for reading;
// the shard is given up on purpose only once it can be taken for writing: no request in flight,
// and none starts once it is releasing. Its state has a lock of its own, so that a renewal never
// waits for a request (a firmware upload may take minutes).
type holding struct {
	inflight sync.RWMutex

	mu        sync.Mutex
	gone      bool      // lost or given up: no request starts
	releasing bool      // to be given up once no request is in flight: no request starts
	validity  time.Time // no request starts after this unless a renewal moves it
	replaced  string    // the Lease's resourceVersion our taking it overwrote
	// end is when another replica could take the shard, less a margin, unless a renewal moves
	// it: no request may run past it. expired is closed once it passed, or the shard is gone.
	end     time.Time
	expired chan struct{}
	timer   *time.Timer
}

// setEnd moves h's end (under h.mu); now is the Set's clock. A timer closes expired once the
// end passed without a renewal moving it.
func (h *holding) setEnd(end time.Time, now func() time.Time) {
	if !end.After(h.end) {
		return
	}
	h.end = end
	if h.timer != nil {
		h.timer.Stop()
	}
	var check func()
	check = func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if left := h.end.Sub(now()); left > 0 {
			h.timer = time.AfterFunc(left, check)
			return
		}
		h.expire()
	}
	h.timer = time.AfterFunc(end.Sub(now()), check)
}

// expire closes expired once (under h.mu): requests in flight under h are cut.
func (h *holding) expire() {
	select {
	case <-h.expired:
	default:
		close(h.expired)
	}
	if h.timer != nil {
		h.timer.Stop()
	}
}

// usable reports whether a request may start under h at now.
func (h *holding) usable(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.gone && !h.releasing && now.Before(h.validity)
}

// acquirer is told when this replica takes a shard (Gate enqueues the shard's objects).
type acquirer interface{ acquired(shard int) }

// New returns a Set; Start runs its membership.
func New(o Options) (*Set, error) {
	if o.Count < 1 {
		return nil, fmt.Errorf("shard count %d: want at least 1", o.Count)
	}
	if o.RenewDeadline <= 0 || o.RenewDeadline >= o.LeaseDuration || o.RetryPeriod <= 0 || o.RetryPeriod >= o.RenewDeadline {
		return nil, fmt.Errorf("shard leases: want 0 < retry period (%s) < renew deadline (%s) < lease duration (%s)", o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	if o.Namespace == "" || o.Name == "" {
		return nil, fmt.Errorf("shard leases need a namespace and a name")
	}
	if o.Client == nil {
		return nil, fmt.Errorf("shard leases need a client")
	}
	suffix := rand.String(8)
	if o.Identity == "" {
		o.Identity = hostname() + "_" + suffix
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Set{o: o, held: map[int]*holding{}, observed: map[string]observation{}, memberID: o.Name + "-member-" + suffix,
		kick: make(chan struct{}, 1)}, nil
}

// Identity is this replica's name in the Leases.
func (s *Set) Identity() string { return s.o.Identity }

// ShardOf is the shard of key.
func (s *Set) ShardOf(key string) int { return Of(key, s.o.Count) }

// Owns reports whether this replica holds shard for certain now.
func (s *Set) Owns(shard int) bool {
	s.mu.Lock()
	h := s.held[shard]
	s.mu.Unlock()
	return h != nil && h.usable(s.o.Now())
}

// Holding reports whether this replica holds shard (not given up or lost) and whether for
// certain now (Owns).
func (s *Set) Holding(shard int) (held, certain bool) {
	s.mu.Lock()
	h := s.held[shard]
	s.mu.Unlock()
	if h == nil {
		return false, false
	}
	h.mu.Lock()
	gone := h.gone
	h.mu.Unlock()
	return !gone, !gone && h.usable(s.o.Now())
}

// Held lists the shards this replica holds, in order.
func (s *Set) Held() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int, 0, len(s.held))
	for i := range s.held {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// Hold keeps shard from being given up until release is called, for a request that may run until
// deadline (zero: an upload that is cut when expired closes); it fails when this replica does not
// hold the shard for certain, or another could take it before deadline. A BMC request is sent
// under a hold, and cut when expired closes: no request of this replica's runs once another may
// hold the shard.
func (s *Set) Hold(shard int, deadline time.Time) (release func(), expired <-chan struct{}, err error) {
	s.mu.Lock()
	h := s.held[shard]
	s.mu.Unlock()
	if h == nil {
		return nil, nil, fmt.Errorf("shard %d is not held by %s", shard, s.o.Identity)
	}
	// Taken before the check: a release that marks the shard after the check waits for it.
	h.inflight.RLock()
	if !h.usable(s.o.Now()) {
		h.inflight.RUnlock()
		return nil, nil, fmt.Errorf("shard %d is no longer held by %s for certain", shard, s.o.Identity)
	}
	h.mu.Lock()
	end, expired := h.end, h.expired
	h.mu.Unlock()
	if !deadline.IsZero() && deadline.After(end) {
		h.inflight.RUnlock()
		return nil, nil, fmt.Errorf("shard %d: the request may run until %s, past the moment another replica could take the shard (%s)",
			shard, deadline.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano))
	}
	return h.inflight.RUnlock, expired, nil
}

// HandoverMargin is what a request's end keeps from the moment another replica could take its
// shard: for the timer that cuts it and for clocks that run at slightly different rates.
func HandoverMargin(retryPeriod time.Duration) time.Duration { return retryPeriod / 2 }

// CheckRequestTimeout says whether a BMC request of timeout fits the shard leases: one started
// right after a renewal must end before the lease could pass (otherwise every request would be
// refused between renewals).
func CheckRequestTimeout(timeout, leaseDuration, retryPeriod time.Duration) error {
	if room := leaseDuration - retryPeriod - HandoverMargin(retryPeriod); timeout > room {
		return fmt.Errorf("a BMC request may run %s, but a shard's lease leaves a request at most %s (lease duration %s, less a retry period %s and half of one): lower --bmc-request-timeout or raise --leader-election-lease-duration",
			timeout, room, leaseDuration, retryPeriod)
	}
	return nil
}
