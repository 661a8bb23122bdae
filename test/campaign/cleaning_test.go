package campaign

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	metalprobe "github.com/metalhub/metalhub/internal/probe"
)

// no-claim-without-clean: a released server's disks are erased, with proof, before any claim can
// have it again. Judged from the polls, the Servers' cleaning records (ConfigMap cleaning-<server>)
// and the emulated machines' disk files, which a claimed server's OS fills with its tenant's data
// (netboot TenantData):
//
//   - bound only when clean: a server is never seen with a claim ref in Cleaning, nor in
//     Available with a mark of a release not cleaned (the claim controller writes the claim ref
//     only on an Available server without one; the Server controller's reserve() writes Reserved
//     and the new reservation's mark in one write), nor, while a release of it is pending (seen,
//     not yet resolved), with a claim ref and that release's mark in any state but Reserved; a
//     claim that reports it Bound (or whose serverRef the controller wrote) never names a server
//     in Cleaning;
//   - each release cleaned once, with proof: a release (its claim ref seen, then gone, on a server
//     its claim got) of a policy other than None is resolved at the first poll that shows the
//     server Available and unmarked, or bound again; by then the server's cleaning record holds
//     exactly one new entry that proves the policy on every disk of the machine (reported after
//     the release, by the machine's own DMI UUID, every disk verified with samples read back), or
//     one more for each maintenance or park that interrupted the cleaning (the round is booted
//     anew after it), never one more for a crash, a hand-over or a wiped status;
//   - nothing left: a server seen Available and unmarked never has a disk of its machine that holds
//     tenant data, read before the poll's lists and again after them (so neither a cleaning that
//     finished in between nor a claim's OS booting after it reads as a leak).
//
// A Server object deleted (by a step, its BMC's deletion) and made anew owes what the old one
// did: the cleaning is owed to the machine, so the new one must not be seen Available while the
// disks hold the tenant's data (its record starts afresh, so no count of entries is asked).
// What the harness itself destroys is excused, and said so in the journal: objects restored
// from a backup taken before a release, and a strip of the operator's annotations from a server
// that was not Reserved (its mark and saved state go with them). A server found with a mark that was
// never seen released (a restore of one being cleaned) must still be cleaned, with no count of
// record entries asked of it.

// cleaningWatch is what the model reads to judge no-claim-without-clean: the machines' disks
// and the Servers' cleaning records, and per Server what it has seen.
type cleaningWatch struct {
	// machines are the fleet's system UUIDs as registered (a board swap does not change them).
	machines []string
	// tenantData names the disks of a machine that hold a tenant's data; diskNames all of them.
	tenantData func(uuid string) ([]string, error)
	diskNames  func(uuid string) ([]string, error)
	// record reads a Server's cleaning record (an empty one when there is none).
	record func(server string) (*cleaning.Record, error)
	// fleetPolicy is --cleaning-policy: what a release whose mark is lost is cleaned by.
	fleetPolicy string

	servers map[string]*cleanTrack // by Server name
	claims  map[string]bool        // claim UID -> its serverRef was empty when first seen (the controller writes it)
	excused []string
	// judged counts the releases whose cleaning record was judged, cleared the Available
	// servers whose machine's disks were read clean after a release (erased: those whose disks
	// were seen holding the tenant's data before it).
	judged, cleared, erased int
	// unhanded counts claim refs that went before their claim got the server.
	unhanded int
	// carried counts releases passed on to a Server made anew after its machine's was deleted.
	carried int
}

// cleanTrack is what the model knows of one Server object (UID) towards its cleanings.
type cleanTrack struct {
	uid, uuid string
	claimed   bool
	claimedAt time.Time // Start of the last poll that showed it claimed
	// state is the state the last poll showed.
	state string
	// handed: the claim got the server, not only its claim ref: seen Reserved (or Released) or
	// with a mark under it. reserve() writes Reserved and the mark in one write, and powers the
	// box for the claim only with it; a claim that lets go of a server before (one a maintenance
	// took meanwhile, say) leaves nothing of its tenant's to clean.
	handed bool
	// dirty: its machine's disks were seen holding tenant data while it was claimed.
	dirty   bool
	pending *release
	// stripped says why the operator's bookkeeping of this object was taken away by the harness
	// while it was not Reserved: its next resolution is excused.
	stripped string
	// tainted says why tenant data on the machine's disks is excused while the server is
	// Available: its Server was made anew while the disks held it and no mark said so. rebound
	// is set once a claim was seen bound to it while the disks still held that data.
	tainted string
	rebound bool
	epoch   int // of the poll that first showed the object
	// consumed are the rounds of the record earlier resolutions counted (by name: a re-created
	// Server's record starts afresh at its first report).
	consumed map[string]bool
}

