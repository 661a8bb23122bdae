package shard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

const (
	count         = 12
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

func TestOf(t *testing.T) {
	const keys, n = 3000, 12
	per := make([]int, n)
	for i := range keys {
		key := fmt.Sprintf("bmc/%d", i)
		s := Of(key, n)
		if s < 0 || s >= n {
			t.Fatalf("Of(%q, %d) = %d: out of range", key, n, s)
		}
		if again := Of(key, n); again != s {
			t.Fatalf("Of(%q, %d) not stable: %d then %d", key, n, s, again)
		}
		per[s]++
	}
	mean := keys / n
	for s, got := range per {
		if got < mean*60/100 || got > mean*140/100 {
			t.Errorf("shard %d has %d keys, mean %d: not within 60%%..140%%", s, got, mean)
		}
	}

	// Jump hash: going to n+1 shards moves keys only to the new shard, about 1/(n+1) of them.
	moved := 0
	for i := range keys {
		key := fmt.Sprintf("bmc/%d", i)
		if before, after := Of(key, n), Of(key, n+1); before != after {
			if after != n {
				t.Fatalf("%q moved from shard %d to %d, not to the new shard %d", key, before, after, n)
			}
			moved++
		}
	}
	if want := keys / (n + 1); moved < want*60/100 || moved > want*140/100 {
		t.Errorf("growing to %d shards moved %d keys, want about %d", n+1, moved, want)
	}

	for _, n := range []int{1, 0, -1} {
		if got := Of("bmc/x", n); got != 0 {
			t.Errorf("Of(_, %d) = %d, want 0", n, got)
		}
	}
}

func TestShareOf(t *testing.T) {
	for _, tc := range []struct {
		members []string
		count   int
		want    []int // share of each member, in order
	}{
		{[]string{"a"}, 12, []int{12}},
		{[]string{"a", "b"}, 12, []int{6, 6}},
		{[]string{"a", "b", "c"}, 12, []int{4, 4, 4}},
		{[]string{"a", "b", "c", "d", "e"}, 12, []int{3, 3, 2, 2, 2}},
		{[]string{"a", "b", "c"}, 2, []int{1, 1, 0}},
		{[]string{"a", "b", "c", "d", "e", "f", "g"}, 12, []int{2, 2, 2, 2, 2, 1, 1}},
	} {
		t.Run(fmt.Sprintf("%d over %d", tc.count, len(tc.members)), func(t *testing.T) {
			sum := 0
			for k, id := range tc.members {
				got := shareOf(id, tc.members, tc.count)
				if got != tc.want[k] {
					t.Errorf("shareOf(%q) = %d, want %d", id, got, tc.want[k])
				}
				sum += got
			}
			if sum != tc.count {
				t.Errorf("shares sum to %d, want %d", sum, tc.count)
			}
		})
	}
}

func TestMembershipConverges(t *testing.T) {
	_, a, b, c := converged(t)
	for _, s := range []*Set{a, b, c} {
		if got := s.Members(); got != 3 {
			t.Errorf("%s counts %d members, want 3", s.Identity(), got)
		}
	}
}

func TestDeadReplicaShardsMove(t *testing.T) {
	f, a, b, c := converged(t)
	// c is killed: it ticks no more, but its Owns keeps running on the shared clock, so the
	// exclusivity check after every tick covers the window in which it still believes.
	died := f.lastTick[c]
	orphans := c.Held()
	taken := map[int]time.Time{}
	for range 20 {
		at := f.round(a, b)
		for _, i := range orphans {
			if _, ok := taken[i]; !ok && (a.Owns(i) || b.Owns(i)) {
				taken[i] = at
			}
		}
	}
	f.assertSplit(6, a, b)
	for _, s := range []*Set{a, b} {
		if got := s.Members(); got != 2 {
			t.Errorf("%s counts %d members, want 2", s.Identity(), got)
		}
	}
	for _, i := range orphans {
		at, ok := taken[i]
		if !ok {
			t.Errorf("shard %d of the dead replica never taken", i)
			continue
		}
		if after := at.Sub(died); after < leaseDuration || after > leaseDuration+2*retryPeriod {
			t.Errorf("shard %d taken %s after the dead replica's last renewal, want within [%s, %s]",
				i, after, leaseDuration, leaseDuration+2*retryPeriod)
		}
	}
}

func TestHoldFencesRequests(t *testing.T) {
	f := newFleet(t)
	a := f.add("a")
	f.round(a)
	b := f.add("b")
	f.round(b) // b counts a but finds every shard held: it takes none

	release, _, err := a.Hold(0, time.Time{})
	if err != nil {
		t.Fatalf("Hold of a shard held: %v", err)
	}
	release()
	if _, _, err := b.Hold(0, time.Time{}); err == nil {
		t.Error("Hold of a shard another replica holds succeeded")
	}
	// A request that could run past the moment another replica may take the shard is refused.
	if r, _, err := a.Hold(0, f.clk.Now().Add(leaseDuration)); err == nil {
		r()
		t.Error("Hold for a request that could outlast the lease succeeded")
	}
	if r, _, err := a.Hold(0, f.clk.Now().Add(retryPeriod)); err != nil {
		t.Errorf("Hold for a request well within the lease: %v", err)
	} else {
		r()
	}

	// No Tick of a from here: it is certain until a renew deadline after its last renewal.
	deadline := f.lastTick[a].Add(renewDeadline)
	f.clk.advance(deadline.Add(-time.Millisecond).Sub(f.clk.Now()))
	if !a.Owns(0) {
		t.Error("Owns false before the renew deadline passed")
	}
	f.clk.advance(time.Millisecond)
	if a.Owns(0) {
		t.Error("Owns true once the renew deadline passed without a renewal")
	}
	if _, _, err := a.Hold(0, time.Time{}); err == nil {
		t.Error("Hold succeeded once the renew deadline passed without a renewal")
	}
}

// A renewal that comes back after the shard's end passed (a slow API server: the timer cut the
// requests in flight) makes the shard certain again, and the requests after it are not cut as
// they start: each got the closed channel of the lapse until the shard moved.
func TestRenewalAfterALapseFencesAfresh(t *testing.T) {
	f := newFleet(t)
	a := f.add("a")
	f.round(a)
	h := a.holding(0)
	h.mu.Lock()
	h.expire() // what the end's timer does when no renewal moved the end in time
	h.mu.Unlock()
	release, cut, err := a.Hold(0, time.Time{})
	if err != nil {
		t.Fatalf("Hold before the renewal: %v", err)
	}
	release()
	select {
	case <-cut:
	default:
		t.Fatal("the lapse did not cut requests")
	}
	f.round(a) // the renewal comes back
	release, expired, err := a.Hold(0, f.clk.Now().Add(retryPeriod))
	if err != nil {
		t.Fatalf("Hold after the renewal: %v", err)
	}
	defer release()
	select {
	case <-expired:
		t.Fatal("a request after the renewal is cut as it starts")
	default:
	}
}

// A shard given up on purpose goes only once no request under it is in flight: until then it is
// renewed (so nobody else acts on its BMCs) but no new request starts under it; a renewal never
// waits for a request.
func TestReleaseWaitsForHolds(t *testing.T) {
	f := newFleet(t)
	const give = count - 1 // a gives up its highest shards first: with b, 6..11
	lease := func(i int) string {
		var l coordinationv1.Lease
		if err := f.cl.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: fmt.Sprintf("shards-%d", i)}, &l); err != nil {
			t.Fatal(err)
		}
		return holderOf(&l)
	}
	a := f.add("a")
	f.round(a)
	if got := len(a.Held()); got != count {
		t.Fatalf("a alone holds %d shards, want %d", got, count)
	}
	release, _, err := a.Hold(give, time.Time{})
	if err != nil {
		t.Fatalf("Hold(%d): %v", give, err)
	}
	b := f.add("b")
	f.round(b) // b's member Lease exists now: a's next round gives up six shards
	f.round(a)
	if got := lease(give); got != "a" {
		t.Fatalf("shard %d given up to %q while a request under it was in flight", give, got)
	}
	if lease(give-1) == "a" {
		t.Errorf("shard %d, with no request in flight, was not given up", give-1)
	}
	if a.Owns(give) {
		t.Errorf("shard %d marked for release still owned: new passes would act under it", give)
	}
	if r, _, err := a.Hold(give, time.Time{}); err == nil {
		r()
		t.Errorf("a new request started under shard %d marked for release", give)
	}
	// Still renewed while the request runs: past the renew deadline the Lease is a's, fresh.
	for range 6 {
		f.round(a, b)
		if got := lease(give); got != "a" {
			t.Fatalf("shard %d held by %q while a's request is in flight", give, got)
		}
	}
	release()
	f.round(a, b)
	if got := lease(give); got == "a" {
		t.Errorf("shard %d still held by a after its request ended", give)
	}
	f.round(a, b)
	f.assertSplit(count/2, a, b)
}

