package campaign

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// fixedSeeds are what `go test ./test/campaign/` (and so `make test`) runs: about 30 s each on
// two cores when they pass (a seed that does not converge waits out convergeBound). Each breaches
// on 713458b, between them every hole of issue 14 the campaign reaches (a held server deleted
// with its BMC and BMCSecret, an operation run twice, unpark powering off a claimed box, a slow
// BMC's server never getting a status, a BMC pass without a deadline, a maintenance never booting
// its configuration, BMC operations ignored) and three it found (a restore un-parking a server, a
// claim's deletion hanging behind a maintenance or a park); which of them a run hits varies with
// timing.
var fixedSeeds = []uint64{3, 4, 9, 15, 17, 23, 31, 46}

// seedBudget is what a seed may take at most (setup, chaos, a failed convergence, teardown).
const seedBudget = 3 * time.Minute

const (
	// convergeBound is how long the fleet may take to settle once faults stop. It covers the
	// controllers' fixed 15 s retry after a BMC failure, a lease handover and a rediscovery.
	convergeBound = 90 * time.Second
	// probeBound is how long a claim on a healthy server may take to bind and power on while
	// other BMCs are dead.
	probeBound = 10 * time.Second
)

// seeds reads METALHUB_CAMPAIGN_SEED (one seed), METALHUB_CAMPAIGN_SEEDS (that many, from
// METALHUB_CAMPAIGN_SEED_FROM, default 1), else the fixed set.
func seeds(t *testing.T) []uint64 {
	if v := os.Getenv("METALHUB_CAMPAIGN_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("METALHUB_CAMPAIGN_SEED=%q: %v", v, err)
		}
		return []uint64{s}
	}
	if v := os.Getenv("METALHUB_CAMPAIGN_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("METALHUB_CAMPAIGN_SEEDS=%q: want a count", v)
		}
		from := uint64(1)
		if f := os.Getenv("METALHUB_CAMPAIGN_SEED_FROM"); f != "" {
			if from, err = strconv.ParseUint(f, 10, 64); err != nil {
				t.Fatalf("METALHUB_CAMPAIGN_SEED_FROM=%q: %v", f, err)
			}
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = from + uint64(i)
		}
		return out
	}
	return fixedSeeds
}

// TestCampaign runs one schedule per seed, each a subtest seed-<n>, and prints the summary.
func TestCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("long: each seed runs a fleet, two managers and a minute of faults")
	}
	tot := &totals{checks: map[string]int{}, breaches: map[string]int{}, seeds: map[string][]uint64{}}
	began := time.Now()
	for _, seed := range seeds(t) {
		if dl, ok := t.Deadline(); ok && time.Until(dl) < seedBudget {
			// Better a clear error and the summary than a timeout panic that loses both.
			t.Errorf("seed %d and later not run: %s left before the test deadline (raise -timeout)", seed, time.Until(dl).Round(time.Second))
			break
		}
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			tot.add(runSchedule(t, seed))
		})
	}
	tot.took = time.Since(began)
	summary := tot.String()
	t.Log("\n" + summary)
	if p := os.Getenv("METALHUB_CAMPAIGN_SUMMARY"); p != "" {
		if err := os.WriteFile(p, []byte(summary), 0o644); err != nil {
			t.Errorf("writing the summary: %v", err)
		}
	}
}

// result is what one schedule found.
type result struct {
	seed                   uint64
	steps, faults          int
	checks                 map[string]int
	breaches               []*breach
	setup, chaos, converge time.Duration
}