// release is one release of a server awaiting its cleaning.
type release struct {
	at, seen time.Time // the last poll that showed it claimed (before the release), the first that did not
	policy   string
	dirty    bool // the tenant's data was seen on the disks before the release
	// interrupted counts the maintenances and parks the server was seen entering while the
	// release was pending: the Server controller boots a new round after each (entering
	// Maintenance drops the round), so each may add one verified entry.
	interrupted int
	// adopted says why it was not seen: a mark found on a new object (a restore).
	adopted string
	// disturbed says why its cleaning cannot be demanded (the harness took the bookkeeping).
	disturbed string
}

// newCleaningWatch watches a fleet whose machines are machines, with the records read through c.
func newCleaningWatch(c client.Reader, machines []string, nb *netboot.Netboot) *cleaningWatch {
	return &cleaningWatch{machines: machines, tenantData: nb.TenantData, diskNames: nb.DiskNames, fleetPolicy: cleaningPolicy,
		record: func(server string) (*cleaning.Record, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cm := &corev1.ConfigMap{}
			err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: cleaning.ObjectName(server)}, cm)
			if apierrors.IsNotFound(err) {
				return &cleaning.Record{Server: server}, nil
			}
			if err != nil {
				return nil, err
			}
			return cleaning.Decode(cm)
		},
		servers: map[string]*cleanTrack{}, claims: map[string]bool{}}
}

// watchCleaning turns no-claim-without-clean on: the build cleans releases and netboot writes
// tenant data. Called before the first poll.
func (m *model) watchCleaning(nb *netboot.Netboot) {
	m.cleaning = newCleaningWatch(m.c, m.machines, nb)
}

// uncleaned reports a mark of a release not cleaned yet (claimable.uncleaned).
func uncleaned(v *srvView) bool {
	return v.Mark != "" && v.Mark != string(metalv1alpha1.CleaningPolicyNone)
}

// availableClean: the state a claim may bind, as far as cleaning goes.
func availableClean(v *srvView) bool {
	return v.State == string(metalv1alpha1.ServerStateAvailable) && !uncleaned(v)
}

// readTenantData fills s.Tenant (before the lists: every machine of the fleet and of the last
// poll's Servers) or s.TenantAfter (after them: the machines of Servers the lists show Available
// and unmarked whose disks held tenant data before).
func (m *model) readTenantData(s *snapshot, after bool) {
	w := m.cleaning
	if w == nil || w.tenantData == nil {
		return
	}
	read := func(uuid string, into map[string][]string) {
		if d, err := w.tenantData(uuid); err == nil && len(d) > 0 {
			into[uuid] = d
		}
	}
	if !after {
		s.Tenant = map[string][]string{}
		uuids := slices.Clone(w.machines)
		if last := m.last(); last != nil {
			for _, v := range last.Servers {
				uuids = append(uuids, v.UUID)
			}
		}
		slices.Sort(uuids)
		for _, u := range slices.Compact(uuids) {
			read(u, s.Tenant)
		}
		return
	}
	s.TenantAfter = map[string][]string{}
	for _, v := range s.Servers {
		if availableClean(v) && len(s.Tenant[v.UUID]) > 0 {
			read(v.UUID, s.TenantAfter)
		}
	}
}

// excuse notes what the harness took from the invariant's reach (printed with the journal).
func (m *model) excuse(format string, args ...any) {
	w := m.cleaning
	line := fmt.Sprintf("+%s ", m.since(time.Now())) + fmt.Sprintf(format, args...)
	w.excused = append(w.excused, line)
}

