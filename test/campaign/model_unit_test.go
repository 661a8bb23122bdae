package campaign

import (
	"strings"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// These tests need no control plane: they feed the model hand-made polls and records, so each
// invariant is shown to fire on what breaks it and to stay quiet on the legitimate neighbour.

// A seed is the whole schedule: same seed, same steps; and over a few seeds every step kind and
// every BMC fault occurs.
func TestScheduleIsAFunctionOfItsSeed(t *testing.T) {
	if a, b := newSchedule(7).String(), newSchedule(7).String(); a != b {
		t.Fatalf("seed 7 drew two different schedules:\n%s\n%s", a, b)
	}
	if newSchedule(7).String() == newSchedule(8).String() {
		t.Fatal("seeds 7 and 8 drew the same schedule")
	}
	kinds, faults := map[kind]bool{}, map[string]bool{}
	for seed := range uint64(40) {
		for _, st := range newSchedule(seed).Steps {
			kinds[st.Kind] = true
			if st.Kind == kFault {
				faults[st.Fault] = true
			}
			if st.At < 0 || st.At >= newSchedule(seed).Chaos {
				t.Fatalf("seed %d: step at %s outside the chaos phase", seed, st.At)
			}
		}
	}
	for _, w := range stepWeights {
		if !kinds[w.k] {
			t.Errorf("no schedule of 40 seeds has a %s step", w.k)
		}
	}
	for _, f := range []string{fFailedPower, fAddressReuse, fBoardSwap, fAfterEffect, fTwin, fMove} {
		if !faults[f] {
			t.Errorf("no schedule of 40 seeds injects %s", f)
		}
	}
	sets := map[kind]bool{}
	for _, st := range stepsOf(40) {
		if st.Kind == kFirmware {
			faults[st.Fault] = true
		}
		if st.Set {
			sets[st.Kind] = true
		}
	}
	if !sets[kFirmware] || !sets[kFirmwareDelete] {
		t.Errorf("no schedule of 40 seeds upgrades through a BIOSVersionSet and deletes one: %v", sets)
	}
	for _, f := range []string{fFlashLost, fFlashInert} {
		if !faults[f] {
			t.Errorf("no schedule of 40 seeds upgrades a BIOS with %s", f)
		}
	}
	for _, k := range []kind{kHeal, kFixSecret, kShare, kUnshare, kFirmware, kFirmwareDelete, kPartition, kReconnect} {
		if !kinds[k] {
			t.Errorf("no schedule of 40 seeds has a %s step", k)
		}
	}
	for _, f := range faultWeights {
		if !faults[f.f] {
			t.Errorf("no schedule of 40 seeds injects %s", f.f)
		}
	}
}

func stepsOf(seeds uint64) []step {
	var out []step
	for seed := range seeds {
		out = append(out, newSchedule(seed).Steps...)
	}
	return out
}

// fixture is a model over a fake recorder with one system, uuid "u0" behind bmc-0.
type fixture struct {
	t    *testing.T
	m    *model
	recs []redfish.Record
	now  time.Time
	seq  int64
	logs []string
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, now: time.Now()}
	f.m = newModelWith(nil, func() []redfish.Record { return f.recs }, func(int, string) string { return "u0" },
		func(format string, args ...any) { f.logs = append(f.logs, format) })
	return f
}

// poll files a snapshot 150 ms after the previous one.
func (f *fixture) poll(servers map[string]*srvView, claims map[string]*claimView) {
	f.now = f.now.Add(150 * time.Millisecond)
	s := &snapshot{Start: f.now, End: f.now.Add(10 * time.Millisecond), Servers: servers, Claims: claims,
		Maints: map[string]*maintView{}, BMCs: map[string]*bmcView{}}
	f.m.mu.Lock()
	f.m.add(s)
	f.m.mu.Unlock()
}

// act records a BMC action 50 ms after the last poll.
func (f *fixture) act(resetType string) {
	f.seq++
	f.recs = append(f.recs, redfish.Record{Seq: f.seq, Time: f.now.Add(50 * time.Millisecond), Action: redfish.ActionReset, ResetType: resetType})
}

