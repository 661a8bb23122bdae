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
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
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
	end := h.end
	h.mu.Unlock()
	if !deadline.IsZero() && deadline.After(end) {
		h.inflight.RUnlock()
		return nil, nil, fmt.Errorf("shard %d: the request may run until %s, past the moment another replica could take the shard (%s)",
			shard, deadline.Format(time.RFC3339Nano), end.Format(time.RFC3339Nano))
	}
	return h.inflight.RUnlock, h.expired, nil
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

// NeedLeaderElection: every replica runs its membership.
func (s *Set) NeedLeaderElection() bool { return false }

// Start runs the membership until ctx ends, then gives up the shards and the member Lease so
// that the others take them at once.
func (s *Set) Start(ctx context.Context) error {
	// A ticker, not a timer reset after each round: the rounds keep their cadence however long
	// one takes, which is what the handover bound counts on.
	if err := s.watch(ctx); err != nil {
		return err
	}
	t := time.NewTicker(s.o.RetryPeriod)
	defer t.Stop()
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.o.Logger.Info("shard membership", "error", err.Error())
		}
		// A Lease of another replica that expires before the next round is looked at when it
		// does: a dead replica's shards move a lease duration after its last renewal was seen,
		// not up to a retry period later.
		var expiry <-chan time.Time
		var w *time.Timer
		if at, ok := s.nextExpiry(); ok {
			w = time.NewTimer(at.Sub(s.o.Now()))
			expiry = w.C
		}
		select {
		case <-ctx.Done():
			s.leave()
			return nil
		case <-t.C:
		case <-expiry:
		case <-s.kick:
		}
		if w != nil {
			w.Stop()
		}
	}
}