// fleet is replicas sharing one fake API server and one clock that only the test moves.
type fleet struct {
	t        *testing.T
	cl       client.Client
	clk      *clock
	sets     []*Set
	lastTick map[*Set]time.Time
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newFleet(t *testing.T) *fleet {
	scheme := kruntime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return &fleet{t: t, cl: fake.NewClientBuilder().WithScheme(scheme).Build(),
		clk: &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}, lastTick: map[*Set]time.Time{}}
}

func (f *fleet) add(id string) *Set { return f.addWith(id, f.cl) }

func (f *fleet) addWith(id string, cl client.Client) *Set {
	s, err := New(Options{Count: count, Namespace: "ns", Name: "shards", Identity: id,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Client: cl, Now: f.clk.Now})
	if err != nil {
		f.t.Fatal(err)
	}
	f.sets = append(f.sets, s)
	return s
}

// round ticks each of sets once at the same instant, checking exclusivity over the whole fleet
// (dead replicas included) after every tick, then moves the clock a retry period. It returns the
// instant the round ran at.
func (f *fleet) round(sets ...*Set) time.Time {
	f.t.Helper()
	at := f.clk.Now()
	for _, s := range sets {
		if err := s.Tick(context.Background()); err != nil {
			f.t.Fatalf("%s.Tick: %v", s.Identity(), err)
		}
		f.lastTick[s] = at
		f.assertExclusive()
	}
	f.clk.advance(retryPeriod)
	return at
}

