package campaign

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// These tests need no control plane: they feed the model hand-made polls and records, so each
// invariant is shown to fire on what breaks it and to stay quiet on the legitimate neighbour.

// pollBMCs files a snapshot with BMC objects (names to the BMCSecret each names) and no servers.
func (f *fixture) pollBMCs(secrets map[string]string) {
	f.now = f.now.Add(150 * time.Millisecond)
	s := &snapshot{Start: f.now, End: f.now.Add(10 * time.Millisecond), Servers: map[string]*srvView{}, Claims: map[string]*claimView{},
		Maints: map[string]*maintView{}, BMCs: map[string]*bmcView{}}
	for name, sec := range secrets {
		s.BMCs[name] = &bmcView{UID: name + "-1", Secret: sec}
	}
	f.m.mu.Lock()
	f.m.add(s)
	f.m.mu.Unlock()
}

func (f *fixture) record(r redfish.Record) {
	f.seq++
	r.Seq, r.Time = f.seq, f.now.Add(50*time.Millisecond)
	f.recs = append(f.recs, r)
}

// A shared BMCSecret: the BMC that joined it is never sent the pending password of a rotation
// asked of the other, and the one asked refuses while the Secret is shared; once it names its
// own Secret again the rotation is its own.
func TestModelJudgesAccountRequestsByTheirAskAndTheSecretsSharing(t *testing.T) {
	own := map[string]string{"bmc-0": "bmc-0", "bmc-1": "bmc-1"}
	shared := map[string]string{"bmc-0": "bmc-0", "bmc-1": "bmc-0"}
	for _, tc := range []struct {
		name    string
		secrets map[string]string
		askOn   int // -1: none
		sentTo  int
		breach  bool
	}{
		{"the partner of a shared Secret, nobody asked it", shared, 0, 1, true},
		{"the BMC asked, while its Secret is shared", shared, 0, 0, true},
		{"the BMC asked, its Secret its own", own, 0, 0, false},
		{"a BMC nobody asked, its Secret its own", own, -1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for range 3 {
				f.pollBMCs(tc.secrets)
			}
			if tc.askOn >= 0 {
				f.m.registerBMCOp(fmt.Sprintf("bmc-%d", tc.askOn), "uid", tc.askOn, metalv1alpha1.OperationRotateCredentials, f.now)
			}
			for range 40 { // longer than the decision window: every poll around the request agrees
				f.pollBMCs(tc.secrets)
			}
			f.record(redfish.Record{BMC: tc.sentTo, Action: redfish.ActionAccountPassword, Account: "admin"})
			f.pollBMCs(tc.secrets)
			if got := f.breaches(invAccounts) == 1; got != tc.breach {
				t.Fatalf("breached %v, want %v (%v)", got, tc.breach, f.logs)
			}
		})
	}
}

// One image is sent once: a second SimpleUpdate of it is a second flash, even after a lost
// answer.
func TestModelFlagsASecondFlashOfOneImage(t *testing.T) {
	f := newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	f.record(redfish.Record{Action: redfish.ActionSimpleUpdate, Image: "http://fw/a.bin"})
	f.record(redfish.Record{Action: redfish.ActionSimpleUpdate, Image: "http://fw/b.bin"})
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	if n := f.breaches(invOnce); n != 0 {
		t.Fatalf("two images flashed once each: %d breaches", n)
	}
	f.record(redfish.Record{Action: redfish.ActionSimpleUpdate, Image: "http://fw/a.bin"})
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	if n := f.breaches(invOnce); n != 1 {
		t.Fatalf("image flashed twice: %d breaches, want 1", n)
	}
}

// The firmware controller's restart of a claimed server, seen as its request on the Server, is
// asked for; a second restart for the same flash (asked again under a new token) is not.
func TestModelAllowsOneRestartPerFlash(t *testing.T) {
	f := newFixture(t)
	withRequest := func(ann map[string]string) (map[string]*srvView, map[string]*claimView) {
		srv, cl := claimed(metalv1alpha1.PowerOn, false)
		srv["s0"].Requests = requests(ann)
		return srv, cl
	}
	const tok = "uid-1.20250101T000000.abcd1234.1.0"
	for range 3 {
		f.poll(claimed(metalv1alpha1.PowerOn, false))
	}
	f.poll(withRequest(map[string]string{metalv1alpha1.OperationAnnotation: metalv1alpha1.OperationHardRestartServer,
		intent.RequesterAnnotation: tok}))
	f.act("ForceRestart")
	f.poll(withRequest(map[string]string{intent.ResultAnnotation: tok + " done"}))
	if n := f.breaches(invUnasked) + f.breaches(invOnce); n != 0 {
		t.Fatalf("the flash's restart: %d breaches (%v)", n, f.logs)
	}
	// Long after the duplicate window: only the flash ties the two together.
	for range 120 {
		f.poll(withRequest(map[string]string{intent.ResultAnnotation: tok + " done"}))
	}
	again := "uid-1.20250101T000100.abcd1234.1.1"
	f.poll(withRequest(map[string]string{intent.ResultAnnotation: tok + " done",
		intent.Annotation: metalv1alpha1.OperationHardRestartServer + "/issuing@1 by=" + again}))
	f.act("ForceRestart")
	f.poll(withRequest(map[string]string{intent.ResultAnnotation: tok + " done, " + again + " done"}))
	if n := f.breaches(invOnce); n != 1 {
		t.Fatalf("a second restart for one flash: %d breaches, want 1 (%v)", n, f.logs)
	}
}

