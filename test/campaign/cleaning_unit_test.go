package campaign

import (
	"slices"
	"strings"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	metalprobe "github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/erase"
)

// These tests need no control plane: the model is fed hand-made polls, a fake cleaning record
// and fake disks of machine u0 (server s0), so no-claim-without-clean is shown to fire on what
// breaks it and to stay quiet on the legitimate neighbour.

// cleanFixture is a fixture whose model watches cleanings: machine u0 has disks, which hold
// tenant data while tenant is set, and server s0 a cleaning record.
type cleanFixture struct {
	*fixture
	disks  []string
	tenant bool
	rec    cleaning.Record
	epoch  int // of the next poll: a restore starts a new one
}

func newCleanFixture(t *testing.T) *cleanFixture {
	f := &cleanFixture{fixture: newFixture(t), disks: []string{"nvme0n1", "sda"}}
	f.m.cleaning = &cleaningWatch{machines: []string{"u0"}, fleetPolicy: "AllDisks",
		tenantData: func(uuid string) ([]string, error) {
			if uuid == "u0" && f.tenant {
				return slices.Clone(f.disks), nil
			}
			return nil, nil
		},
		diskNames: func(string) ([]string, error) { return slices.Clone(f.disks), nil },
		record: func(string) (*cleaning.Record, error) {
			rec := f.rec
			rec.Cleanings = slices.Clone(rec.Cleanings)
			return &rec, nil
		},
		servers: map[string]*cleanTrack{}, claims: map[string]bool{}}
	return f
}

// poll files a snapshot 150 ms after the previous one, with u0's disks read before and after.
func (f *cleanFixture) poll(servers map[string]*srvView, claims map[string]*claimView) {
	f.now = f.now.Add(150 * time.Millisecond)
	s := &snapshot{Start: f.now, End: f.now.Add(10 * time.Millisecond), Epoch: f.epoch, Servers: servers, Claims: claims,
		Maints: map[string]*maintView{}, BMCs: map[string]*bmcView{}, Tenant: map[string][]string{}, TenantAfter: map[string][]string{}}
	if f.tenant {
		s.Tenant["u0"] = slices.Clone(f.disks)
		for _, v := range servers {
			if v.UUID == "u0" && availableClean(v) {
				s.TenantAfter["u0"] = slices.Clone(f.disks)
			}
		}
	}
	f.m.mu.Lock()
	f.m.add(s)
	f.m.mu.Unlock()
}

// report adds a cleaning entry of round to s0's record, as the registry stores an agent's report:
// every disk named sanitized, its proof verified or not.
func (f *cleanFixture) report(round string, verified bool, disks ...string) {
	e := cleaning.Entry{Round: round, Policy: "AllDisks", Reported: f.now.UTC().Truncate(time.Second), DMIUUID: "u0"}
	for _, d := range disks {
		p := &erase.Proof{Device: d, Method: erase.MethodDiscard, Verified: verified, Samples: 514}
		if !verified {
			p.Failure = "block 7 still holds data"
		}
		e.Disks = append(e.Disks, metalprobe.DiskCleaning{BlockDevice: metalprobe.BlockDevice{Name: d}, Role: metalprobe.RoleSanitize, Proof: p})
	}
	f.rec.Add(e)
}

func (f *cleanFixture) breachText() string {
	var out []string
	for _, b := range f.m.sortedBreaches() {
		out = append(out, b.Inv+": "+b.Msg)
	}
	return strings.Join(out, "\n")
}

// s0 in a state, with claim c0 (power On) when claimRef is set; live is whether c0 still exists
// and is not being deleted.
func s0(state, mark, claimRef string) *srvView {
	return &srvView{UID: "s0-1", UUID: "u0", BMC: "bmc-0", Finalizer: true, State: state, Mirror: state, Mark: mark, ClaimRef: claimRef,
		Power: string(metalv1alpha1.PowerStateOff)}
}

func with(v *srvView, claims map[string]*claimView) (map[string]*srvView, map[string]*claimView) {
	return map[string]*srvView{"s0": v}, claims
}

func liveClaim() map[string]*claimView {
	return map[string]*claimView{"default/c0": {UID: "c0-1", Power: metalv1alpha1.PowerOn, ServerRef: "s0", Phase: "Bound"}}
}

func goingClaim() map[string]*claimView {
	return map[string]*claimView{"default/c0": {UID: "c0-1", Power: metalv1alpha1.PowerOn, ServerRef: "s0", Phase: "Bound", Deleting: true}}
}

