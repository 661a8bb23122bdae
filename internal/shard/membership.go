package shard

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The membership: each round renews what this replica holds, counts the members and gives up
// or takes shards until each replica holds its share.

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