// An upgrade waiting on a held server (parked, or in a user's maintenance) is settled only while
// it says it waits for maintenance; one of a server in service, or one that says anything else,
// is not.
func TestUpgradeOfHeldServerIsSettledOnlyWhileItWaits(t *testing.T) {
	upgrade := func(server, reason string) *systemv1alpha1.BIOSVersion {
		v := &systemv1alpha1.BIOSVersion{Spec: systemv1alpha1.BIOSVersionSpec{ServerRef: &corev1.LocalObjectReference{Name: server}}}
		if reason != "" {
			v.Status.Conditions = []metav1.Condition{{Type: systemv1alpha1.ConditionUpgraded, Status: metav1.ConditionFalse, Reason: reason}}
		}
		return v
	}
	parked := map[string]bool{"p": true, "q": false}
	for _, tc := range []struct {
		name string
		v    *systemv1alpha1.BIOSVersion
		want bool
	}{
		{"parked, awaiting maintenance", upgrade("p", systemv1alpha1.ReasonAwaitingMaintenance), true},
		{"parked, flashing", upgrade("p", systemv1alpha1.ReasonFlashing), false},
		{"parked, no report yet", upgrade("p", ""), false},
		{"in service, awaiting maintenance", upgrade("q", systemv1alpha1.ReasonAwaitingMaintenance), false},
		{"unknown server", upgrade("r", systemv1alpha1.ReasonAwaitingMaintenance), false},
		{"no server named", &systemv1alpha1.BIOSVersion{}, false},
	} {
		if got := waitsForHeldServer(tc.v, parked); got != tc.want {
			t.Errorf("%s: waitsForHeldServer = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Seeds 18 and 50 of the 200-seed run: an upgrade queued behind a user's maintenance that the
// campaign left in place, or of a server whose deletion a claim holds, waits rightly; one
// behind its own maintenance does not count as held.
func TestHeldServers(t *testing.T) {
	ref := func(name string) *metalv1alpha1.ObjectReference {
		return &metalv1alpha1.ObjectReference{Namespace: "default", Name: name}
	}
	servers := []metalv1alpha1.Server{
		{ObjectMeta: metav1.ObjectMeta{Name: "parked", Annotations: map[string]string{metalv1alpha1.ParkedAnnotation: "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "users"}, Spec: metalv1alpha1.ServerSpec{ServerMaintenanceRef: ref("maint-3")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "upgrading"}, Spec: metalv1alpha1.ServerSpec{ServerMaintenanceRef: ref("biosversion-bios-1")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "free"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "deleting", DeletionTimestamp: &metav1.Time{}, Finalizers: []string{"x"}}},
	}
	ms := []maintenancev1alpha1.ServerMaintenance{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "biosversion-bios-1",
		OwnerReferences: []metav1.OwnerReference{{Kind: "BIOSVersion", Name: "bios-1", UID: "u", Controller: new(true)}}}}}
	got := heldServers(servers, ms)
	want := map[string]bool{"parked": true, "users": true, "upgrading": false, "free": false, "deleting": true}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s held = %v, want %v", name, got[name], w)
		}
	}
}

// A restart is the operation still asked, not an earlier one a restore took away: that one may
// never be carried out, and the later one must not read as forgotten (campaign seed 144).
func TestModelGivesARestartToTheOperationStillAsked(t *testing.T) {
	f := newFixture(t)
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	f.m.registerOp("s0", "s0-1", "u0", metalv1alpha1.OperationPowerCycleServer, f.now)
	f.m.disturbOps("", "restored")
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	servers, claims := claimed(metalv1alpha1.PowerOn, false)
	servers["s0"].Op = metalv1alpha1.OperationHardRestartServer
	f.poll(servers, claims)
	f.m.registerOp("s0", "s0-1", "u0", metalv1alpha1.OperationHardRestartServer, f.now.Add(-time.Millisecond))
	f.act("ForceRestart")
	f.poll(claimed(metalv1alpha1.PowerOn, false))
	f.m.mu.Lock()
	f.m.finalOps(f.m.snaps[len(f.m.snaps)-1])
	f.m.mu.Unlock()
	if n := len(f.m.sortedBreaches()); n != 0 {
		t.Fatalf("the hard-restart-server carried out after a restored power-cycle-server: %d breaches (%v), want 0", n, f.m.sortedBreaches())
	}
}

// A one-at-a-time set's image reaches each box once, the second box only after the first's
// update could have ended, unless the first box left the set.
func TestModelHoldsASetToItsWave(t *testing.T) {
	img := setImage(1, "bios-7")
	two := func(firstLabelled bool) (map[string]*srvView, map[string]*claimView) {
		l := map[string]string{setLabel: "bios-7"}
		first := map[string]string{}
		if firstLabelled {
			first = l
		}
		return map[string]*srvView{"s0": {UID: "s0-1", UUID: "u0", BMC: "bmc-0", State: "Available", Labels: first},
			"s1": {UID: "s1-1", UUID: "u1", BMC: "bmc-1", State: "Available", Labels: l}}, map[string]*claimView{}
	}
	for _, c := range []struct {
		name          string
		gap           time.Duration
		firstSelected bool
		wave, once    int
	}{
		{"the next box after the first's update", 3 * time.Second, true, 0, 0},
		{"the next box while the first flashes", 300 * time.Millisecond, true, 1, 0},
		{"the next box once the first left the set", 300 * time.Millisecond, false, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.poll(two(true))
			f.record(redfish.Record{Action: redfish.ActionSimpleUpdate, Image: img, BMC: 0})
			f.now = f.now.Add(c.gap)
			f.record(redfish.Record{Action: redfish.ActionSimpleUpdate, Image: img, BMC: 1})
			f.poll(two(c.firstSelected))
			if got := f.breaches(invWave); got != c.wave {
				t.Errorf("%s breaches: %d, want %d", invWave, got, c.wave)
			}
			if got := f.breaches(invOnce); got != c.once {
				t.Errorf("%s breaches: %d, want %d", invOnce, got, c.once)
			}
		})
	}
	f := newFixture(t)
	f.poll(two(true))
	f.record(redfish.Record{Action: redfish.ActionSimpleUpdate, Image: img, BMC: 0})
	f.now = f.now.Add(5 * time.Second)
	f.record(redfish.Record{Action: redfish.ActionSimpleUpdate, Image: img, BMC: 0})
	f.poll(two(true))
	if got := f.breaches(invOnce); got != 1 {
		t.Errorf("a set's image sent twice to one box: %d breaches, want 1", got)
	}
}

// The hand-over judge reads a BMC's request journal: the new owner's first request must not
// begin before the cut-off owner's last one ended; requests before the cut, after the reconnect
// and from no replica do not count.
func TestHandoverJudgesTheBMCsJournal(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	span := func(ua string, from, to float64) redfish.RequestSpan {
		return redfish.RequestSpan{Start: at(from), End: at(to), Method: "GET", Path: "/redfish/v1/Systems", UserAgent: ua}
	}
	const old, next = "metalhub (vm_old)", "metalhub (vm_new)"
	cut, end := at(10), at(20)
	cases := []struct {
		name   string
		spans  []redfish.RequestSpan
		judged bool // both sides found
		breach bool
	}{
		{"clean hand-over", []redfish.RequestSpan{span(old, 9, 11.9), span(next, 13.5, 13.6)}, true, false},
		{"new owner began while the old request ran", []redfish.RequestSpan{span(old, 9.5, 13), span(next, 12.9, 13.1)}, true, true},
		{"old owner sent again after the take-over", []redfish.RequestSpan{span(old, 9, 11), span(next, 12, 12.1), span(old, 14, 14.2)}, true, true},
		{"before the cut both are allowed (another holder then)", []redfish.RequestSpan{span(next, 1, 2), span(old, 9, 11)}, false, false},
		{"after the reconnect the old owner may hold it again", []redfish.RequestSpan{span(old, 9, 11), span(next, 13, 13.1), span(old, 21, 21.5)}, true, false},
		{"another sender is not a replica", []redfish.RequestSpan{span(old, 9, 12), span("curl/8", 11, 11.1)}, false, false},
		{"no take-over before the reconnect", []redfish.RequestSpan{span(old, 9, 12)}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lastOld, firstNew := handover(c.spans, "vm_old", cut, end)
			if judged := lastOld != nil && firstNew != nil; judged != c.judged {
				t.Fatalf("judged %v (last old %+v, first new %+v), want %v", judged, lastOld, firstNew, c.judged)
			}
			if c.judged && firstNew.Start.Before(lastOld.End) != c.breach {
				t.Errorf("breach %v, want %v (last old ends %s, first new begins %s)", !c.breach, c.breach, lastOld.End.Sub(t0), firstNew.Start.Sub(t0))
			}
		})
	}
}
