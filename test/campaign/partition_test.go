package campaign

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/shard"
)

// partitionRun is one shard owner cut off from the API server (kPartition) until its reconnect:
// the BMC's request journal of that window says whether the replica that took the shard over
// began before the cut-off one's last request ended.
type partitionRun struct {
	bmc      int
	slot     *slot
	holder   string // the cut-off replica's shard identity (in its User-Agent)
	shard    int
	ready    chan struct{} // closed once cut (the cut waits for a request in flight)
	cut      time.Time
	healed   time.Time // zero while cut off
	inFlight bool      // a request of the holder was in flight at the BMC at the cut
	// disturbed says why the window cannot be judged: a step that made another sender reach
	// the BMC legitimately (a second registration, an address handed over, a move, a restore).
	disturbed string
	// The cut-off incarnation's pass counts at the cut and a pass bound after the reconnect:
	// the passes over the bound in between waited on the API server, not on a BMC.
	inc            int
	atCut, settled *metricsSample
}

// partitionWait is how long a partition step waits for a request of the shard's holder to be in
// flight at the BMC: two resyncs.
const partitionWait = 6 * time.Second

// shardHolder is the identity holding shard k's Lease ("" when none).
func (w *world) shardHolder(k int) string {
	l := &coordinationv1.Lease{}
	if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("%s-%d", shardSet, k)}, l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// holderOf is the replica holding BMC i's shard in a sharded seed (nil: none, or not sharded).
func (w *world) holderOf(i int) *slot {
	if w.slots[0].link == nil {
		return nil
	}
	holder := w.shardHolder(shard.Of(shard.KeyBMC(w.bmcName(i)), shards))
	for _, s := range w.slots {
		if holder != "" && s.identity() == holder {
			return s
		}
	}
	return nil
}

// partition cuts the replica holding BMC i's shard off from the API server while the BMC
// answers st.Value late, once one of its requests is in flight (or after a moment without).
func (w *world) partition(st step, i int) (string, error) {
	if w.slots[0].link == nil {
		return "", errSkip("replicas not sharded")
	}
	n := w.sch.BMCs
	w.mu.Lock()
	switch {
	case w.cut != nil:
		w.mu.Unlock()
		return "", errSkip("a replica is cut off already")
	case w.twinned[i] || w.astray[i] || w.astray[(i+n-1)%n] || w.moving != nil:
		// Another registration or BMC would reach this machine too: its journal could not say
		// whose request was whose.
		w.mu.Unlock()
		return "", errSkip(w.bmcName(i) + " reached by another registration")
	}
	w.mu.Unlock()
	if o := (&metalv1alpha1.BMC{}); w.c.Get(w.ctx, client.ObjectKey{Name: w.bmcName(i)}, o) != nil || o.DeletionTimestamp != nil {
		return "", errSkip(w.bmcName(i) + " not registered: nobody sends it anything")
	}
	k := shard.Of(shard.KeyBMC(w.bmcName(i)), shards)
	owner := w.holderOf(i)
	if owner == nil {
		return "", errSkip(fmt.Sprintf("shard %d held by no running replica", k))
	}
	holder := owner.identity()
	b := w.fleet.BMC(i)
	b.JournalRequests(true)
	p := &partitionRun{bmc: i, slot: owner, holder: holder, shard: k, ready: make(chan struct{})}
	w.mu.Lock()
	w.faults[i].Latency = redfish.Duration(st.Value)
	b.SetFaults(w.faults[i])
	w.cut = p
	w.partitions = append(w.partitions, p)
	w.mu.Unlock()
	// The cut waits for a request in flight beside the schedule, which goes on meanwhile.
	go func() {
		defer close(p.ready)
		inFlight := false
		for deadline := time.Now().Add(partitionWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if b.Stats().InFlight > 0 {
				inFlight = true
				break
			}
		}
		owner.scrape(w.ctx, &http.Client{Timeout: time.Second})
		owner.mu.Lock()
		inc := owner.incarnation
		atCut := owner.samples[inc]
		owner.mu.Unlock()
		w.mu.Lock()
		p.cut, p.inFlight, p.inc, p.atCut = time.Now(), inFlight, inc, &atCut
		w.mu.Unlock()
		owner.link.Partition()
		// A shard whose holder is cut off is served by nobody until the Lease expires.
		w.voidProbes("a shard owner cut off")
		what := "no request in flight"
		if inFlight {
			what = "a request in flight"
		}
		w.note("partition: manager-%d cut off, %s at %s", owner.idx, what, w.bmcName(i))
	}()
	return fmt.Sprintf("manager-%d (holding shard %d of %s) to be cut off", owner.idx, k, w.bmcName(i)), nil
}

// reconnect ends the partition in force, if any: the replica reaches the API server again and
// the BMC answers at its usual pace.
func (w *world) reconnect() (string, error) {
	w.mu.Lock()
	p := w.cut
	w.cut = nil
	w.mu.Unlock()
	if p == nil {
		return "", errSkip("nobody cut off")
	}
	<-p.ready
	p.slot.link.Heal()
	w.mu.Lock()
	p.healed = time.Now()
	w.faults[p.bmc].Latency = w.baseFaults(p.bmc).Latency
	w.fleet.BMC(p.bmc).SetFaults(w.faults[p.bmc])
	w.mu.Unlock()
	return fmt.Sprintf("manager-%d reconnected", p.slot.idx), nil
}