func (f *fleet) assertExclusive() {
	f.t.Helper()
	for i := range count {
		var owners []string
		for _, s := range f.sets {
			if s.Owns(i) {
				owners = append(owners, s.Identity())
			}
		}
		if len(owners) > 1 {
			f.t.Fatalf("at %s shard %d owned by %s at once", f.clk.Now().Format(time.TimeOnly), i, strings.Join(owners, " and "))
		}
	}
}

// assertSplit checks that sets hold want shards each, disjoint, covering every shard.
func (f *fleet) assertSplit(want int, sets ...*Set) {
	f.t.Helper()
	owner := map[int]string{}
	for _, s := range sets {
		held := s.Held()
		if len(held) != want {
			f.t.Errorf("%s holds %v, want %d shards", s.Identity(), held, want)
		}
		for _, i := range held {
			if o, ok := owner[i]; ok {
				f.t.Errorf("shard %d held by both %s and %s", i, o, s.Identity())
			}
			owner[i] = s.Identity()
			if !s.Owns(i) {
				f.t.Errorf("%s holds shard %d but not for certain", s.Identity(), i)
			}
		}
	}
	if len(owner) != count {
		f.t.Errorf("shards held: %d of %d", len(owner), count)
	}
}

// converged brings up a, then b, then c, and ticks them until they settle.
func converged(t *testing.T) (f *fleet, a, b, c *Set) {
	f = newFleet(t)
	a = f.add("a")
	for range 3 {
		f.round(a)
	}
	b = f.add("b")
	for range 3 {
		f.round(a, b)
	}
	c = f.add("c")
	for range 5 {
		f.round(a, b, c)
	}
	// Five rounds are less than a lease duration: shards given up on purpose must move at once.
	f.assertSplit(4, a, b, c)
	if t.Failed() {
		t.FailNow()
	}
	return f, a, b, c
}

// A round that reads the Leases from a cache still behind our own taking of a shard (it shows
// the version we overwrote) keeps the shard: only a version we have not seen says another
// replica holds it.
func TestStaleViewKeepsAShardTaken(t *testing.T) {
	f := newFleet(t)
	stale := &staleList{Client: f.cl}
	a := f.add("a")
	b := f.addWith("b", stale)
	for range 3 {
		f.round(a)
	}
	// b joins: a gives up six shards (holder cleared); b's view is frozen right there.
	f.round(b)
	f.round(a)
	if err := f.cl.List(context.Background(), &stale.frozen, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	f.round(b) // b takes the freed shards, then reads only the frozen view
	stale.freeze = true
	taken := b.Held()
	if len(taken) == 0 {
		t.Fatal("b took no shard")
	}
	f.round(b)
	for _, i := range taken {
		if !b.Owns(i) {
			t.Errorf("b dropped shard %d on a view older than its own taking of it", i)
		}
	}
	// A version it has not seen, held by another, does make it let go.
	stale.freeze = false
	f.round(a, b)
	f.assertSplit(count/2, a, b)
}

// staleList answers List from a frozen snapshot while freeze is set.
type staleList struct {
	client.Client
	frozen coordinationv1.LeaseList
	freeze bool
}

func (s *staleList) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if l, ok := list.(*coordinationv1.LeaseList); ok && s.freeze {
		s.frozen.DeepCopyInto(l)
		return nil
	}
	return s.Client.List(ctx, list, opts...)
}

func TestCheckRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout, lease, retry time.Duration
		ok                    bool
	}{
		{10 * time.Second, 15 * time.Second, 2 * time.Second, true},
		{12 * time.Second, 15 * time.Second, 2 * time.Second, true},
		{13 * time.Second, 15 * time.Second, 2 * time.Second, false},
		{30 * time.Second, 15 * time.Second, 2 * time.Second, false},
	} {
		if err := CheckRequestTimeout(tc.timeout, tc.lease, tc.retry); (err == nil) != tc.ok {
			t.Errorf("CheckRequestTimeout(%s, %s, %s) = %v, want ok %v", tc.timeout, tc.lease, tc.retry, err, tc.ok)
		}
	}
}