// claimAndRelease plays s0 claimed (its tenant's OS writing to the disks) and released into
// Cleaning.
func (f *cleanFixture) claimAndRelease() {
	f.poll(with(s0("Available", "", ""), nil))
	f.poll(with(s0("Available", "", "default/c0"), liveClaim()))
	f.poll(with(s0("Reserved", "AllDisks", "default/c0"), liveClaim()))
	f.tenant = true
	f.poll(with(s0("Reserved", "AllDisks", "default/c0"), liveClaim()))
	f.poll(with(s0("Reserved", "AllDisks", "default/c0"), goingClaim()))
	f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
	f.now = f.now.Add(2 * time.Second) // the round's boot: the entry's second is the release's or later
}

// A release cleaned once, with proof of every disk, then Available with clean disks: quiet. What
// breaks it, each alone: no entry, an entry that does not prove, one that leaves a disk out, two
// entries, the disks still holding tenant data.
func TestModelJudgesAReleasesCleaning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		clean  func(f *cleanFixture)
		breach string // a part of the breach, "" for none
	}{
		{"one verified entry, disks erased", func(f *cleanFixture) { f.report("r1", true, f.disks...); f.tenant = false }, ""},
		{"a failed round, then a verified one (a retry)", func(f *cleanFixture) {
			f.report("r1", false, f.disks...)
			f.report("r2", true, f.disks...)
			f.tenant = false
		}, ""},
		{"no entry", func(f *cleanFixture) { f.tenant = false }, "0 new verified cleanings"},
		{"an entry whose proof does not hold", func(f *cleanFixture) { f.report("r1", false, f.disks...); f.tenant = false }, "0 new verified cleanings"},
		{"an entry that leaves a disk out", func(f *cleanFixture) { f.report("r1", true, "nvme0n1"); f.tenant = false }, "disk sda of the machine not in it"},
		{"two verified entries, a maintenance between them", func(f *cleanFixture) {
			f.report("r1", true, f.disks...)
			f.poll(with(s0("Maintenance", "AllDisks", ""), nil))
			f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
			f.report("r2", true, f.disks...)
			f.tenant = false
		}, ""},
		{"three verified entries, one maintenance", func(f *cleanFixture) {
			f.report("r1", true, f.disks...)
			f.poll(with(s0("Maintenance", "AllDisks", ""), nil))
			f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
			f.report("r2", true, f.disks...)
			f.report("r3", true, f.disks...)
			f.tenant = false
		}, "3 new verified cleanings"},
		{"two verified entries", func(f *cleanFixture) {
			f.report("r1", true, f.disks...)
			f.report("r2", true, f.disks...)
			f.tenant = false
		}, "2 new verified cleanings"},
		{"a verified entry, the tenant's data still there", func(f *cleanFixture) { f.report("r1", true, f.disks...) }, "still hold tenant data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCleanFixture(t)
			f.claimAndRelease()
			f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
			tc.clean(f)
			f.poll(with(s0("Available", "", ""), nil))
			f.poll(with(s0("Available", "", ""), nil))
			got := f.breachText()
			if (tc.breach == "") != (got == "") || !strings.Contains(got, tc.breach) {
				t.Fatalf("breaches %q, want one containing %q", got, tc.breach)
			}
			if n := f.breaches(invClean); n > 1 {
				t.Fatalf("%d breaches, want at most 1: %s", n, got)
			}
		})
	}
}

// An Available server that still carries its mark (unparked from Cleaning through a rediscovery,
// say) is on its way to Cleaning, not a clean one: its disks and its record are judged only once
// it is Available without the mark.
func TestModelWaitsForTheMarkToGo(t *testing.T) {
	f := newCleanFixture(t)
	f.claimAndRelease()
	f.poll(with(s0("Parked", "AllDisks", ""), nil))
	f.poll(with(s0("Discovery", "AllDisks", ""), nil))
	f.poll(with(s0("Available", "AllDisks", ""), nil))
	if n := f.breaches(invClean); n != 0 {
		t.Fatalf("Available with its mark, disks not cleaned yet: %s", f.breachText())
	}
	f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
	f.report("r1", true, f.disks...)
	f.tenant = false
	f.poll(with(s0("Available", "", ""), nil))
	if n := f.breaches(invClean); n != 0 {
		t.Fatalf("cleaned once after the detour: %s", f.breachText())
	}
}