func (f *fixture) breaches(inv string) int {
	n := 0
	for _, b := range f.m.sortedBreaches() {
		if b.Inv == inv {
			n++
		}
	}
	return n
}

func claimed(power metalv1alpha1.Power, deleting bool) (map[string]*srvView, map[string]*claimView) {
	return map[string]*srvView{"s0": {UID: "s0-1", UUID: "u0", ClaimRef: "default/c0", Finalizer: true, State: "Reserved"}},
		map[string]*claimView{"default/c0": {UID: "c0-1", Power: power, ServerRef: "s0", Deleting: deleting}}
}

func TestModelFlagsAPowerOffOfAClaimedServer(t *testing.T) {
	f := newFixture(t)
	for range 3 {
		f.poll(claimed(metalv1alpha1.PowerOn, false))
	}
	f.act("ForceOff")
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	if f.breaches(invUnasked) != 1 {
		t.Fatalf("ForceOff of a server claimed with power On: %d breaches, want 1", f.breaches(invUnasked))
	}
}

func TestModelAllowsTheReleaseOfADeletedClaim(t *testing.T) {
	f := newFixture(t)
	for range 3 {
		f.poll(claimed(metalv1alpha1.PowerOn, false))
	}
	f.poll(claimed(metalv1alpha1.PowerOn, true)) // the user deleted the claim
	f.act("GracefulShutdown")
	f.poll(claimed(metalv1alpha1.PowerOn, true))
	if n := f.breaches(invUnasked); n != 0 {
		t.Fatalf("power-off after the claim's deletion: %d breaches, want 0", n)
	}
	// And when the deletion shows only in the first poll after the action (the poll missed it).
	f = newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	f.act("GracefulShutdown")
	f.poll(claimed(metalv1alpha1.PowerOn, true))
	if n := f.breaches(invUnasked); n != 0 {
		t.Fatalf("power-off with the deletion seen just after: %d breaches, want 0", n)
	}
}

func TestModelFollowsTheClaimsPower(t *testing.T) {
	f := newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOff, false))
	f.act("GracefulShutdown")
	f.poll(claimed(metalv1alpha1.PowerOff, false))
	f.act("On")
	f.poll(claimed(metalv1alpha1.PowerOff, false))
	if n := f.breaches(invUnasked); n != 1 {
		t.Fatalf("claim power Off: shutdown allowed, power-on not: %d breaches, want 1", n)
	}
}

// A server re-created without its claim ref (its old object let go) is still the claim's box.
func TestModelKnowsTheClaimAcrossARecreatedServer(t *testing.T) {
	f := newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	servers, claims := claimed(metalv1alpha1.PowerOn, false)
	servers["s0"] = &srvView{UID: "s0-2", UUID: "u0", Finalizer: true, State: "Initial"}
	f.poll(servers, claims)
	f.act("ForceOff")
	f.poll(servers, claims)
	if n := f.breaches(invUnasked); n != 1 {
		t.Fatalf("ForceOff of the box of a live claim under a re-created Server: %d breaches, want 1", n)
	}
	if n := f.breaches(invHeld); n != 1 {
		t.Fatalf("the held server re-created under a live claim: %d breaches, want 1", n)
	}
}

func TestModelFlagsAHeldServerLettingGo(t *testing.T) {
	f := newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	_, claims := claimed(metalv1alpha1.PowerOn, false)
	f.poll(map[string]*srvView{}, claims)
	if n := f.breaches(invHeld); n != 1 {
		t.Fatalf("server gone under a live claim: %d breaches, want 1", n)
	}
	f = newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	_, claims = claimed(metalv1alpha1.PowerOn, true)
	f.poll(map[string]*srvView{}, claims)
	if n := f.breaches(invHeld); n != 0 {
		t.Fatalf("server gone after its claim's deletion: %d breaches, want 0", n)
	}
}

