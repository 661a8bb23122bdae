// Package inventory keeps what discovery found on a server where a wiped Server status cannot
// erase it, and says when a later discovery finds less.
//
// The record is a ConfigMap per server in the discovery namespace (ObjectName), owned by the
// Server so it goes with it. It holds two inventories: Current, the last discovery's, from which
// the server controller rebuilds a wiped status; and Baseline, the hardware the server is
// expected to have. A discovery that finds everything of the baseline (or more) becomes the new
// baseline; one that finds less leaves the baseline alone and is drift until the hardware is back
// or the user accepts the new inventory. The registry writes the record in the same report it
// writes status from; the drift itself is kept on the Server (InventoryDriftAnnotation), where
// the condition is rebuilt from.
//
// It builds and parses the record and judges drift, and makes no API call: the registry writes
// the record, and what drift does to a Server is the Server controller's.
package inventory

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

const (
	// ServerLabel names the Server a record belongs to.
	ServerLabel = "inventory.metalhub.io/server"
	// dataKey holds the record's JSON.
	dataKey = "inventory.json"
	// maxDrift bounds the drift message (an annotation, a condition message, an event note).
	maxDrift = 1000
	// memorySlack is how much less memory than the baseline still counts as the same: MemTotal
	// moves a little with what the kernel reserves, and a DIMM is whole GiBs.
	memorySlack = 1 << 30
)

// ObjectName is the record's ConfigMap name in the discovery namespace.
func ObjectName(server string) string { return "inventory-" + server }

// Hardware is what discovery writes into a Server's status.
type Hardware struct {
	Processors        []metalv1alpha1.Processor        `json:"processors,omitempty"`
	TotalSystemMemory *resource.Quantity               `json:"totalSystemMemory,omitempty"`
	NetworkInterfaces []metalv1alpha1.NetworkInterface `json:"networkInterfaces,omitempty"`
	Storages          []metalv1alpha1.Storage          `json:"storages,omitempty"`
	GPUs              []metalv1alpha1.GPU              `json:"gpus,omitempty"`
	PCIDevices        []metalv1alpha1.PCIDeviceSummary `json:"pciDevices,omitempty"`
	// BIOSVersion is the firmware's version as the OS reads it (DMI); not part of the status.
	BIOSVersion string `json:"biosVersion,omitempty"`
}

// FromStatus takes the discovery fields of a status.
func FromStatus(st *metalv1alpha1.ServerStatus) Hardware {
	h := Hardware{Processors: st.Processors, NetworkInterfaces: st.NetworkInterfaces, Storages: st.Storages, GPUs: st.GPUs, PCIDevices: st.PCIDevices}
	if st.TotalSystemMemory != nil {
		q := st.TotalSystemMemory.DeepCopy()
		h.TotalSystemMemory = &q
	}
	return h
}

// Restore fills the discovery fields a status lacks (a wiped one) from h; what it has stays.
func (h Hardware) Restore(st *metalv1alpha1.ServerStatus) {
	if len(st.Processors) == 0 {
		st.Processors = h.Processors
	}
	if st.TotalSystemMemory == nil && h.TotalSystemMemory != nil {
		q := h.TotalSystemMemory.DeepCopy()
		st.TotalSystemMemory = &q
	}
	if len(st.NetworkInterfaces) == 0 {
		st.NetworkInterfaces = h.NetworkInterfaces
	}
	if len(st.Storages) == 0 {
		st.Storages = h.Storages
	}
	if len(st.GPUs) == 0 {
		st.GPUs = h.GPUs
	}
	if len(st.PCIDevices) == 0 {
		st.PCIDevices = h.PCIDevices
	}
}

// Record is a server's durable inventory.
type Record struct {
	// Round is the discovery round Current comes from.
	Round string `json:"round,omitempty"`
	// Current is the last discovery's inventory.
	Current Hardware `json:"current"`
	// Baseline is what the server is expected to have.
	Baseline Hardware `json:"baseline"`
}

// Next is the record after a discovery of round that found now, and the drift it shows ("" for
// none). The first discovery is the baseline; one that misses nothing of the baseline becomes it.
func Next(prev *Record, now Hardware, round string) (Record, string) {
	if prev == nil {
		return Record{Round: round, Current: now, Baseline: now}, ""
	}
	missing := Missing(prev.Baseline, now)
	if len(missing) == 0 {
		return Record{Round: round, Current: now, Baseline: now}, ""
	}
	return Record{Round: round, Current: now, Baseline: prev.Baseline}, Summary(missing)
}

// Accept makes the last discovery the baseline.
func (r Record) Accept() Record {
	r.Baseline = r.Current
	return r
}

