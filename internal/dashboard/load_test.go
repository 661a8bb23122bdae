package dashboard

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// batchStats records what the stream sent.
type batchStats struct {
	at      []time.Time
	bytes   []int
	servers []int // upserts + deletes of servers per batch
}

func (b *batchStats) add(at time.Time, size, n int) {
	b.at = append(b.at, at)
	b.bytes = append(b.bytes, size)
	b.servers = append(b.servers, n)
}

func (b *batchStats) String() string {
	if len(b.at) == 0 {
		return "no batches"
	}
	minGap := time.Duration(0)
	for i := 1; i < len(b.at); i++ {
		if g := b.at[i].Sub(b.at[i-1]); minGap == 0 || g < minGap {
			minGap = g
		}
	}
	sum := func(xs []int) int {
		n := 0
		for _, x := range xs {
			n += x
		}
		return n
	}
	return fmt.Sprintf("%d batches over %s, servers per batch avg %d max %d, bytes per batch avg %d max %d, closest two %s apart",
		len(b.at), b.at[len(b.at)-1].Sub(b.at[0]).Round(time.Millisecond), sum(b.servers)/len(b.servers), slices.Max(b.servers),
		sum(b.bytes)/len(b.bytes), slices.Max(b.bytes), minGap.Round(time.Millisecond))
}

// parallel runs f on n items with a few workers, as a busy operator's writes arrive.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A thousand servers created, changed and deleted through the API reach a stream subscriber as
// a few dozen batches, never two within the batch interval, and the subscriber ends up with
// exactly the cluster's state.
func TestStreamThousandServers(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 1000 servers")
	}
	const n = 1000
	s := start(t, Options{})
	evs := stream(t, s)
	if ev := next(t, evs, 10*time.Second); ev.name != "snapshot" {
		t.Fatalf("first event %s", ev.name)
	}
	name := func(i int) string { return fmt.Sprintf("load-%04d", i) }
	seen := map[string]Summary{}
	stats := &batchStats{}
	// consume applies batches until cond holds of what the subscriber has.
	consume := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20s (%d servers seen; %s)", what, len(seen), stats)
			}
			ev := next(t, evs, time.Until(deadline))
			b := decodeBatch(t, []byte(ev.data))
			d := b.Changes[collServers]
			if d == nil {
				continue
			}
			stats.add(ev.at, len(ev.data), len(d.Upsert)+len(d.Delete))
			for _, raw := range d.Upsert {
				var sum Summary
				if err := json.Unmarshal(raw, &sum); err != nil {
					t.Fatal(err)
				}
				seen[sum.Name] = sum
			}
			for _, k := range d.Delete {
				delete(seen, k)
			}
		}
	}
	count := func(state string) int {
		c := 0
		for k, v := range seen {
			if len(k) > 5 && k[:5] == "load-" && (state == "" || v.State == state) {
				c++
			}
		}
		return c
	}
	t.Cleanup(func() {
		_ = env.Client.DeleteAllOf(ctx(), &metalv1alpha1.Server{}, client.MatchingLabels{"dashboard-test": "load"})
	})

	began := time.Now()
	parallel(t, n, func(i int) error {
		return env.Client.Create(ctx(), newServer(name(i), map[string]string{"dashboard-test": "load",
			LabelLocation: "LOAD", LabelRack: fmt.Sprintf("%d-%d", i/200+1, i/40%5+1), LabelShelf: fmt.Sprint(i%40 + 1), LabelHeight: "1"}))
	})
	consume("all created", func() bool { return count("") == n })
	t.Logf("created %d servers in %s; stream: %s", n, time.Since(began).Round(time.Millisecond), stats)
	created := *stats

	*stats = batchStats{}
	began = time.Now()
	parallel(t, n, func(i int) error {
		srv := &metalv1alpha1.Server{}
		if err := env.Client.Get(ctx(), client.ObjectKey{Name: name(i)}, srv); err != nil {
			return err
		}
		srv.Status.State = metalv1alpha1.ServerStateAvailable
		srv.Status.PowerState = metalv1alpha1.PowerStateOff
		return env.Client.Status().Update(ctx(), srv)
	})
	consume("all Available", func() bool { return count(string(metalv1alpha1.ServerStateAvailable)) == n })
	t.Logf("changed %d servers in %s; stream: %s", n, time.Since(began).Round(time.Millisecond), stats)
	changed := *stats

	*stats = batchStats{}
	began = time.Now()
	if err := env.Client.DeleteAllOf(ctx(), &metalv1alpha1.Server{}, client.MatchingLabels{"dashboard-test": "load"}); err != nil {
		t.Fatal(err)
	}
	consume("all deleted", func() bool { return count("") == 0 })
	t.Logf("deleted %d servers in %s; stream: %s", n, time.Since(began).Round(time.Millisecond), stats)

	for what, st := range map[string]*batchStats{"create": &created, "change": &changed, "delete": stats} {
		// The hub waits the interval after each flush; delivery jitter may bring two a little
		// closer on the reading side, never near zero.
		for i := 1; i < len(st.at); i++ {
			if g := st.at[i].Sub(st.at[i-1]); g < batchInterval/2 {
				t.Errorf("%s: batches %d and %d only %s apart", what, i-1, i, g)
			}
		}
		if len(st.at) > n/10 {
			t.Errorf("%s: %d batches for %d servers: not batched", what, len(st.at), n)
		}
	}
}

// BenchmarkHubThousand: a change to each of 1000 servers, flushed as one batch.
func BenchmarkHubThousand(b *testing.B) {
	h := newHub(time.Hour)
	_, sub := h.subscribe()
	sums := make([]Summary, 1000)
	for i := range sums {
		sums[i] = Summary{Name: fmt.Sprintf("srv-%04d", i), Power: "On", BMC: fmt.Sprintf("bmc-%04d", i), BMCHealth: "ok",
			Placement: Placement{Placed: true, Location: "DC1", Row: "1", Rack: fmt.Sprintf("1-%d", i/40), Shelf: i%40 + 1, Height: 1}}
	}
	size := 0
	for i := 0; b.Loop(); i++ {
		for j := range sums {
			sums[j].State = fmt.Sprint(i)
			_ = h.set(collServers, sums[j].Name, sums[j])
		}
		_, size = h.flush()
		<-sub.ch
	}
	b.ReportMetric(float64(size), "bytes/batch")
}