// settlePartitions takes the pass counts of each reconnected replica once a pass that waited
// through its partition has ended (the scrape loop calls it; final: whatever the time).
func (w *world) settlePartitions(final bool) {
	// Never w.mu and a slot's lock together in this order: a slot notes under its own lock.
	w.mu.Lock()
	var due []*partitionRun
	for _, p := range w.partitions {
		if p.settled == nil && (final || (!p.healed.IsZero() && time.Since(p.healed) >= passBoundValue+time.Second)) {
			due = append(due, p)
		}
	}
	w.mu.Unlock()
	for _, p := range due {
		p.slot.mu.Lock()
		last := p.slot.samples[p.inc]
		p.slot.mu.Unlock()
		w.mu.Lock()
		p.settled = &last
		w.mu.Unlock()
	}
}

// excusedPasses are, per controller, the passes over the bound that a cut-off replica ended
// between its cut and a pass bound after its reconnect: they waited on an API server they could
// not reach (client-go bounds no write), which the bound (about BMCs) does not cover.
func (w *world) excusedPasses() map[string]float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]float64{}
	for _, p := range w.partitions {
		if p.settled == nil || p.atCut == nil {
			continue
		}
		for c, v := range p.settled.over {
			if d := v - p.atCut.over[c]; d > 0 {
				out[c] += d
			}
		}
	}
	return out
}

// disturbCut marks the partition in force unjudgeable when st lets another sender reach its BMC
// (i is st's target).
func (w *world) disturbCut(st step, i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.cut
	if p == nil {
		return
	}
	n := w.sch.BMCs
	switch {
	case st.Kind == kRestore && w.backup != nil:
		// A restore kills both replicas (their requests end with them); only a second
		// registration it brings back makes another sender.
		for _, o := range w.backup.objs {
			if o.GetName() == w.twinName(p.bmc) {
				p.disturbed = "a restored second registration"
			}
		}
	case st.Kind == kFault && st.Fault == fTwin && i == p.bmc:
		p.disturbed = "a second registration"
	case st.Kind == kFault && st.Fault == fAddressReuse && (i+1)%n == p.bmc:
		p.disturbed = "another BMC's address handed to it"
	case st.Kind == kFault && st.Fault == fMove:
		p.disturbed = "a move"
	}
}

// handover reads a partition window [cut, end) of a BMC's request journal: the cut-off holder's
// last request that ended after the cut, and the first request another replica began in the
// window (nil when none). The window holds the promise when firstNew does not begin before
// lastOld ended.
func handover(spans []redfish.RequestSpan, holder string, cut, end time.Time) (lastOld, firstNew *redfish.RequestSpan) {
	for k := range spans {
		s := &spans[k]
		if !strings.HasPrefix(s.UserAgent, "metalhub") || !s.Start.Before(end) {
			continue
		}
		if strings.Contains(s.UserAgent, holder) {
			if s.End.After(cut) && (lastOld == nil || s.End.After(lastOld.End)) {
				lastOld = s
			}
		} else if !s.Start.Before(cut) && (firstNew == nil || s.Start.Before(firstNew.Start)) {
			firstNew = s
		}
	}
	return lastOld, firstNew
}

// judgePartitions holds every partition's window to the hand-over's promise: no request of the
// replica that took the shard over began before the cut-off replica's last request ended.
// Called with w.m.mu held, after every partition ended.
func (w *world) judgePartitions() {
	w.mu.Lock()
	runs := w.partitions
	w.mu.Unlock()
	for _, p := range runs {
		subject := fmt.Sprintf("%s shard %d", w.bmcName(p.bmc), p.shard)
		if p.disturbed != "" {
			w.note("partition of %s not judged: %s reached the BMC meanwhile", subject, p.disturbed)
			continue
		}
		end := p.healed
		if end.IsZero() {
			end = time.Now()
		}
		lastOld, firstNew := handover(w.fleet.BMC(p.bmc).RequestSpans(), p.holder, p.cut, end)
		w.m.checks[invFenced]++
		if lastOld == nil || firstNew == nil {
			// Nothing of the old owner's after the cut, or no take-over before the reconnect.
			senders := map[string]int{}
			for _, s := range w.fleet.BMC(p.bmc).RequestSpans() {
				if s.Start.Before(end) && s.End.After(p.cut) {
					senders[s.UserAgent]++
				}
			}
			w.note("partition of %s: nothing to order (old owner %s's request after the cut: %v, new owner's before the reconnect: %v; requests in the window by sender: %v)",
				subject, p.holder, lastOld != nil, firstNew != nil, senders)
			continue
		}
		w.note("partition of %s: the old owner's last request ended +%s after the cut, the new owner's first began +%s after it",
			subject, lastOld.End.Sub(p.cut).Round(10*time.Millisecond), firstNew.Start.Sub(p.cut).Round(10*time.Millisecond))
		if firstNew.Start.Before(lastOld.End) {
			w.m.breach(invFenced, subject, "%s %s by %s began at +%s, before %s %s by the cut-off %s ended at +%s (cut at +%s)",
				firstNew.Method, firstNew.Path, firstNew.UserAgent, w.m.since(firstNew.Start), lastOld.Method, lastOld.Path, lastOld.UserAgent,
				w.m.since(lastOld.End), w.m.since(p.cut))
		}
	}
}