func TestModelCountsAnOperationOnce(t *testing.T) {
	f := newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	f.m.registerOp("s0", "s0-1", "u0", metalv1alpha1.OperationHardRestartServer, f.now)
	f.act("ForceRestart")
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	if n := len(f.m.sortedBreaches()); n != 0 {
		t.Fatalf("one restart for one hard-restart-server: %d breaches, want 0", n)
	}
	f.act("ForceRestart")
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	if n := f.breaches(invOnce); n != 1 {
		t.Fatalf("two restarts for one hard-restart-server: %d breaches, want 1", n)
	}
	// An operation the controller took away without doing it.
	f = newFixture(t)
	servers, claims := claimed(metalv1alpha1.PowerOn, false)
	servers["s0"].Op = metalv1alpha1.OperationPowerCycleServer
	f.poll(servers, claims)
	f.m.registerOp("s0", "s0-1", "u0", metalv1alpha1.OperationPowerCycleServer, f.now.Add(-time.Millisecond))
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	f.m.mu.Lock()
	f.m.finalOps(f.m.snaps[len(f.m.snaps)-1])
	f.m.mu.Unlock()
	if n := f.breaches(invOnce); n != 1 {
		t.Fatalf("power-cycle-server never carried out: %d breaches, want 1", n)
	}
}

func TestModelCountsABMCResetOnce(t *testing.T) {
	f := newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	f.m.registerBMCOp("bmc-0", "b0-1", 0, metalv1alpha1.OperationGracefulRestartBMC, f.now)
	reset := func() {
		f.seq++
		f.recs = append(f.recs, redfish.Record{Seq: f.seq, Time: f.now.Add(50 * time.Millisecond), Action: redfish.ActionManagerReset, ResetType: "GracefulRestart"})
	}
	reset()
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	if n := len(f.m.sortedBreaches()); n != 0 {
		t.Fatalf("one BMC reset for one graceful-restart-bmc: %d breaches, want 0", n)
	}
	reset()
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	if n := f.breaches(invOnce); n != 1 {
		t.Fatalf("two BMC resets for one graceful-restart-bmc: %d breaches, want 1", n)
	}
}

func TestModelFlagsTwoServersForOneSystem(t *testing.T) {
	f := newFixture(t)
	servers, claims := claimed(metalv1alpha1.PowerOn, false)
	servers["s0-copy"] = &srvView{UID: "x", UUID: "u0"}
	f.poll(servers, claims)
	if n := f.breaches(invUnique); n != 1 {
		t.Fatalf("two Servers for system u0: %d breaches, want 1", n)
	}
}