// Tick is one round of the membership: renew what is held, count the members, give up shards
// beyond this replica's share, take free or expired ones up to it.
func (s *Set) Tick(ctx context.Context) error {
	var list coordinationv1.LeaseList
	if err := s.reader().List(ctx, &list, client.InNamespace(s.o.Namespace), client.MatchingLabels{SetLabel: s.o.Name}); err != nil {
		s.expire()
		return fmt.Errorf("listing shard leases: %w", err)
	}
	now := s.o.Now()
	shards := map[int]*coordinationv1.Lease{}
	var members []string
	var me *coordinationv1.Lease
	seen := map[string]bool{}
	for i := range list.Items {
		l := &list.Items[i]
		seen[l.Name] = true
		expired := s.observe(l, now)
		switch l.Labels[RoleLabel] {
		case RoleMember:
			if l.Name == s.memberID {
				me = l
				continue
			}
			if expired {
				// A replica gone without leaving: its member Lease goes (if unchanged since).
				_ = s.o.Client.Delete(ctx, l, client.Preconditions{ResourceVersion: ptr.To(l.ResourceVersion)})
				continue
			}
			members = append(members, holderOf(l))
		case RoleShard:
			if i, err := strconv.Atoi(l.Annotations[shardAnnotation]); err == nil && i >= 0 && i < s.o.Count {
				shards[i] = l
			}
		}
	}
	s.forget(seen)
	s.noteExpiry(list.Items, now)
	if err := s.renewMember(ctx, me, now); err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
		s.o.Logger.Info("renewing member lease", "error", err.Error())
	}
	members = append(members, s.o.Identity)
	sort.Strings(members)
	share := shareOf(s.o.Identity, members, s.o.Count)
	s.mu.Lock()
	s.members = len(members)
	s.mu.Unlock()
	membersGauge.Set(float64(len(members)))
	defer func() { heldGauge.Set(float64(len(s.active()))) }()

	// Shards another replica took from under us (we could not renew in time) are gone now;
	// the version we took over, seen again, is only the cache behind our own write.
	for i, l := range shards {
		if h := s.holding(i); h != nil && holderOf(l) != s.o.Identity && l.ResourceVersion != h.replaced {
			s.drop(i)
		}
	}
	var errs []error
	// The renewals go out together: a round under a loaded API server must not take a
	// request's latency per shard, or the others would see our renewals late.
	held := s.Held()
	renewed := make([]error, len(held))
	var wg sync.WaitGroup
	for k, i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			renewed[k] = s.renew(ctx, i, shards[i])
		}()
	}
	wg.Wait()
	for _, err := range renewed {
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Beyond the share, the highest shards are marked for release; a marked shard is given up
	// once no request under it is in flight (until then it is renewed, so that nobody else
	// acts on its BMCs while one runs).
	active := s.active()
	for k := len(active) - 1; k >= 0 && len(active) > share; k-- {
		s.setReleasing(active[k], true)
		active = active[:k]
	}
	for _, i := range s.Held() {
		if len(active) < share && s.setReleasing(i, false) {
			active = append(active, i) // wanted again before it went
		}
	}
	for _, i := range s.Held() {
		s.tryRelease(ctx, i, shards[i])
	}
	for i := 0; i < s.o.Count && len(s.active()) < share; i++ {
		if s.holds(i) {
			continue
		}
		l := shards[i]
		if l != nil && holderOf(l) != "" && holderOf(l) != s.o.Identity && !s.expired(l, now) {
			continue
		}
		if err := s.acquire(ctx, i, l); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// noteExpiry remembers the earliest expiry of another replica's Lease within a retry period.
func (s *Set) noteExpiry(leases []coordinationv1.Lease, now time.Time) {
	var first time.Time
	for i := range leases {
		l := &leases[i]
		if h := holderOf(l); h == "" || h == s.o.Identity {
			continue
		}
		s.mu.Lock()
		at := s.observed[l.Name].seen.Add(s.duration(l))
		s.mu.Unlock()
		if at.After(now) && at.Before(now.Add(s.o.RetryPeriod)) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	s.mu.Lock()
	s.expiry = first
	s.mu.Unlock()
}

// nextExpiry is the expiry noteExpiry found, if any.
func (s *Set) nextExpiry() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiry, !s.expiry.IsZero()
}

// active lists the shards held and not marked for release, in order.
func (s *Set) active() []int {
	var out []int
	for _, i := range s.Held() {
		if h := s.holding(i); h != nil {
			h.mu.Lock()
			if !h.releasing {
				out = append(out, i)
			}
			h.mu.Unlock()
		}
	}
	return out
}

func (s *Set) holding(i int) *holding {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[i]
}

// setReleasing marks shard i for release or unmarks it; it reports whether that changed it.
func (s *Set) setReleasing(i int, releasing bool) bool {
	h := s.holding(i)
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := h.releasing != releasing
	h.releasing = releasing
	return changed
}

// Members is how many replicas the last round counted, this one included.
func (s *Set) Members() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members
}

// shareOf is how many of count shards the replica id holds among members (sorted): count split
// as evenly as it goes, the first replicas in order one more.
func shareOf(id string, members []string, count int) int {
	i := sort.SearchStrings(members, id)
	share := count / len(members)
	if i < count%len(members) {
		share++
	}
	return share
}

const shardAnnotation = "metalhub.io/shard"

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func (s *Set) duration(l *coordinationv1.Lease) time.Duration {
	if l != nil && l.Spec.LeaseDurationSeconds != nil {
		return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return s.o.LeaseDuration
}

// observe notes when l last changed and reports whether it has expired.
func (s *Set) observe(l *coordinationv1.Lease, now time.Time) bool {
	s.mu.Lock()
	o, ok := s.observed[l.Name]
	if !ok || o.rv != l.ResourceVersion {
		o = observation{rv: l.ResourceVersion, seen: now}
		s.observed[l.Name] = o
	}
	s.mu.Unlock()
	return !now.Before(o.seen.Add(s.duration(l)))
}

func (s *Set) expired(l *coordinationv1.Lease, now time.Time) bool {
	s.mu.Lock()
	o, ok := s.observed[l.Name]
	s.mu.Unlock()
	return ok && !now.Before(o.seen.Add(s.duration(l)))
}

func (s *Set) forget(seen map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.observed {
		if !seen[name] {
			delete(s.observed, name)
		}
	}
}

func (s *Set) holds(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[i] != nil
}

// drop forgets shard i at once (another replica holds it; no request of ours may start).
func (s *Set) drop(i int) {
	s.mu.Lock()
	h := s.held[i]
	delete(s.held, i)
	s.mu.Unlock()
	if h != nil {
		h.mu.Lock()
		h.gone = true
		h.expire()
		h.mu.Unlock()
		s.o.Logger.Info("shard no longer held", "shard", i)
	}
}

// expire forgets the shards whose certainty ran out (the API server cannot be reached).
func (s *Set) expire() {
	now := s.o.Now()
	for _, i := range s.Held() {
		s.mu.Lock()
		h := s.held[i]
		s.mu.Unlock()
		h.mu.Lock()
		over := !now.Before(h.validity)
		h.mu.Unlock()
		if over {
			s.drop(i)
		}
	}
}

func (s *Set) lease(i int) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.o.Namespace, Name: fmt.Sprintf("%s-%d", s.o.Name, i),
		Labels:      map[string]string{SetLabel: s.o.Name, RoleLabel: RoleShard},
		Annotations: map[string]string{shardAnnotation: strconv.Itoa(i)}}}
}

