package campaign

import (
	"math/rand/v2"
	"slices"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// kind is what a step does.
type kind string

// User actions.
const (
	kClaimByName     kind = "claim-by-name"
	kClaimBySelector kind = "claim-by-selector"
	kClaimDelete     kind = "claim-delete"
	kClaimPower      kind = "claim-power"
	kCordon          kind = "cordon"
	kTaint           kind = "taint"
	kOperation       kind = "operation"
	kBMCOperation    kind = "bmc-operation"
	kMaintCreate     kind = "maintenance-create"
	kMaintApprove    kind = "maintenance-approve"
	kMaintDelete     kind = "maintenance-delete"
	kDeleteServer    kind = "delete-server"
	kDeleteBMC       kind = "delete-bmc"
	kDeleteSecret    kind = "delete-bmcsecret"
	kDeleteEndpoint  kind = "delete-endpoint"
	kRecreate        kind = "recreate-bmc"
	kFixSecret       kind = "fix-bmcsecret"
	kProbe           kind = "probe-healthy"
	// kFirmware creates a BIOSVersion for the target's server (Enforced maintenance), with the
	// step's firmware fault (Fault, if any) set on its BMC first; kFirmwareDelete deletes it. With
	// Set, a BIOSVersionSet over the target's server and the next one (one at a time) instead.
	kFirmware       kind = "bios-upgrade"
	kFirmwareDelete kind = "delete-biosversion"
	// kUnshare gives the partner of a kShare its own BMCSecret back.
	kUnshare kind = "unshare-bmcsecret"
)

// Control-plane faults.
const (
	kWipeStatus kind = "wipe-status"
	kStrip      kind = "strip-annotations"
	kKill       kind = "kill-manager"
	kHandover   kind = "leader-handover"
	kBackup     kind = "backup"
	kRestore    kind = "restore"
	// kPartition (sharded seeds only) cuts the replica holding the target BMC's shard off from
	// the API server while that BMC answers slowly, with a request of the replica in flight if
	// one comes within a moment; kReconnect ends the partition.
	kPartition kind = "partition-shard-owner"
	kReconnect kind = "reconnect-replica"
)

// BMC faults.
const (
	kFault       kind = "bmc-fault"
	kHeal        kind = "bmc-heal"
	kCredentials kind = "bmc-credentials"
	// kShare points a second BMC (the target plus Slot) at the target's BMCSecret, its password
	// made the same on the emulator: one Secret for two BMCs, as fleets often have.
	kShare kind = "share-bmcsecret"
)

// isFault reports whether a step injects a fault (the rest are user actions and their follow-ups).
func (k kind) isFault() bool {
	switch k {
	case kWipeStatus, kStrip, kKill, kHandover, kRestore, kFault, kCredentials, kShare, kPartition:
		return true
	}
	return false
}

// BMC fault types (step.Fault).
const (
	fStatus500       = "http-500"
	fStatus503       = "http-503"
	fHang            = "hang"
	fDrop            = "connection-reset"
	fLatency         = "latency"
	fSlowPower       = "slow-power"
	fStuckPower      = "stuck-power"
	fFailedPower     = "failed-power-transition"
	fIgnoreGraceful  = "ignore-graceful-shutdown"
	fUnauthorized    = "unauthorized"
	fUnreachable     = "unreachable"
	fBrokenInventory = "broken-inventory"
	// fAddressReuse hands the BMC's address to the next BMC of the fleet: requests sent to it
	// reach another machine (a DHCP lease or IPAM swap).
	fAddressReuse = "address-reuse"
	// fBoardSwap gives the BMC's system another UUID and serial, as a replaced mainboard does.
	fBoardSwap = "board-swap"
	// fAfterEffect makes the BMC carry out every action and then answer 500 (a BMC or a proxy
	// failing after the effect).
	fAfterEffect = "http-500-after-effect"
	// fTwin registers the BMC's machine a second time in another form (a BMC object through the
	// other of Endpoint and inline access, or an inline Server by host name), as a second team or
	// an old manifest does; its heal deletes the second registration.
	fTwin = "registered-twice"
	// fMove runs "metalhub move" of the BMC's rack while the source's manager keeps running; its
	// heal gives the move up (the target's copies deleted, the source unpaused).
	fMove = "move-source-running"
	// fFlashLost serves update tasks without payload and answers every action 500 after
	// carrying it out: the flash's answer is lost and no task says which image it carries.
	fFlashLost = "flash-answer-lost"
	// fFlashInert completes every flash and installs nothing.
	fFlashInert = "flash-changes-nothing"
)

// Forms of a second registration (step.Object of an fTwin fault).
const (
	twinBMC    = "bmc-other-form"
	twinServer = "inline-server-by-hostname"
)

// Object kinds a status wipe or an annotation strip hits.
const (
	oServer      = "Server"
	oClaim       = "ServerClaim"
	oMaintenance = "ServerMaintenance"
	oBMC         = "BMC"
	oBootConfig  = "ServerBootConfiguration"
)

// Fleet and slot sizes: small, so that steps keep hitting the same objects.
const (
	claimSlots       = 6
	maintenanceSlots = 4
)

// step is one entry of a schedule. Targets are indices drawn from the seed; where Claimed is set
// the target resolves, when the step runs, to a server that is claimed right then (if any), so
// that faults land where they matter.
type step struct {
	ID         int // generation order; follow-ups name their origin by it
	At         time.Duration
	Kind       kind
	Index      int
	Claimed    bool
	Slot       int
	On         bool
	Power      metalv1alpha1.Power
	Op         string
	Policy     metalv1alpha1.ServerMaintenancePolicy
	Template   bool
	Effect     metalv1alpha1.TaintEffect
	Tolerate   bool
	Rack       string
	Fault      string
	Value      time.Duration
	Object     string
	WithSecret bool
	// Touch follows an operation with a second edit of the server a few milliseconds later
	// (another user, a label): the controller's own write after the action then conflicts.
	Touch bool
	// Set makes a firmware step a BIOSVersionSet (kFirmware, kFirmwareDelete).
	Set    bool
	Dur    time.Duration
	Origin int // for follow-ups (heal, unpark, approve, ...): the ID of the step they follow; -1 otherwise
}

// schedule is everything a seed decides: the fleet's shape and the timed steps.
type schedule struct {
	Seed       uint64
	BMCs       int
	PowerDelay time.Duration
	// Endpoint[i] registers BMC i through an Endpoint object instead of inline access.
	Endpoint []bool
	// Quirk, when set, is a collection BMC QuirkBMC answers with an error for the whole run, as
	// some real BMCs do (e.g. Storage 500): a permanent property, not a fault that heals.
	Quirk    string
	QuirkBMC int
	// SlowBMC (-1: none) answers every request SlowLatency late for the whole run, as a big real
	// BMC does (an inventory of many DIMMs and drives takes seconds to walk).
	SlowBMC     int
	SlowLatency time.Duration
	// Shards runs the two replicas with --shards 2 instead of leader election: both act, each on
	// its shards' BMCs, and a shard moves when its holder dies, leaves or is cut off.
	Shards bool
	Chaos  time.Duration
	Steps  []step
}

var serverOps = []struct {
	op     string
	weight int
}{
	{metalv1alpha1.OperationPark, 4},
	{metalv1alpha1.OperationUnpark, 1},
	{metalv1alpha1.OperationGracefulRestartServer, 2},
	{metalv1alpha1.OperationHardRestartServer, 3},
	{metalv1alpha1.OperationPowerCycleServer, 2},
	{metalv1alpha1.OperationForceOffServer, 2},
	{metalv1alpha1.OperationForceOnServer, 2},
	{metalv1alpha1.OperationRetry, 1},
	{metalv1alpha1.OperationIgnore, 1},
	{metalv1alpha1.OperationRotateCredentials, 1},
	{metalv1alpha1.OperationGracefulRestartBMC, 1},
}

var stepWeights = []struct {
	k      kind
	weight int
}{
	{kClaimByName, 6}, {kClaimBySelector, 4}, {kClaimDelete, 4}, {kClaimPower, 3},
	{kCordon, 2}, {kTaint, 3}, {kOperation, 7}, {kBMCOperation, 1},
	{kMaintCreate, 4}, {kMaintApprove, 2}, {kMaintDelete, 2},
	{kDeleteServer, 2}, {kDeleteBMC, 2}, {kDeleteSecret, 1}, {kDeleteEndpoint, 1}, {kRecreate, 1},
	{kWipeStatus, 5}, {kStrip, 3}, {kKill, 2}, {kHandover, 1}, {kBackup, 1}, {kRestore, 1},
	{kFault, 9}, {kCredentials, 1}, {kProbe, 2},
}

var faultWeights = []struct {
	f      string
	weight int
}{
	{fStatus500, 2}, {fStatus503, 2}, {fHang, 2}, {fDrop, 2}, {fLatency, 2}, {fSlowPower, 2},
	{fStuckPower, 1}, {fIgnoreGraceful, 1}, {fUnauthorized, 1}, {fUnreachable, 2}, {fBrokenInventory, 1},
}

var objectWeights = []struct {
	o      string
	weight int
}{{oServer, 4}, {oClaim, 2}, {oMaintenance, 1}, {oBMC, 1}, {oBootConfig, 1}}

// quirks are collections real BMCs are known to break permanently.
var quirks = []string{"Storage", "SimpleStorage", "Memory", "EthernetInterfaces"}

func pick[T any](r *rand.Rand, items []T, weight func(T) int) T {
	total := 0
	for _, it := range items {
		total += weight(it)
	}
	n := r.IntN(total)
	for _, it := range items {
		if n -= weight(it); n < 0 {
			return it
		}
	}
	return items[len(items)-1]
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// newSchedule draws a schedule from seed: the same seed gives the same schedule on any machine
// (PCG from math/rand/v2, one stream, every draw in a fixed order).
func newSchedule(seed uint64) *schedule {
	r := rand.New(rand.NewPCG(seed, 0x6d6574616c687562))
	s := &schedule{
		Seed:       seed,
		BMCs:       6 + r.IntN(3),
		PowerDelay: between(r, 200*time.Millisecond, 300*time.Millisecond),
		Chaos:      between(r, 18*time.Second, 25*time.Second),
	}
	s.Endpoint = make([]bool, s.BMCs)
	for i := range s.Endpoint {
		s.Endpoint[i] = r.IntN(2) == 0
	}
	if r.IntN(10) < 3 {
		s.Quirk, s.QuirkBMC = quirks[r.IntN(len(quirks))], r.IntN(s.BMCs)
	}
	// A stream of its own, so that adding fleet properties leaves every seed's steps as they were.
	q := rand.New(rand.NewPCG(seed, 0x736c6f77626d63))
	s.SlowBMC = -1
	if q.IntN(10) < 2 {
		s.SlowBMC, s.SlowLatency = q.IntN(s.BMCs), between(q, 150*time.Millisecond, 300*time.Millisecond)
	}
	n := 24 + r.IntN(17)
	times := make([]time.Duration, n)
	for i := range times {
		times[i] = time.Duration(r.Int64N(int64(s.Chaos)))
	}
	slices.Sort(times)
	id := 0
	add := func(st step) int {
		st.ID = id
		id++
		if st.At < s.Chaos {
			s.Steps = append(s.Steps, st)
		}
		return st.ID
	}
	// The opening: a few claims, so that the faults find claimed servers to protect.
	for k := range 2 + r.IntN(3) {
		st := step{At: between(r, 0, 1500*time.Millisecond), Kind: kClaimByName, Index: r.IntN(s.BMCs), Slot: k,
			Power: metalv1alpha1.PowerOn, Origin: -1}
		if r.IntN(3) == 0 {
			st.Kind, st.Rack = kClaimBySelector, []string{"", "r0", "r1"}[r.IntN(3)]
		}
		add(st)
	}
	backedUp := false
	for _, at := range times {
		k := pick(r, stepWeights, func(w struct {
			k      kind
			weight int
		}) int {
			// Claims first: a fleet with nothing claimed has nothing to protect.
			if at < s.Chaos/4 && (w.k == kClaimByName || w.k == kClaimBySelector) {
				return w.weight * 4
			}
			return w.weight
		}).k
		if k == kRestore && !backedUp {
			k = kBackup
		}
		st := step{At: at, Kind: k, Index: r.IntN(s.BMCs), Slot: r.IntN(claimSlots), Origin: -1}
		switch k {
		case kClaimByName, kClaimBySelector:
			st.Power = metalv1alpha1.PowerOn
			if r.IntN(5) == 0 {
				st.Power = metalv1alpha1.PowerOff
			}
			st.Tolerate = r.IntN(4) == 0
			if k == kClaimBySelector {
				st.Rack = []string{"", "r0", "r1"}[r.IntN(3)]
			}
		case kCordon:
			st.Claimed, st.On = r.IntN(3) == 0, r.IntN(3) != 0
		case kTaint:
			st.Claimed = r.IntN(2) == 0
			st.Effect = []metalv1alpha1.TaintEffect{metalv1alpha1.TaintEffectNoBind, metalv1alpha1.TaintEffectEvict, ""}[r.IntN(3)]
		case kOperation:
			st.Claimed = r.IntN(5) < 3
			st.Op = pick(r, serverOps, func(o struct {
				op     string
				weight int
			}) int {
				return o.weight
			}).op
			st.Dur = between(r, 2*time.Second, 8*time.Second)
			st.Touch = r.IntN(10) < 4
		case kBMCOperation:
			st.Op = []string{metalv1alpha1.OperationRotateCredentials, metalv1alpha1.OperationGracefulRestartBMC}[r.IntN(2)]
		case kMaintCreate, kMaintApprove, kMaintDelete:
			st.Slot = r.IntN(maintenanceSlots)
			st.Claimed = r.IntN(5) < 3
			st.Policy = metalv1alpha1.ServerMaintenancePolicyOwnerApproval
			if r.IntN(2) == 0 {
				st.Policy = metalv1alpha1.ServerMaintenancePolicyEnforced
			}
			st.Power = []metalv1alpha1.Power{metalv1alpha1.PowerOff, metalv1alpha1.PowerOn, ""}[r.IntN(3)]
			st.Template = r.IntN(10) < 3
		case kDeleteServer:
			st.Claimed = r.IntN(2) == 0
		case kDeleteBMC, kDeleteSecret:
			st.Claimed = r.IntN(2) == 0
			st.WithSecret = k == kDeleteBMC && r.IntN(2) == 0
		case kWipeStatus, kStrip:
			st.Object = pick(r, objectWeights, func(o struct {
				o      string
				weight int
			}) int {
				return o.weight
			}).o
			st.Claimed = r.IntN(2) == 0
		case kRestore:
			// Restores an earlier backup: metadata and spec, no status.
		case kBackup:
			backedUp = true
		case kFault:
			st.Claimed = r.IntN(5) < 2
			st.Fault = pick(r, faultWeights, func(f struct {
				f      string
				weight int
			}) int {
				return f.weight
			}).f
			st.Dur = between(r, time.Second, 6*time.Second)
			switch st.Fault {
			case fUnreachable:
				st.Dur = between(r, 6*time.Second, 15*time.Second)
			case fLatency:
				st.Value = between(r, 200*time.Millisecond, 1800*time.Millisecond)
			case fSlowPower:
				st.Value = between(r, 2*time.Second, 5*time.Second)
			case fStuckPower:
				st.Value = 20 * time.Second
			}
		case kCredentials:
			st.Claimed = r.IntN(5) < 2
			st.Dur = between(r, time.Second, 6*time.Second)
		}
		origin := add(st)
		// Follow-ups a user (or the fault's end) brings, drawn now so the schedule stays fixed.
		follow := func(k kind, after time.Duration, p int, mutate func(*step)) {
			if r.IntN(10) < p {
				f := st
				f.Kind, f.At, f.Origin = k, st.At+after, origin
				if mutate != nil {
					mutate(&f)
				}
				add(f)
			}
		}
		switch {
		case k == kFault:
			follow(kHeal, st.Dur, 10, nil)
		case k == kCredentials:
			follow(kFixSecret, st.Dur, 7, nil)
		case k == kOperation && st.Op == metalv1alpha1.OperationPark:
			follow(kOperation, st.Dur, 8, func(f *step) { f.Op = metalv1alpha1.OperationUnpark })
		case k == kOperation && st.Op == metalv1alpha1.OperationIgnore:
			follow(kOperation, st.Dur, 10, func(f *step) { f.Op = "" }) // removes the ignore annotation
		case k == kMaintCreate:
			if st.Policy == metalv1alpha1.ServerMaintenancePolicyOwnerApproval {
				follow(kMaintApprove, between(r, 500*time.Millisecond, 3*time.Second), 6, nil)
			}
			follow(kMaintDelete, between(r, 3*time.Second, 10*time.Second), 7, nil)
		case k == kDeleteBMC || k == kDeleteSecret || k == kDeleteEndpoint:
			follow(kRecreate, between(r, 2*time.Second, 8*time.Second), 7, nil)
		}
	}
	// Half the stuck power transitions become failed ones (the emulator's FailPowerTransitions),
	// drawn from the second stream so that every seed keeps its other steps.
	for i := range s.Steps {
		if st := &s.Steps[i]; (st.Kind == kFault || st.Kind == kHeal) && st.Fault == fStuckPower {
			if st.Kind == kFault {
				failed := q.IntN(2) == 0
				for j := range s.Steps {
					if s.Steps[j].ID == st.ID || s.Steps[j].Origin == st.ID {
						if failed {
							s.Steps[j].Fault, s.Steps[j].Value = fFailedPower, 0
						}
					}
				}
			}
		}
	}
	// Identity and ambiguity faults, from a stream of their own so that every seed keeps its other
	// steps: an address handed to another BMC, a replaced board, a 500 after the effect; each
	// healed after a while.
	idf := rand.New(rand.NewPCG(seed, 0x6964656e74697479))
	for range 1 + idf.IntN(2) {
		st := step{At: time.Duration(idf.Int64N(int64(s.Chaos))), Kind: kFault, Index: idf.IntN(s.BMCs), Claimed: idf.IntN(2) == 0,
			Fault: []string{fAddressReuse, fBoardSwap, fAfterEffect}[idf.IntN(3)], Dur: between(idf, 3*time.Second, 10*time.Second), Origin: -1}
		origin := add(st)
		heal := st
		heal.Kind, heal.At, heal.Origin = kHeal, st.At+st.Dur, origin
		add(heal)
	}
	// A second registration and a move while the source runs, from a stream of their own again.
	tm := rand.New(rand.NewPCG(seed, 0x7477696e6d6f7665))
	if tm.IntN(2) == 0 {
		st := step{At: time.Duration(tm.Int64N(int64(s.Chaos))), Kind: kFault, Index: tm.IntN(s.BMCs), Claimed: tm.IntN(2) == 0,
			Fault: fTwin, Object: []string{twinBMC, twinServer}[tm.IntN(2)], Dur: between(tm, 3*time.Second, 10*time.Second), Origin: -1}
		origin := add(st)
		heal := st
		heal.Kind, heal.At, heal.Origin = kHeal, st.At+st.Dur, origin
		add(heal)
	}
	if tm.IntN(3) == 0 {
		st := step{At: time.Duration(tm.Int64N(int64(s.Chaos))), Kind: kFault, Index: tm.IntN(s.BMCs), Claimed: tm.IntN(2) == 0,
			Fault: fMove, Dur: between(tm, 3*time.Second, 8*time.Second), Origin: -1}
		origin := add(st)
		heal := st
		heal.Kind, heal.At, heal.Origin = kHeal, st.At+st.Dur, origin
		add(heal)
	}
	// A shared BMCSecret with a rotation asked on one of its BMCs, and a BIOS upgrade (with a
	// lost answer, a flash that changes nothing, or neither) that may be deleted mid-flash: a
	// stream of their own again, each in about half the seeds.
	fw := rand.New(rand.NewPCG(seed, 0x6669726d77617265))
	if fw.IntN(2) == 0 {
		st := step{At: time.Duration(fw.Int64N(int64(s.Chaos * 2 / 3))), Kind: kShare, Index: fw.IntN(s.BMCs), Slot: 1 + fw.IntN(s.BMCs-1),
			Dur: between(fw, 4*time.Second, 9*time.Second), Origin: -1}
		origin := add(st)
		// The rotation is asked of the Secret's first BMC or of the one that joined it.
		ask := st
		ask.Kind, ask.At, ask.Origin, ask.Op = kBMCOperation, st.At+between(fw, 500*time.Millisecond, 2500*time.Millisecond), origin, metalv1alpha1.OperationRotateCredentials
		ask.Slot = []int{0, st.Slot}[fw.IntN(2)]
		add(ask)
		un := st
		un.Kind, un.At, un.Origin = kUnshare, st.At+st.Dur, origin
		add(un)
	}
	if fw.IntN(2) == 0 {
		st := step{At: time.Duration(fw.Int64N(int64(s.Chaos * 3 / 5))), Kind: kFirmware, Index: fw.IntN(s.BMCs), Claimed: fw.IntN(2) == 0,
			Fault: []string{"", fFlashLost, fFlashInert}[fw.IntN(3)], Dur: between(fw, 6*time.Second, 12*time.Second), Origin: -1}
		// A draw of its own, so that the seeds' other steps stay what they were.
		st.Set = rand.New(rand.NewPCG(seed, 0x736574)).IntN(2) == 0
		origin := add(st)
		if st.Fault != "" {
			heal := st
			heal.Kind, heal.At, heal.Origin = kHeal, st.At+st.Dur, origin
			add(heal)
		}
		if fw.IntN(2) == 0 {
			del := st
			del.Kind, del.At, del.Origin = kFirmwareDelete, st.At+between(fw, time.Second, 4*time.Second), origin
			add(del)
		}
	}
	// Sharded replicas in about a third of the seeds, with a partitioned shard owner in most of
	// those: a stream of its own again.
	sh := rand.New(rand.NewPCG(seed, 0x7368617264))
	if sh.IntN(3) == 0 {
		s.Shards = true
		if sh.IntN(4) != 0 {
			st := step{At: between(sh, s.Chaos/5, s.Chaos*3/5), Kind: kPartition, Index: sh.IntN(s.BMCs), Claimed: sh.IntN(2) == 0,
				Value: between(sh, 1200*time.Millisecond, 1800*time.Millisecond), Dur: between(sh, 6*time.Second, 10*time.Second), Origin: -1}
			origin := add(st)
			re := st
			re.Kind, re.At, re.Origin = kReconnect, st.At+st.Dur, origin
			add(re)
		}
	}
	slices.SortStableFunc(s.Steps, func(a, b step) int { return int(a.At - b.At) })
	return s
}