// Missing lists, for people, what baseline has and now lacks: GPUs (by PCI address and IDs),
// NICs (by MAC), drives (by serial number, else name and size), memory and CPU threads; and a
// BIOS version changed behind our back (the caller moves the baseline's first when an upgrade
// of ours explains it: FirmwareExplained).
func Missing(baseline, now Hardware) []string {
	var out []string
	gpuKey := func(g metalv1alpha1.GPU) string { return g.PCIAddress + " " + g.VendorID + ":" + g.DeviceID }
	have := map[string]bool{}
	for _, g := range now.GPUs {
		have[gpuKey(g)] = true
	}
	var gone []string
	for _, g := range baseline.GPUs {
		if !have[gpuKey(g)] {
			gone = append(gone, strings.TrimSpace(g.PCIAddress+" "+firstOf(g.Model, g.VendorID+":"+g.DeviceID)))
		}
	}
	if len(gone) > 0 {
		out = append(out, fmt.Sprintf("%d of %d GPUs missing (%s)", len(gone), len(baseline.GPUs), strings.Join(gone, ", ")))
	}

	have = map[string]bool{}
	for _, n := range now.NetworkInterfaces {
		have[strings.ToLower(n.MACAddress)] = true
	}
	for _, n := range baseline.NetworkInterfaces {
		if n.MACAddress != "" && !have[strings.ToLower(n.MACAddress)] {
			out = append(out, fmt.Sprintf("NIC %s (%s) missing", strings.ToLower(n.MACAddress), n.Name))
		}
	}

	have = map[string]bool{}
	for _, d := range drives(now) {
		have[driveKey(d)] = true
	}
	for _, d := range drives(baseline) {
		if !have[driveKey(d)] {
			out = append(out, fmt.Sprintf("drive %s missing", driveName(d)))
		}
	}

	if b, n := baseline.TotalSystemMemory, now.TotalSystemMemory; b != nil && n != nil && n.Value()+memorySlack < b.Value() {
		out = append(out, fmt.Sprintf("memory %s, was %s", n.String(), b.String()))
	}
	if b, n := threads(baseline), threads(now); n > 0 && n < b {
		out = append(out, fmt.Sprintf("CPU threads %d, was %d", n, b))
	}
	if b, n := baseline.BIOSVersion, now.BIOSVersion; b != "" && n != "" && b != n {
		out = append(out, fmt.Sprintf("BIOS version %s, was %s", n, b))
	}
	return out
}

// FirmwareExplained reports whether a BIOS version read from DMI is one an upgrade asked for:
// the same, or one holding the other (BMCs and DMI spell versions differently, e.g. HPE's
// "U46 v2.72 (03/14/2023)" for DMI's "U46").
func FirmwareExplained(dmi string, asked []string) bool {
	d := strings.ToLower(strings.TrimSpace(dmi))
	for _, a := range asked {
		a = strings.ToLower(strings.TrimSpace(a))
		if a != "" && d != "" && (a == d || strings.Contains(a, d) || strings.Contains(d, a)) {
			return true
		}
	}
	return false
}

// Summary joins Missing's findings into a message that fits an annotation and a condition.
func Summary(missing []string) string {
	s := strings.Join(missing, "; ")
	if len(s) > maxDrift {
		s = s[:maxDrift-3] + "..."
	}
	return s
}

func drives(h Hardware) []metalv1alpha1.StorageDrive {
	var out []metalv1alpha1.StorageDrive
	for _, s := range h.Storages {
		out = append(out, s.Drives...)
	}
	return out
}

func driveKey(d metalv1alpha1.StorageDrive) string {
	if d.SerialNumber != "" {
		return "serial " + d.SerialNumber
	}
	size := int64(0)
	if d.Capacity != nil {
		size = d.Capacity.Value()
	}
	return fmt.Sprintf("%s %d", d.Name, size)
}

func driveName(d metalv1alpha1.StorageDrive) string {
	parts := []string{}
	for _, p := range []string{d.Name, d.Model} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if d.SerialNumber != "" {
		parts = append(parts, "serial "+d.SerialNumber)
	}
	return strings.Join(parts, " ")
}

func threads(h Hardware) int {
	n := 0
	for _, p := range h.Processors {
		n += int(p.TotalThreads)
	}
	return n
}

func firstOf(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// ConfigMap renders rec as the record of server, to be created or updated in namespace.
func ConfigMap(namespace, server string, rec Record) (*corev1.ConfigMap, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding the inventory of server %s: %w", server, err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ObjectName(server), Labels: map[string]string{ServerLabel: server}},
		Data:       map[string]string{dataKey: string(b)},
	}, nil
}

// Decode reads a record's ConfigMap.
func Decode(cm *corev1.ConfigMap) (*Record, error) {
	rec := &Record{}
	if err := json.Unmarshal([]byte(cm.Data[dataKey]), rec); err != nil {
		return nil, fmt.Errorf("decoding inventory record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return rec, nil
}