// A claim ref set on an Available server that a maintenance takes before the Server controller
// reserves it, and that its deleted claim then lets go, handed the tenant nothing: no cleaning is
// owed (campaign seed 77), though the disks are still read once the server is Available. A mark
// seen right after the claim ref went says the server was reserved, even if no poll showed it.
func TestModelOwesACleaningOnlyForAServerTheClaimGot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		play   func(f *cleanFixture)
		breach string
	}{
		{"taken by a maintenance before it was reserved", func(f *cleanFixture) {
			f.poll(with(s0("Available", "", "default/c0"), liveClaim()))
			f.poll(with(s0("Maintenance", "", "default/c0"), goingClaim()))
			f.poll(with(s0("Maintenance", "", ""), nil))
			f.poll(with(s0("Available", "", ""), nil))
		}, ""},
		{"the same, with a tenant's data on the disks", func(f *cleanFixture) {
			f.poll(with(s0("Available", "", "default/c0"), liveClaim()))
			f.tenant = true
			f.poll(with(s0("Maintenance", "", "default/c0"), goingClaim()))
			f.poll(with(s0("Maintenance", "", ""), nil))
			f.poll(with(s0("Available", "", ""), nil))
		}, "still hold tenant data"},
		{"reserved between two polls, released, never cleaned", func(f *cleanFixture) {
			f.poll(with(s0("Available", "", "default/c0"), liveClaim()))
			f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
			f.poll(with(s0("Available", "", ""), nil))
		}, "0 new verified cleanings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCleanFixture(t)
			tc.play(f)
			got := f.breachText()
			if (tc.breach == "") != (got == "") || !strings.Contains(got, tc.breach) {
				t.Fatalf("breaches %q, want one containing %q", got, tc.breach)
			}
		})
	}
}

// An earlier release's entry, reported in the same second as the next release, is that release's
// own: the next one still needs a new one.
func TestModelCountsEachEntryForOneReleaseOnly(t *testing.T) {
	f := newCleanFixture(t)
	f.claimAndRelease()
	f.report("r1", true, f.disks...)
	f.tenant = false
	f.poll(with(s0("Available", "", ""), nil))
	f.poll(with(s0("Available", "", "default/c0"), liveClaim()))
	f.poll(with(s0("Reserved", "AllDisks", "default/c0"), liveClaim()))
	f.poll(with(s0("Reserved", "AllDisks", "default/c0"), goingClaim()))
	f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
	f.poll(with(s0("Available", "", ""), nil))
	if n := f.breaches(invClean); n != 1 || !strings.Contains(f.breachText(), "0 new verified cleanings") {
		t.Fatalf("the second release counted the first one's entry: %s", f.breachText())
	}
}

// A server found with a mark it was never seen released with (restored mid-cleaning) is cleaned
// without a count of entries asked; its entry is spent all the same, and a release right after
// needs one of its own.
func TestModelSpendsAnAdoptedReleasesEntry(t *testing.T) {
	f := newCleanFixture(t)
	f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
	f.report("r1", true, f.disks...)
	f.poll(with(s0("Available", "", ""), nil))
	f.poll(with(s0("Reserved", "AllDisks", "default/c0"), liveClaim()))
	f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
	f.poll(with(s0("Available", "", ""), nil))
	if n := f.breaches(invClean); n != 1 || !strings.Contains(f.breachText(), "0 new verified cleanings") {
		t.Fatalf("the release after the adopted one counted its entry: %s", f.breachText())
	}
}

