package wiring

import (
	"fmt"
	"net"
	"strings"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	readinessv1alpha1 "github.com/metalhub/metalhub/api/readiness/v1alpha1"
)

// Compare checks every expected interface against the NICs discovery reported, in the order the
// spec lists them, and returns one mismatch per interface and kind (none: the wiring holds).
//
//   - No NIC with the MAC address: InterfaceMissing (and nothing else of that interface).
//   - A carrier status expected and another seen: CarrierDown when "up" was expected, else
//     CarrierMismatch.
//   - Neighbours expected and one of them not seen: NeighborMismatch, naming what the NIC does
//     see (so a cable in the wrong port is one mismatch that names both ports).
//   - Neighbours seen beside all the expected ones pass, as they do in metal-maintenance-operator:
//     a wiring that held there holds here (a management switch or a second LLDP agent on a
//     port is common).
//
// MAC addresses compare without regard to case or separator, carrier states, system names and
// port IDs without regard to case: switches and probes spell them differently, not wrongly.
func Compare(expected []readinessv1alpha1.ExpectedInterface, seen []metalv1alpha1.NetworkInterface) []readinessv1alpha1.InterfaceMismatch {
	byMAC := make(map[string]*metalv1alpha1.NetworkInterface, len(seen))
	for i := range seen {
		byMAC[NormalMAC(seen[i].MACAddress)] = &seen[i]
	}
	var out []readinessv1alpha1.InterfaceMismatch
	add := func(mac, reason, format string, args ...any) {
		out = append(out, readinessv1alpha1.InterfaceMismatch{MACAddress: mac, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}
	for _, want := range expected {
		nic, ok := byMAC[NormalMAC(want.MACAddress)]
		if !ok {
			if len(seen) == 0 {
				add(want.MACAddress, readinessv1alpha1.ReasonInterfaceMissing, "no interface with MAC %s: the server reports no network interfaces (not discovered yet)", want.MACAddress)
			} else {
				add(want.MACAddress, readinessv1alpha1.ReasonInterfaceMissing, "no interface with MAC %s; seen: %s", want.MACAddress, nicList(seen))
			}
			continue
		}
		if want.CarrierStatus != "" && !strings.EqualFold(strings.TrimSpace(want.CarrierStatus), strings.TrimSpace(nic.CarrierStatus)) {
			reason := readinessv1alpha1.ReasonCarrierMismatch
			if strings.EqualFold(strings.TrimSpace(want.CarrierStatus), "up") {
				reason = readinessv1alpha1.ReasonCarrierDown
			}
			seenCarrier := "none reported"
			if nic.CarrierStatus != "" {
				seenCarrier = fmt.Sprintf("%q", nic.CarrierStatus)
			}
			add(want.MACAddress, reason, "%s: carrier expected %q, seen %s", nic.Name, want.CarrierStatus, seenCarrier)
		}
		if len(want.Neighbors) == 0 {
			continue
		}
		var missing []string
		for _, n := range want.Neighbors {
			if !seesNeighbor(nic.Neighbors, n) {
				missing = append(missing, neighbor(n.SystemName, n.PortID))
			}
		}
		if len(missing) > 0 {
			add(want.MACAddress, readinessv1alpha1.ReasonNeighborMismatch, "%s: expected neighbour %s not seen; seen: %s",
				nic.Name, strings.Join(missing, ", "), seenNeighbors(nic.Neighbors))
		}
	}
	return out
}

// reasonRank orders the mismatch reasons from gravest: the one a condition carries when an
// interface has several.
var reasonRank = map[string]int{
	readinessv1alpha1.ReasonInterfaceMissing: 0,
	readinessv1alpha1.ReasonCarrierDown:      1,
	readinessv1alpha1.ReasonCarrierMismatch:  2,
	readinessv1alpha1.ReasonNeighborMismatch: 3,
}

// Gravest is the reason of the gravest mismatch ("" for none).
func Gravest(ms []readinessv1alpha1.InterfaceMismatch) string {
	best := ""
	for _, m := range ms {
		r, ok := reasonRank[m.Reason]
		if !ok {
			continue
		}
		if b, ok := reasonRank[best]; best == "" || !ok || r < b {
			best = m.Reason
		}
	}
	return best
}

// NormalMAC is a MAC address as the comparison sees it: lower case, colon-separated; an
// address net.ParseMAC cannot read is only lower-cased and trimmed.
func NormalMAC(s string) string {
	s = strings.TrimSpace(s)
	if hw, err := net.ParseMAC(s); err == nil {
		return hw.String()
	}
	return strings.ToLower(s)
}

func sameNeighbor(systemName, portID, otherSystem, otherPort string) bool {
	return strings.EqualFold(strings.TrimSpace(systemName), strings.TrimSpace(otherSystem)) &&
		strings.EqualFold(strings.TrimSpace(portID), strings.TrimSpace(otherPort))
}

func seesNeighbor(seen []metalv1alpha1.LLDPNeighbor, want readinessv1alpha1.ExpectedNeighbor) bool {
	for _, n := range seen {
		if sameNeighbor(n.SystemName, n.PortID, want.SystemName, want.PortID) {
			return true
		}
	}
	return false
}

func neighbor(system, port string) string { return orNone(system) + " port " + orNone(port) }

func seenNeighbors(ns []metalv1alpha1.LLDPNeighbor) string {
	if len(ns) == 0 {
		return "no LLDP neighbour"
	}
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, neighbor(n.SystemName, n.PortID))
	}
	return strings.Join(out, ", ")
}

func nicList(nics []metalv1alpha1.NetworkInterface) string {
	out := make([]string, 0, len(nics))
	for _, n := range nics {
		out = append(out, fmt.Sprintf("%s (%s)", n.Name, n.MACAddress))
	}
	return strings.Join(out, ", ")
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}