func TestParseMetricsCountsSlowPasses(t *testing.T) {
	text := `# HELP controller_runtime_reconcile_time_seconds Length of time per reconciliation per controller
controller_runtime_reconcile_time_seconds_bucket{controller="bmc",le="6"} 10
controller_runtime_reconcile_time_seconds_bucket{controller="bmc",le="` + passBound + `"} 11
controller_runtime_reconcile_time_seconds_bucket{controller="bmc",le="+Inf"} 13
controller_runtime_reconcile_time_seconds_count{controller="bmc"} 13
controller_runtime_reconcile_panics_total{controller="bmc"} 0
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.total["bmc"] != 13 || m.over["bmc"] != 2 {
		t.Fatalf("total %v over %v, want 13 and 2", m.total, m.over)
	}
}

// An action that reached a machine through another BMC's address, or a system whose UUID no
// Server has (a replaced board), breaches own-machine-only; the same action on the Server's own
// machine does not.
func TestModelFlagsAnActionOnAnotherMachine(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  redfish.Record
		want int
	}{
		{"its own machine", redfish.Record{UUID: "U0"}, 0},
		{"through a reused address", redfish.Record{UUID: "u0", Via: "http://127.0.0.1:18001"}, 1},
		{"on a board nobody accepted", redfish.Record{UUID: "5a5a5a5a-swapped"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for range 3 {
				f.poll(claimed(metalv1alpha1.PowerOff, false))
			}
			f.seq++
			r := tc.rec
			r.Seq, r.Time, r.Action, r.ResetType = f.seq, f.now.Add(50*time.Millisecond), redfish.ActionReset, "ForceOff"
			f.recs = append(f.recs, r)
			f.poll(claimed(metalv1alpha1.PowerOff, false))
			if n := f.breaches(invIdentity); n != tc.want {
				t.Fatalf("%d breaches of %s, want %d", n, invIdentity, tc.want)
			}
		})
	}
}

// A machine registered twice (a hand-made twin Server) is acted on through neither: an action
// from a pass that began after the twin appeared breaches; one the pass before decided does not.
func TestModelFlagsAnActionWhileRegisteredTwice(t *testing.T) {
	for _, tc := range []struct {
		name       string
		polls      int // 150 ms apart, after the twin was made
		unregister bool
		want       int
	}{
		// Long after: past the longest pass (passBoundValue) and a second.
		{"long after the twin appeared", int((passBoundValue + 3*time.Second) / (150 * time.Millisecond)), false, 1},
		{"right after it appeared", 3, false, 0},
		{"after it was deleted", int((passBoundValue + 3*time.Second) / (150 * time.Millisecond)), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.poll(claimed(metalv1alpha1.PowerOff, false))
			f.m.registerTwin("twin-0", "u0", f.now)
			twinned := func() (map[string]*srvView, map[string]*claimView) {
				servers, claims := claimed(metalv1alpha1.PowerOff, false)
				servers["twin-0"] = &srvView{UID: "t", UUID: "u0"}
				return servers, claims
			}
			for range tc.polls {
				f.poll(twinned())
			}
			if tc.unregister {
				f.m.unregisterTwin("twin-0", f.now)
				f.poll(claimed(metalv1alpha1.PowerOff, false))
			}
			f.act("ForceOff")
			f.poll(twinned())
			if n := f.breaches(invIdentity); n != tc.want {
				t.Fatalf("%d breaches of %s, want %d", n, invIdentity, tc.want)
			}
			if n := f.breaches(invUnique); n != 0 {
				t.Fatalf("the hand-made twin counted as the operator's second Server: %d breaches", n)
			}
		})
	}
}

// After the source acknowledged a move's pause, nothing acts on the box while it lasts; before
// the acknowledgement a pass may still be in flight, and after the pause ends the server is free.
func TestModelFlagsAnActionOnAPausedServer(t *testing.T) {
	paused := func(token, ack string) (map[string]*srvView, map[string]*claimView) {
		servers, claims := claimed(metalv1alpha1.PowerOff, false)
		servers["s0"].Paused, servers["s0"].PauseAck = token, ack
		return servers, claims
	}
	for _, tc := range []struct {
		name   string
		before [2]string // paused, ack in the polls before the action
		after  [2]string // in the first poll after it
		want   int
	}{
		{"acknowledged and still paused", [2]string{"move-1", "move-1"}, [2]string{"move-1", "move-1"}, 1},
		{"not acknowledged yet", [2]string{"move-1", ""}, [2]string{"move-1", "move-1"}, 0},
		{"resumed before the first poll after", [2]string{"move-1", "move-1"}, [2]string{"", ""}, 0},
		{"acknowledged an older pause", [2]string{"move-2", "move-1"}, [2]string{"move-2", "move-1"}, 0},
		// A poll that began before the action and ended after it may have listed the server
		// before the pause ended: it proves nothing, the next one does.
		{"resumed, and an overlapping poll still shows the pause", [2]string{"move-1", "move-1"}, [2]string{"", ""}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for range 3 {
				f.poll(paused(tc.before[0], tc.before[1]))
			}
			if strings.Contains(tc.name, "overlapping") {
				// A poll spanning the action, listing the server still paused.
				f.now = f.now.Add(150 * time.Millisecond)
				servers, claims := paused(tc.before[0], tc.before[1])
				s := &snapshot{Start: f.now, End: f.now.Add(100 * time.Millisecond), Servers: servers, Claims: claims,
					Maints: map[string]*maintView{}, BMCs: map[string]*bmcView{}}
				f.m.mu.Lock()
				f.m.snaps = append(f.m.snaps, s)
				f.m.mu.Unlock()
			}
			f.act("ForceOff")
			f.poll(paused(tc.after[0], tc.after[1]))
			if n := f.breaches(invPaused); n != tc.want {
				t.Fatalf("%d breaches of %s, want %d", n, invPaused, tc.want)
			}
		})
	}
}