// runSchedule runs one seed: setup, chaos, heal, convergence, final checks.
func runSchedule(t *testing.T, seed uint64) *result {
	sch := newSchedule(seed)
	res := &result{seed: seed, checks: map[string]int{}}
	began := time.Now()
	w, err := newWorld(t, sch)
	if w != nil {
		defer w.close()
	}
	if err != nil {
		t.Fatalf("seed %d: harness: %v", seed, err)
	}
	// Polls start with the fleet's registration: every recorded action, discovery's included,
	// is judged with the API's state before it.
	ctx, cancel := context.WithCancel(w.ctx)
	pollDone, scrapeDone := make(chan struct{}), make(chan struct{})
	defer func() { cancel(); <-pollDone; <-scrapeDone }()
	go w.m.run(ctx, pollDone)
	go w.scrapeLoop(ctx, scrapeDone)
	if err := w.waitAvailable(90 * time.Second); err != nil {
		w.m.mu.Lock()
		w.m.breach(invConverge, "setup", "%v", err)
		w.m.mu.Unlock()
		return w.finish(t, res)
	}
	res.setup = time.Since(began)
	start := time.Now()
	w.m.setStart(start)

	for n, st := range sch.Steps {
		// Pacing: a step runs at its planned time (or later, behind a slow one).
		if d := time.Until(start.Add(st.At)); d > 0 {
			time.Sleep(d)
		}
		at := time.Since(start)
		out := w.run(st)
		w.mu.Lock()
		w.journal = append(w.journal, fmt.Sprintf("  #%02d +%6.2fs (planned +%5.2fs) %s -> %s", n+1, at.Seconds(), st.At.Seconds(), st.describe(w.num), out))
		w.steps++
		if st.Kind.isFault() && !strings.HasPrefix(out, "skipped") {
			w.injected++
		}
		w.mu.Unlock()
	}
	if d := time.Until(start.Add(sch.Chaos)); d > 0 {
		time.Sleep(d)
	}
	w.probeWG.Wait()
	res.chaos = time.Since(start)

	// Faults stop: heal every BMC, stop user actions, restart the manager once.
	healed := time.Now()
	w.note("heal: every fault ends, the fleet's objects are re-created, the leader restarts")
	w.heal()
	leader := w.leader()
	if leader == nil {
		leader = w.slots[0]
	}
	leader.stop(syscall.SIGKILL)
	leader.start()
	w.voidProbes("manager restarted")
	w.converge(healed)
	res.converge = time.Since(healed)

	// Final checks: every recorded action judged, every operation accounted for, pass times.
	if err := w.m.pollOnce(w.ctx); err != nil {
		t.Errorf("final poll: %v", err)
	}
	for _, s := range w.slots {
		s.scrape(w.ctx, &http.Client{Timeout: 2 * time.Second})
	}
	w.m.mu.Lock()
	w.m.judgeRecords(true)
	if n := len(w.m.snaps); n > 0 {
		w.m.finalOps(w.m.snaps[n-1])
	}
	w.checkPasses()
	w.checkProbes()
	w.judgePartitions()
	w.m.mu.Unlock()
	return w.finish(t, res)
}

// finish fills the result and, on a breach, prints the seed, how to replay it, the breaches and
// the whole schedule as it ran.
func (w *world) finish(t *testing.T, res *result) *result {
	w.mu.Lock()
	res.steps, res.faults = w.steps, w.injected
	journal := slices.Clone(w.journal)
	w.mu.Unlock()
	w.m.mu.Lock()
	for k, v := range w.m.checks {
		res.checks[k] = v
	}
	w.m.mu.Unlock()
	res.breaches = w.m.sortedBreaches()
	t.Logf("seed %d: %d steps, %d faults; setup %s, chaos %s, heal to converged %s; %d breaches",
		res.seed, res.steps, res.faults, res.setup.Round(100*time.Millisecond), res.chaos.Round(100*time.Millisecond),
		res.converge.Round(100*time.Millisecond), len(res.breaches))
	cleaned, excused := w.m.cleaningSummary()
	t.Logf("seed %d: %s: %s", res.seed, invClean, cleaned)
	for _, e := range excused {
		t.Logf("seed %d: %s excused %s", res.seed, invClean, e)
		journal = append(journal, "         "+invClean+" excused: "+e)
	}
	if len(res.breaches) == 0 {
		if os.Getenv("METALHUB_CAMPAIGN_JOURNAL") != "" {
			t.Logf("schedule of seed %d as it ran:\n%s", res.seed, strings.Join(journal, "\n"))
		}
		return res
	}
	var b strings.Builder
	for _, br := range res.breaches {
		fmt.Fprintf(&b, "  [%s] %s (x%d, first at +%s): %s\n", br.Inv, br.Subject, br.Count, br.At, br.Msg)
	}
	t.Errorf("seed %d: %d invariant breaches; replay with: make campaign SEED=%d\n%s", res.seed, len(res.breaches), res.seed, b.String())
	t.Logf("schedule of seed %d:\n%s\nas it ran (steps, notes):\n%s\nstate at the end:\n%s\nmanager logs: %s", res.seed, w.sch,
		strings.Join(journal, "\n"), w.dumpState(), w.dir)
	return res
}