// renew moves shard i's renewTime; the certainty is counted from before the request went out.
func (s *Set) renew(ctx context.Context, i int, l *coordinationv1.Lease) error {
	start := s.o.Now()
	if l == nil {
		s.expire()
		return fmt.Errorf("shard %d: its lease is gone", i)
	}
	// Updated in place (no copy): a release later in this round must send the renewed resourceVersion.
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(start))
	if err := s.o.Client.Update(ctx, l); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Changed since the list: the next round reads who holds it now.
			s.expire()
			return nil
		}
		s.expire()
		return fmt.Errorf("renewing shard %d: %w", i, err)
	}
	s.extend(i, start)
	return nil
}

func (s *Set) extend(i int, start time.Time) {
	s.mu.Lock()
	h := s.held[i]
	s.mu.Unlock()
	if h == nil {
		return
	}
	h.mu.Lock()
	if v := start.Add(s.o.RenewDeadline); v.After(h.validity) {
		h.validity = v
	}
	if !h.gone {
		h.setEnd(start.Add(s.o.LeaseDuration-HandoverMargin(s.o.RetryPeriod)), s.o.Now)
	}
	h.mu.Unlock()
}

// acquire takes shard i: free (no holder), expired, or not created yet.
func (s *Set) acquire(ctx context.Context, i int, l *coordinationv1.Lease) error {
	start := s.o.Now()
	now := metav1.NewMicroTime(start)
	var err error
	replaced := ""
	if l != nil {
		replaced = l.ResourceVersion
	}
	if l == nil {
		l = s.lease(i)
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(s.o.Identity), LeaseDurationSeconds: ptr.To(int32(s.o.LeaseDuration / time.Second)),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(int32(0))}
		err = s.o.Client.Create(ctx, l)
	} else {
		l = l.DeepCopy()
		l.Spec.HolderIdentity = ptr.To(s.o.Identity)
		l.Spec.LeaseDurationSeconds = ptr.To(int32(s.o.LeaseDuration / time.Second))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		err = s.o.Client.Update(ctx, l)
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return nil // another replica was faster
	}
	if err != nil {
		return fmt.Errorf("taking shard %d: %w", i, err)
	}
	s.mu.Lock()
	h := &holding{validity: start.Add(s.o.RenewDeadline), replaced: replaced, expired: make(chan struct{})}
	h.mu.Lock()
	h.setEnd(start.Add(s.o.LeaseDuration-HandoverMargin(s.o.RetryPeriod)), s.o.Now)
	h.mu.Unlock()
	s.held[i] = h
	gates := append([]acquirer(nil), s.gates...)
	s.mu.Unlock()
	s.o.Logger.Info("shard taken", "shard", i, "identity", s.o.Identity)
	for _, g := range gates {
		g.acquired(i)
	}
	return nil
}

// tryRelease gives shard i up if it is marked for release and no request under it is in
// flight: the Lease without a holder, which the next replica short of its share takes at once.
func (s *Set) tryRelease(ctx context.Context, i int, l *coordinationv1.Lease) {
	h := s.holding(i)
	if h == nil {
		return
	}
	h.mu.Lock()
	releasing := h.releasing
	h.mu.Unlock()
	// Marked, no request starts under it; taken for writing, none is in flight.
	if !releasing || !h.inflight.TryLock() {
		return
	}
	defer h.inflight.Unlock()
	s.release(ctx, i, l)
}