// checkCleaning judges one poll (not one taken during a restore) for no-claim-without-clean.
// Called with m.mu held.
func (m *model) checkCleaning(s *snapshot) {
	w := m.cleaning
	if w == nil {
		return
	}
	m.checks[invClean]++
	for _, name := range slices.Sorted(maps.Keys(s.Servers)) {
		v := s.Servers[name]
		if m.twins[name] != nil {
			continue // the user's second Server of a machine: never acted through
		}
		t := m.track(s, name, v)
		last := t.state
		t.state = v.State
		if t.pending != nil && interrupts(v.State) && !interrupts(last) {
			t.pending.interrupted++
		}
		if v.ClaimRef != "" {
			if t.tainted != "" && !t.rebound && len(s.Tenant[v.UUID]) > 0 {
				// The leak the excuse lets pass: say it, for whoever reads the log.
				t.rebound = true
				m.excuse("%s: bound to %s at +%s while disks %v still hold the earlier tenant's data (%s)", name, v.ClaimRef, m.since(s.Start), s.Tenant[v.UUID], t.tainted)
			}
			m.checkBound(s, name, v, t)
			t.claimed, t.claimedAt = true, s.Start
			t.handed = t.handed || v.State == string(metalv1alpha1.ServerStateReserved) ||
				v.State == string(metalv1alpha1.ServerStateReleased) || uncleaned(v)
			t.dirty = t.dirty || len(s.Tenant[v.UUID]) > 0
			continue
		}
		switch {
		case t.claimed && (t.handed || uncleaned(v)):
			// Released: the claim ref went (Reserved -> Cleaning, or a claim letting go of a
			// server in maintenance, parked or being deleted). A mark now says it was handed over
			// even if no poll showed it Reserved.
			policy := v.Mark
			if !cleaning.Valid(metalv1alpha1.CleaningPolicy(policy)) {
				policy = w.fleetPolicy // releasePolicy's fallback
			}
			if policy != string(metalv1alpha1.CleaningPolicyNone) {
				t.pending = &release{at: t.claimedAt, seen: s.Start, policy: policy, disturbed: t.stripped, dirty: t.dirty}
			}
			// Its cleaning erases whatever the disks hold, an earlier tenant's data too.
			t.claimed, t.handed, t.dirty, t.tainted = false, false, false, ""
		case t.claimed:
			// The claim let go before it got the server: nothing of its tenant's is on the disks
			// (which the check below reads all the same once the server is Available).
			w.unhanded++
			t.claimed, t.dirty = false, false
		case uncleaned(v) && t.pending == nil:
			t.pending = &release{at: s.Start, seen: s.Start, policy: v.Mark, disturbed: t.stripped,
				adopted: fmt.Sprintf("found %s with mark %s, never seen released", v.State, v.Mark)}
		}
		if t.tainted != "" && len(s.Tenant[v.UUID]) == 0 {
			t.tainted = "" // its disks are clean again
		}
		if !availableClean(v) {
			continue
		}
		r := t.pending
		if r != nil {
			m.resolve(s, name, v, t, "seen Available")
		}
		m.checks[invClean]++
		left := s.TenantAfter[v.UUID]
		switch {
		case len(left) == 0:
			if r != nil {
				w.cleared++
				if r.dirty {
					w.erased++
				}
			}
		case r != nil && r.disturbed != "":
			// Excused, and so are the sightings after it while the same data is on the disks:
			// the release that would have erased it is resolved now, its bookkeeping lost.
			t.tainted = fmt.Sprintf("its release's bookkeeping was lost (%s); disks %v hold that tenant's data", r.disturbed, left)
		case t.tainted != "":
		default:
			rel := "no release of it pending"
			if r != nil {
				rel = fmt.Sprintf("released at +%s", m.since(r.seen))
			}
			m.breach(invClean, name, "%s is Available at +%s (%s) while disks %v of its machine %s still hold tenant data",
				name, m.since(s.Start), rel, left, v.UUID)
		}
		t.stripped = ""
	}
	for _, key := range slices.Sorted(maps.Keys(s.Claims)) {
		c := s.Claims[key]
		byController, seen := w.claims[c.UID]
		if !seen {
			w.claims[c.UID] = c.ServerRef == ""
		}
		if c.Deleting || c.ServerRef == "" || !(byController || c.Phase == string(metalv1alpha1.PhaseBound)) {
			continue
		}
		v := s.Servers[c.ServerRef]
		if v == nil {
			continue
		}
		if v.State == string(metalv1alpha1.ServerStateCleaning) {
			m.breach(invClean, c.ServerRef, "claim %s (phase %q) names %s as its server while it is in Cleaning", key, c.Phase, c.ServerRef)
		}
		if t := w.servers[c.ServerRef]; t != nil && t.uid == v.UID && t.pending != nil {
			m.resolve(s, c.ServerRef, v, t, "named by claim "+key+" as bound")
		}
	}
}