// A claim binds only a clean server: with the mark of a release not cleaned, a claim ref on it
// breaches whatever its state (Available, Cleaning, or any but the Reserved its reservation
// writes), and so does a claim that reports it Bound while it is in Cleaning. Bound again after
// a verified cleaning, even without a poll showing it Available in between, is quiet.
func TestModelFlagsAClaimOnAServerNotCleaned(t *testing.T) {
	for _, tc := range []struct {
		name   string
		verify bool
		bound  func() (map[string]*srvView, map[string]*claimView)
		breach string
	}{
		{"claim ref on Available with the mark", false, func() (map[string]*srvView, map[string]*claimView) {
			return with(s0("Available", "AllDisks", "default/c1"), nil)
		}, "Available with claim ref"},
		{"claim ref in Cleaning", true, func() (map[string]*srvView, map[string]*claimView) {
			return with(s0("Cleaning", "AllDisks", "default/c1"), nil)
		}, "in Cleaning with claim ref"},
		{"claim ref in Initial with the release's mark", true, func() (map[string]*srvView, map[string]*claimView) {
			return with(s0("Initial", "AllDisks", "default/c1"), nil)
		}, "while carrying the mark"},
		{"Reserved again before any cleaning was recorded", false, func() (map[string]*srvView, map[string]*claimView) {
			return with(s0("Reserved", "AllDisks", "default/c1"), nil)
		}, "0 new verified cleanings"},
		{"a claim reports Bound to it while it is in Cleaning", true, func() (map[string]*srvView, map[string]*claimView) {
			return with(s0("Cleaning", "AllDisks", ""), map[string]*claimView{"default/c1": {UID: "c1-1", ServerRef: "s0", Phase: "Bound"}})
		}, "names s0 as its server while it is in Cleaning"},
		{"Reserved again after a verified cleaning, Available not seen", true, func() (map[string]*srvView, map[string]*claimView) {
			return with(s0("Reserved", "AllDisks", "default/c1"), nil)
		}, ""},
		{"a claim by name waits for it while it is in Cleaning", false, func() (map[string]*srvView, map[string]*claimView) {
			return with(s0("Cleaning", "AllDisks", ""), map[string]*claimView{"default/c1": {UID: "c1-1", ServerRef: "s0", Phase: "Unbound"}})
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCleanFixture(t)
			f.claimAndRelease()
			if tc.verify {
				f.report("r1", true, f.disks...)
				f.tenant = false
			}
			f.poll(tc.bound())
			got := f.breachText()
			if (tc.breach == "") != (got == "") || !strings.Contains(got, tc.breach) {
				t.Fatalf("breaches %q, want one containing %q", got, tc.breach)
			}
		})
	}
}