// release drops shard i and writes its Lease without a holder. No request may be in flight
// under it.
func (s *Set) release(ctx context.Context, i int, l *coordinationv1.Lease) {
	s.drop(i)
	if l == nil || holderOf(l) != s.o.Identity {
		return
	}
	l = l.DeepCopy()
	for try := 0; ; try++ {
		l.Spec.HolderIdentity = nil
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(s.o.Now()))
		err := s.o.Client.Update(ctx, l)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || try > 0 {
			s.o.Logger.Info("releasing shard", "shard", i, "error", err.Error())
			return
		}
		// Our view was behind (a cache): read the Lease itself; still ours, give it up.
		if err := s.o.Client.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil || holderOf(l) != s.o.Identity {
			return
		}
	}
}

// renewMember keeps this replica's member Lease current, creating it when missing.
func (s *Set) renewMember(ctx context.Context, l *coordinationv1.Lease, start time.Time) error {
	now := metav1.NewMicroTime(start)
	if l == nil {
		return s.o.Client.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.o.Namespace, Name: s.memberID, Labels: map[string]string{SetLabel: s.o.Name, RoleLabel: RoleMember}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(s.o.Identity), LeaseDurationSeconds: ptr.To(int32(s.o.LeaseDuration / time.Second)),
				AcquireTime: &now, RenewTime: &now},
		})
	}
	l = l.DeepCopy()
	l.Spec.RenewTime = &now
	return s.o.Client.Update(ctx, l)
}

// leave gives up every shard and deletes the member Lease, on a clean stop. A shard with a
// request still in flight is only dropped: its Lease expires by itself, after that request has
// most likely ended, instead of being handed over while it runs.
func (s *Set) leave() {
	for _, i := range s.Held() {
		s.setReleasing(i, true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.o.RenewDeadline)
	defer cancel()
	var list coordinationv1.LeaseList
	if err := s.o.Client.List(ctx, &list, client.InNamespace(s.o.Namespace), client.MatchingLabels{SetLabel: s.o.Name}); err == nil {
		for k := range list.Items {
			l := &list.Items[k]
			switch {
			case l.Name == s.memberID:
				_ = s.o.Client.Delete(ctx, l)
			case l.Labels[RoleLabel] == RoleShard:
				if i, err := strconv.Atoi(l.Annotations[shardAnnotation]); err == nil {
					s.tryRelease(ctx, i, l)
				}
			}
		}
	}
	for _, i := range s.Held() {
		s.drop(i)
	}
}

// NewLeaseCache is a cache of the Leases in namespace only (Options.Leases): the operator's
// rights to Leases end at its namespace, and a cluster's node Leases are none of its business.
func NewLeaseCache(cfg *rest.Config, scheme *runtime.Scheme, namespace string) (cache.Cache, error) {
	return cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {}}})
}

func (s *Set) reader() client.Reader {
	if s.o.Leases != nil {
		return s.o.Leases
	}
	return s.o.Client
}

// watch observes every change of the set's Leases as it arrives, and kicks a round when one
// frees a shard or a member comes or goes.
func (s *Set) watch(ctx context.Context) error {
	if s.o.Leases == nil {
		return nil
	}
	inf, err := s.o.Leases.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return fmt.Errorf("watching shard leases: %w", err)
	}
	note := func(obj any, added bool) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Labels[SetLabel] != s.o.Name {
			return
		}
		s.observe(l, s.o.Now())
		if added && l.Labels[RoleLabel] == RoleMember || l.Labels[RoleLabel] == RoleShard && holderOf(l) == "" {
			s.poke()
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { note(obj, true) },
		UpdateFunc: func(_, obj any) { note(obj, false) },
		DeleteFunc: func(any) { s.poke() },
	}); err != nil {
		return fmt.Errorf("watching shard leases: %w", err)
	}
	if !s.o.Leases.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	return nil
}

func (s *Set) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