// track returns the record of the Server object v is, starting a new one for a new object: a
// release pending on the old one is dropped, and a machine whose disks hold tenant data with no
// mark on its new Server to say so is tainted.
func (m *model) track(s *snapshot, name string, v *srvView) *cleanTrack {
	w := m.cleaning
	t := w.servers[name]
	if t != nil && t.uid == v.UID {
		return t
	}
	nt := &cleanTrack{uid: v.UID, uuid: v.UUID, consumed: map[string]bool{}, epoch: s.Epoch}
	if t == nil {
		w.servers[name] = nt
		return nt
	}
	nt.consumed = t.consumed
	if rec, err := w.record(name); err == nil {
		spend(nt, rec) // the old object's cleanings are none of the new one's releases'
	}
	if t.epoch != s.Epoch {
		// A restore brings back objects as they were when saved: a release after the backup
		// is not on them.
		how := "the cluster was restored from a backup"
		if t.pending != nil {
			m.excuse("%s: release seen at +%s dropped: %s, the new one seen at +%s in state %q", name, m.since(t.pending.seen), how, m.since(s.Start), v.State)
		}
		if d := s.Tenant[v.UUID]; len(d) > 0 && v.ClaimRef == "" && !uncleaned(v) {
			nt.tainted = fmt.Sprintf("%s; the new one, seen at +%s in state %q without a mark, has disks %v holding tenant data", how, m.since(s.Start), v.State, d)
			m.excuse("%s: %s", name, nt.tainted)
		}
		w.servers[name] = nt
		return nt
	}
	// Deleted (a step, or its BMC's deletion) and made anew: the cleaning its release owed is
	// owed to the machine (cleaning.Owed), so the new Server must not be Available with the
	// tenant's data on the disks. Its record starts afresh, so what is judged is the disks,
	// not a count of entries.
	how := fmt.Sprintf("its Server was deleted and made anew (seen at +%s in state %q)", m.since(s.Start), v.State)
	switch {
	case t.pending != nil:
		r := *t.pending
		r.adopted = "owed by the deleted Server: " + how
		nt.pending = &r
		w.carried++
	case t.claimed && t.handed:
		w.carried++
		policy := w.fleetPolicy
		r := &release{at: t.claimedAt, seen: s.Start, policy: policy, dirty: t.dirty, disturbed: t.stripped,
			adopted: "deleted while claimed: " + how}
		nt.pending = r
	}
	why := t.stripped
	if t.pending != nil && t.pending.disturbed != "" {
		why = t.pending.disturbed
	}
	if d := s.Tenant[v.UUID]; len(d) > 0 && why != "" && v.ClaimRef == "" && !uncleaned(v) {
		// The harness took the mark off before the deletion: nothing was left to owe it.
		nt.tainted = fmt.Sprintf("%s after %s; disks %v hold tenant data", how, why, d)
		m.excuse("%s: %s", name, nt.tainted)
	}
	w.servers[name] = nt
	return nt
}

// checkBound judges a server seen with a claim ref.
func (m *model) checkBound(s *snapshot, name string, v *srvView, t *cleanTrack) {
	m.checks[invClean]++
	switch {
	case v.State == string(metalv1alpha1.ServerStateCleaning):
		m.breach(invClean, name, "%s is in Cleaning with claim ref %s at +%s (mark %q, round %q)", name, v.ClaimRef, m.since(s.Start), v.Mark, v.Round)
	case v.State == string(metalv1alpha1.ServerStateAvailable) && uncleaned(v):
		m.breach(invClean, name, "%s is Available with claim ref %s at +%s while its mark %q says its last release was not cleaned", name, v.ClaimRef, m.since(s.Start), v.Mark)
	case t.pending != nil && uncleaned(v) && v.State != string(metalv1alpha1.ServerStateReserved):
		m.breach(invClean, name, "%s got claim ref %s (seen at +%s, %s) while carrying the mark %q of its release at +%s",
			name, v.ClaimRef, m.since(s.Start), v.State, v.Mark, m.since(t.pending.seen))
	}
	if t.pending != nil {
		m.resolve(s, name, v, t, "bound to "+v.ClaimRef)
	}
}

