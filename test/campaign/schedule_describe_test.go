package campaign

import (
	"fmt"
	"strings"
	"time"
)

// describe is the step as the journal prints it.
func (st step) describe(num map[int]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", st.Kind)
	target := fmt.Sprintf(" target=%d", st.Index)
	if st.Claimed {
		target += "(a claimed server if any)"
	}
	switch st.Kind {
	case kClaimByName:
		fmt.Fprintf(&b, " claim-%d server=%d power=%s tolerate=%v", st.Slot, st.Index, st.Power, st.Tolerate)
	case kClaimBySelector:
		fmt.Fprintf(&b, " claim-%d rack=%q power=%s tolerate=%v", st.Slot, st.Rack, st.Power, st.Tolerate)
	case kClaimDelete, kClaimPower:
		fmt.Fprintf(&b, " claim-%d", st.Slot)
	case kCordon:
		fmt.Fprintf(&b, "%s unclaimable=%v", target, st.On)
	case kTaint:
		fmt.Fprintf(&b, "%s effect=%q", target, st.Effect)
	case kOperation:
		op := st.Op
		if op == "" {
			op = "(remove ignore)"
		}
		fmt.Fprintf(&b, "%s op=%s", target, op)
		if st.Touch {
			b.WriteString(" +label edit")
		}
	case kBMCOperation:
		if st.Origin >= 0 {
			fmt.Fprintf(&b, " bmc=%d+%d op=%s", st.Index, st.Slot, st.Op) // the Slot-th after the share's first BMC
		} else {
			fmt.Fprintf(&b, " bmc=%d op=%s", st.Index, st.Op)
		}
	case kShare, kUnshare:
		fmt.Fprintf(&b, " bmc=%d+%d", st.Index, st.Slot)
		if st.Kind == kShare {
			fmt.Fprintf(&b, " for %s", st.Dur.Round(100*time.Millisecond))
		}
	case kFirmware:
		fmt.Fprintf(&b, "%s", target)
		if st.Set {
			b.WriteString(" and the next, as a BIOSVersionSet (maxUnavailable 1)")
		}
		if st.Fault != "" {
			fmt.Fprintf(&b, " with %s", st.Fault)
		}
	case kFirmwareDelete:
		b.WriteString(target)
		if st.Set {
			b.WriteString(" (the BIOSVersionSet)")
		}
	case kMaintCreate:
		fmt.Fprintf(&b, " maint-%d%s policy=%s power=%q bootTemplate=%v", st.Slot, target, st.Policy, st.Power, st.Template)
	case kMaintApprove, kMaintDelete:
		fmt.Fprintf(&b, " maint-%d", st.Slot)
	case kDeleteServer, kDeleteSecret, kDeleteEndpoint, kRecreate, kFixSecret, kProbe:
		b.WriteString(target)
	case kDeleteBMC:
		fmt.Fprintf(&b, "%s withSecret=%v", target, st.WithSecret)
	case kWipeStatus, kStrip:
		fmt.Fprintf(&b, " %s%s slot=%d", st.Object, target, st.Slot)
	case kFault:
		fmt.Fprintf(&b, "%s %s for %s", target, st.Fault, st.Dur.Round(100*time.Millisecond))
		if st.Fault == fTwin {
			fmt.Fprintf(&b, " as %s", st.Object)
		}
		if st.Value > 0 {
			fmt.Fprintf(&b, " (%s)", st.Value.Round(10*time.Millisecond))
		}
	case kCredentials:
		b.WriteString(target)
	case kPartition:
		fmt.Fprintf(&b, "%s: its shard's holder cut off from the API server for %s, the BMC answering %s late",
			target, st.Dur.Round(100*time.Millisecond), st.Value.Round(10*time.Millisecond))
	}
	if n, ok := num[st.Origin]; ok && st.Origin >= 0 {
		fmt.Fprintf(&b, " (follows #%d)", n)
	}
	return b.String()
}

// numbers maps step IDs to their 1-based position in the schedule.
func (s *schedule) numbers() map[int]int {
	num := make(map[int]int, len(s.Steps))
	for i, st := range s.Steps {
		num[st.ID] = i + 1
	}
	return num
}

// String prints the whole schedule, numbered, with planned times.
func (s *schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d BMCs, power delay %s, chaos %s", s.Seed, s.BMCs, s.PowerDelay.Round(time.Millisecond), s.Chaos.Round(100*time.Millisecond))
	if s.Quirk != "" {
		fmt.Fprintf(&b, ", BMC %d answers %s with 500 throughout", s.QuirkBMC, s.Quirk)
	}
	if s.SlowBMC >= 0 {
		fmt.Fprintf(&b, ", BMC %d answers %s late throughout", s.SlowBMC, s.SlowLatency.Round(time.Millisecond))
	}
	if s.Shards {
		b.WriteString(", two replicas on two shards")
	}
	var eps []string
	for i, e := range s.Endpoint {
		if e {
			eps = append(eps, fmt.Sprint(i))
		}
	}
	fmt.Fprintf(&b, ", Endpoint objects for BMCs %v\n", eps)
	num := s.numbers()
	for i, st := range s.Steps {
		fmt.Fprintf(&b, "  #%02d +%5.2fs %s\n", i+1, st.At.Seconds(), st.describe(num))
	}
	return b.String()
}