// What the harness destroys is excused: a restore from a backup taken before the release (its
// object comes up Available, no mark, on the old tenant's disks), or the annotations stripped
// while it was not Reserved. A strip of a Reserved server is not: its release falls back to the
// fleet's policy and must still be cleaned. Nor is a Server deleted before its release was
// cleaned: the machine is owed the cleaning, and the new object must do it.
func TestModelExcusesOnlyWhatTheHarnessDestroyed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		play   func(f *cleanFixture)
		breach bool
	}{
		{"deleted in Cleaning, made anew, Available on the data", func(f *cleanFixture) {
			f.claimAndRelease()
			f.poll(map[string]*srvView{}, nil)
			v := s0("Initial", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
			v = s0("Available", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
		}, true},
		{"deleted in Cleaning, made anew, cleaning what was owed", func(f *cleanFixture) {
			f.claimAndRelease()
			f.poll(map[string]*srvView{}, nil)
			v := s0("Discovery", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
			v = s0("Cleaning", "AllDisks", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
			f.tenant = false
			f.rec = cleaning.Record{}
			f.report("r9", true, f.disks...)
			v = s0("Available", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
		}, false},
		{"deleted while claimed, made anew, Available on the data", func(f *cleanFixture) {
			f.tenant = true
			f.poll(with(s0("Reserved", "AllDisks", "default/c0"), liveClaim()))
			v := s0("Available", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
		}, true},
		{"restored from before the release, Available on the data", func(f *cleanFixture) {
			f.claimAndRelease()
			f.epoch++
			v := s0("Available", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
		}, false},
		{"deleted in Cleaning, made anew, claimed and released, the data left", func(f *cleanFixture) {
			f.claimAndRelease()
			f.poll(map[string]*srvView{}, nil)
			v := s0("Available", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
			v = s0("Reserved", "AllDisks", "default/c0")
			v.UID = "s0-2"
			f.poll(with(v, liveClaim()))
			f.now = f.now.Add(2 * time.Second)
			f.report("r2", true, f.disks...) // a proof the disks belie
			v = s0("Available", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
		}, true},
		{"stripped in Cleaning", func(f *cleanFixture) {
			f.claimAndRelease()
			f.m.disturbCleaning("s0", "Cleaning", "stripped")
			f.poll(with(s0("Initial", "", ""), nil))
			f.poll(with(s0("Available", "", ""), nil))
		}, false},
		{"stripped in Cleaning, Available on the data seen again", func(f *cleanFixture) {
			f.claimAndRelease()
			f.m.disturbCleaning("s0", "Cleaning", "stripped")
			f.poll(with(s0("Initial", "", ""), nil))
			for range 3 {
				f.poll(with(s0("Available", "", ""), nil))
			}
		}, false},
		{"stripped while Reserved, released and never cleaned", func(f *cleanFixture) {
			f.poll(with(s0("Reserved", "AllDisks", "default/c0"), liveClaim()))
			f.m.disturbCleaning("s0", "Reserved", "stripped")
			f.tenant = true
			f.poll(with(s0("Reserved", "", "default/c0"), liveClaim()))
			f.poll(with(s0("Reserved", "", "default/c0"), goingClaim()))
			f.poll(with(s0("Available", "", ""), nil))
		}, true},
		{"restored with the mark, Available without cleaning", func(f *cleanFixture) {
			f.claimAndRelease()
			v := s0("Cleaning", "AllDisks", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
			v = s0("Available", "", "")
			v.UID = "s0-2"
			f.poll(with(v, nil))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCleanFixture(t)
			tc.play(f)
			if got := f.breaches(invClean) > 0; got != tc.breach {
				t.Fatalf("breached %v, want %v: %s", got, tc.breach, f.breachText())
			}
		})
	}
}

// Disks read with tenant data before a poll's lists and clean after them were cleaned in
// between: the server the lists show Available is not flagged. Data before and after is.
func TestModelReadsTheDisksAroundTheLists(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after bool
		breach        bool
	}{
		{"erased while the lists were read", true, false, false},
		{"still there after the lists", true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCleanFixture(t)
			f.claimAndRelease()
			f.report("r1", true, f.disks...)
			reads := 0
			f.m.cleaning.tenantData = func(string) ([]string, error) {
				reads++
				if (reads == 1 && tc.before) || (reads > 1 && tc.after) {
					return []string{"sda"}, nil
				}
				return nil, nil
			}
			s := &snapshot{Start: f.now, End: f.now, Servers: map[string]*srvView{}, Claims: map[string]*claimView{},
				Maints: map[string]*maintView{}, BMCs: map[string]*bmcView{}}
			f.m.readTenantData(s, false)
			s.Servers["s0"] = s0("Available", "", "")
			f.m.readTenantData(s, true)
			f.m.mu.Lock()
			f.m.add(s)
			f.m.mu.Unlock()
			if got := f.breaches(invClean) > 0; got != tc.breach {
				t.Fatalf("breached %v, want %v: %s", got, tc.breach, f.breachText())
			}
		})
	}
}

// The cleaning round's one-time network boot, power-on and final power-off happen after the
// release, on a server no live claim holds: asked, as discovery's are. The boot and the power-on
// of a server a live claim holds with power Off are not.
func TestModelAcceptsTheCleaningBootAfterARelease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   bool
		breach int
	}{
		{"released, in Cleaning", false, 0},
		{"held by a live claim with power Off", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCleanFixture(t)
			poll := func() {
				if tc.held {
					claims := map[string]*claimView{"default/c0": {UID: "c0-1", Power: metalv1alpha1.PowerOff, ServerRef: "s0", Phase: "Bound"}}
					f.poll(with(s0("Reserved", "AllDisks", "default/c0"), claims))
					return
				}
				f.poll(with(s0("Cleaning", "AllDisks", ""), nil))
			}
			if !tc.held {
				f.claimAndRelease()
			}
			for range 40 { // past the decision window: every poll around the actions says the same
				poll()
			}
			f.seq++
			f.recs = append(f.recs, redfish.Record{Seq: f.seq, Time: f.now.Add(50 * time.Millisecond), Action: redfish.ActionBootOverride,
				Boot: &redfish.BootOverride{Target: "Pxe", Enabled: "Once"}})
			f.act("On")
			poll()
			f.act("ForceOff")
			poll()
			if n := f.breaches(invUnasked); n != tc.breach {
				t.Fatalf("%d breaches of %s, want %d: %s", n, invUnasked, tc.breach, f.breachText())
			}
		})
	}
}

// A server with the mark of a release not cleaned is not claimable: a claim that waits meanwhile
// has no free server (the convergence check's couldBind).
func TestServerWithAMarkIsNotClaimable(t *testing.T) {
	for _, mark := range []string{"", "None", "AllDisks"} {
		v := s0("Available", mark, "")
		s := &snapshot{Servers: map[string]*srvView{"s0": v}}
		got := couldBind(s, &claimView{})
		want := map[bool]string{true: "s0", false: ""}[mark != "AllDisks"]
		if got != want {
			t.Errorf("mark %q: couldBind = %q, want %q", mark, got, want)
		}
	}
}