// scrapeLoop reads every replica's metrics each second: a killed incarnation keeps its last
// sample, so its passes count too.
func (w *world) scrapeLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, s := range w.slots {
			s.scrape(ctx, hc)
		}
		w.settlePartitions(false)
	}
}

// checkPasses: no reconcile pass took longer than the pass timeout plus a margin, and none
// panicked. Called with w.m.mu held.
func (w *world) checkPasses() {
	total, over, panics := passTotals(w.slots)
	w.settlePartitions(true)
	for c, n := range w.excusedPasses() {
		if n > 0 {
			w.note("%.0f passes of the %s controller over the bound excused: their replica was cut off from the API server", n, c)
			over[c] = max(0, over[c]-n)
		}
	}
	controllers := slices.Sorted(maps.Keys(total))
	for _, c := range controllers {
		w.m.checks[invPassBound] += int(total[c])
		if over[c] > 0 {
			w.m.breach(invPassBound, "controller "+c, "%.0f of %.0f passes of the %s controller took longer than %s (pass timeout %s plus margin)",
				over[c], total[c], c, passBoundValue, bmcPassTimeout)
		}
		if panics[c] > 0 {
			w.m.breach(invPassBound, "controller "+c+" panics", "%.0f reconcile panics in the %s controller", panics[c], c)
		}
	}
}

// probe is one claim on a healthy server, timed while other BMCs are dead.
type probe struct {
	n            int
	bmc          int
	server       string
	claim        string
	dead         []int
	start        time.Time
	void, failed string
	took         time.Duration
}

// startProbe claims a healthy, Available server by name and times its binding and power-on.
func (w *world) startProbe(st step) (string, error) {
	s := w.m.last()
	if s == nil {
		return "", errSkip("no poll yet")
	}
	if w.leader() == nil {
		// A manager was just killed or handed over and no replica runs the controllers yet:
		// nothing is served within the probe's bound, healthy or not.
		return "", errSkip("no leader right now")
	}
	dead := w.dead()
	n := w.sch.BMCs
	chosen := -1
	for k := range n {
		i := (st.Index + k) % n
		if w.faulty(i) {
			continue
		}
		name := w.serverName(i)
		v := s.Servers[name]
		// A server with an operation still pending (a park, a restart) is not an idle one.
		b := s.BMCs[w.bmcName(i)]
		if b == nil || b.Deleting || v == nil || !claimable(v) || len(v.Taints) > 0 || v.Op != "" ||
			pendingMaintenance(s, name) || !w.accessible(i, b) {
			continue
		}
		busy := false
		for _, c := range s.Claims {
			busy = busy || c.ServerRef == name
		}
		if !busy {
			chosen = i
			break
		}
	}
	if chosen < 0 {
		return "", errSkip("no healthy Available server")
	}
	p := &probe{n: st.ID, bmc: chosen, server: w.serverName(chosen), claim: fmt.Sprintf("probe-%d", st.ID), dead: dead, start: time.Now()}
	c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.claim},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "campaign-image", ServerRef: &corev1.LocalObjectReference{Name: p.server}}}
	if err := w.c.Create(w.ctx, c); err != nil {
		return "", err
	}
	w.mu.Lock()
	w.probes = append(w.probes, p)
	w.mu.Unlock()
	w.probeWG.Add(1)
	go w.watchProbe(p, c)
	return fmt.Sprintf("%s on %s while BMCs %v are dead", p.claim, p.server, dead), nil
}

// accessible reports whether BMC i can be reached as registered right now: the BMCSecret it
// names and its Endpoint (if it has one) exist. A step may have just deleted one, before any
// poll shows its server fail (seed 51: BMCSecret bmc-4 deleted a second before a probe).
func (w *world) accessible(i int, b *bmcView) bool {
	if err := w.c.Get(w.ctx, client.ObjectKey{Name: b.Secret}, &metalv1alpha1.BMCSecret{}); err != nil {
		return false
	}
	if w.sch.Endpoint[i] {
		if err := w.c.Get(w.ctx, client.ObjectKey{Name: w.bmcName(i)}, &metalv1alpha1.Endpoint{}); err != nil {
			return false
		}
	}
	return true
}