// resolve ends the pending release of t: its cleaning record must hold exactly one new entry
// that proves the policy on every disk of the machine, unless the harness disturbed it or it was
// never seen. Every entry the record holds by then is spent: none counts for a later release.
func (m *model) resolve(s *snapshot, name string, v *srvView, t *cleanTrack, how string) {
	w := m.cleaning
	r := t.pending
	t.pending = nil
	m.checks[invClean]++
	rec, err := w.record(name)
	if err != nil {
		m.excuse("%s: release seen at +%s unjudged: reading its cleaning record: %v", name, m.since(r.seen), err)
		return
	}
	defer spend(t, rec)
	switch {
	case r.disturbed != "":
		m.excuse("%s: release seen at +%s %s at +%s unjudged: %s", name, m.since(r.seen), how, m.since(s.Start), r.disturbed)
		return
	case r.adopted != "":
		return
	}
	var disks []string
	if w.diskNames != nil {
		disks, _ = w.diskNames(v.UUID)
	}
	since := r.at.Truncate(time.Second) // the registry records whole seconds
	var fresh, good []string
	for _, e := range rec.Cleanings {
		if t.consumed[e.Round] || e.Reported.Before(since) {
			continue
		}
		ok, why := provesCleaning(e, r.policy, v.UUID, disks)
		if ok {
			good = append(good, e.Round)
		}
		fresh = append(fresh, fmt.Sprintf("%s (%s, %s)", e.Round, e.Reported.Format("15:04:05"), why))
	}
	w.judged++
	if len(good) == 0 || len(good) > 1+r.interrupted {
		want := "exactly 1"
		if r.interrupted > 0 {
			want = fmt.Sprintf("1 to %d (%d maintenances or parks interrupted it)", 1+r.interrupted, r.interrupted)
		}
		m.breach(invClean, name, "%s released at +%s (policy %s), %s at +%s with %d new verified cleanings in %s, want %s (new entries: %v; server %s, mark %q, round %q, cleaned %q)",
			name, m.since(r.seen), r.policy, how, m.since(s.Start), len(good), cleaning.ObjectName(name), want, fresh, v.State, v.Mark, v.Round, v.Cleaned)
	}
}

// interrupts reports a state whose entry interrupts a cleaning: a maintenance boots its own
// configuration and the round is booted anew afterwards; a park leaves the box to someone else
// and its unpark starts over.
func interrupts(state string) bool {
	return state == string(metalv1alpha1.ServerStateMaintenance) || state == string(metalv1alpha1.ServerStateParked)
}

// spend marks every entry of rec as counted.
func spend(t *cleanTrack, rec *cleaning.Record) {
	for _, e := range rec.Cleanings {
		t.consumed[e.Round] = true
	}
}

// provesCleaning says whether a record entry proves policy on the machine with uuid, whose disk
// files are disks: the policy asked, reported by the machine itself, and every disk it found
// (all of the machine's) erased the way the policy asks and read back as erased.
func provesCleaning(e cleaning.Entry, policy, uuid string, disks []string) (bool, string) {
	if e.Policy != policy {
		return false, "policy " + e.Policy
	}
	if !strings.EqualFold(strings.TrimSpace(e.DMIUUID), uuid) {
		return false, "reported by machine " + e.DMIUUID
	}
	if len(e.Disks) == 0 {
		return false, "no disks"
	}
	erased := map[string]bool{}
	for _, d := range e.Disks {
		if d.Role == metalprobe.RoleSkip {
			continue
		}
		p := d.Proof
		switch {
		case policy == string(metalv1alpha1.CleaningPolicyAllDisks) && d.Role != metalprobe.RoleSanitize:
			return false, "disk " + d.Name + " only " + d.Role
		case p == nil:
			return false, "disk " + d.Name + " without proof"
		case !p.Verified || p.Samples == 0:
			return false, fmt.Sprintf("disk %s not verified (%d samples): %s", d.Name, p.Samples, p.Failure)
		}
		erased[d.Name] = true
	}
	for _, d := range disks {
		if !erased[d] {
			return false, "disk " + d + " of the machine not in it"
		}
	}
	return true, "verified"
}

// disturbCleaning notes that the harness stripped the operator's annotations from server name,
// which was in state before: unless it was Reserved (whose release falls back to the fleet's
// policy), its mark and saved state are gone, and its pending or next release is excused.
func (m *model) disturbCleaning(name, state, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.cleaning
	if w == nil || state == string(metalv1alpha1.ServerStateReserved) {
		return
	}
	t := w.servers[name]
	if t == nil {
		return
	}
	why = fmt.Sprintf("%s at +%s in state %q", why, m.since(time.Now()), state)
	t.stripped = why
	if t.pending != nil && t.pending.disturbed == "" {
		t.pending.disturbed = why
	}
}

// cleaningSummary says what no-claim-without-clean judged and excused in one schedule.
func (m *model) cleaningSummary() (string, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.cleaning
	if w == nil {
		return "not watched (the build cleans nothing)", nil
	}
	return fmt.Sprintf("%d releases' cleaning records judged, %d released servers seen Available with clean disks (%d of them held their tenant's data), %d claim refs gone before the server was reserved, %d releases passed to a Server made anew, %d excused",
		w.judged, w.cleared, w.erased, w.unhanded, w.carried, len(w.excused)), slices.Clone(w.excused)
}