func (w *world) watchProbe(p *probe, c *metalv1alpha1.ServerClaim) {
	defer w.probeWG.Done()
	sys := w.fleet.BMC(p.bmc).Systems()[0]
	deadline := p.start.Add(probeBound)
	for {
		got := &metalv1alpha1.ServerClaim{}
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(c), got); err == nil && got.Status.Phase == metalv1alpha1.PhaseBound && sys.PowerState() == redfish.PowerOn {
			w.mu.Lock()
			p.took = time.Since(p.start)
			w.mu.Unlock()
			break
		}
		if time.Now().After(deadline) {
			w.mu.Lock()
			p.failed = fmt.Sprintf("phase %q, power %s after %s", got.Status.Phase, sys.PowerState(), probeBound)
			w.mu.Unlock()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := w.c.Delete(w.ctx, c); err != nil {
		w.note("probe %s: deleting its claim: %v", p.claim, err)
	}
	w.m.poke()
}

// disturbProbes voids the probes a step makes meaningless: a manager restart stalls everything,
// a step on the probe's BMC or server changes what is measured.
func (w *world) disturbProbes(i int, k kind) {
	switch k {
	case kKill, kHandover, kRestore:
		w.voidProbes(string(k))
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.probes {
		if p.bmc == i && p.void == "" && p.took == 0 && p.failed == "" {
			p.void = string(k) + " on its server"
		}
	}
}

func (w *world) voidProbes(why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.probes {
		if p.void == "" && p.took == 0 && p.failed == "" {
			p.void = why
		}
	}
}

// checkProbes turns probe results into checks and breaches. Called with w.m.mu held.
func (w *world) checkProbes() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.probes {
		if p.void != "" {
			w.journal = append(w.journal, fmt.Sprintf("         probe %s void: %s", p.claim, p.void))
			continue
		}
		w.m.checks[invHealthy]++
		if p.failed != "" {
			w.m.breach(invHealthy, p.server, "claim %s on healthy server %s (BMCs %v dead) not Bound and powered on within %s: %s",
				p.claim, p.server, p.dead, probeBound, p.failed)
		}
	}
}

// faulty reports whether BMC i has any fault set right now: a BMC fault, a password changed
// and not yet in its BMCSecret, its machine registered twice, its rack paused by a move, or
// another BMC's BMCSecret named.
func (w *world) faulty(i int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	moving := w.moving != nil && w.moving.rack == fmt.Sprintf("r%d", i%2)
	_, shared := w.shared[i]
	return !reflect.DeepEqual(w.faults[i], w.baseFaults(i)) || w.slow[i] || w.credsChanged[i] || w.twinned[i] || moving || shared
}

// totals add up schedules for the summary.
type totals struct {
	schedules, steps, faults int
	checks, breaches         map[string]int
	seeds                    map[string][]uint64
	took                     time.Duration
}

func (t *totals) add(r *result) {
	t.schedules++
	t.steps += r.steps
	t.faults += r.faults
	for k, v := range r.checks {
		t.checks[k] += v
	}
	for _, b := range r.breaches {
		t.breaches[b.Inv]++
		if !slices.Contains(t.seeds[b.Inv], r.seed) {
			t.seeds[b.Inv] = append(t.seeds[b.Inv], r.seed)
		}
	}
}

// String is the summary: per invariant, schedules run, steps, faults injected, what was checked
// and breaches; the last line totals the breaches.
func (t *totals) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "invariant\tschedules\tsteps\tfaults\tchecked\tbreaches\tseeds")
	total := 0
	for _, inv := range invariants {
		total += t.breaches[inv]
		seeds := "-"
		if s := t.seeds[inv]; len(s) > 0 {
			seeds = strings.Trim(fmt.Sprint(s), "[]")
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", inv, t.schedules, t.steps, t.faults, t.checks[inv], t.breaches[inv], seeds)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "campaign: %d schedules, %d steps, %d faults injected in %s: %d breaches\n",
		t.schedules, t.steps, t.faults, t.took.Round(time.Second), total)
	return b.String()
}
