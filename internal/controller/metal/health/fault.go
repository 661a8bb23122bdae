// Package health holds what the Server controller needs to watch a server's hardware health:
// the fault record and its policy, when each server's hardware log (SEL) was read, and the
// receiver of the BMCs' Redfish events, which only ask for a read. It reads nothing from a BMC
// and writes no object: the Server's pass does both.
package health

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// HardwareLogCursorAnnotation is the last entry of the server's hardware log (SEL) metalhub
	// has read: entries up to it are history, later ones news. Written once when the log is
	// first read (what was logged before metalhub looked is not raised), then with each fault.
	HardwareLogCursorAnnotation = "health.metalhub.io/log-cursor"
	// HardwareFaultMaintenanceAnnotation names the ServerMaintenance (namespace/name) the fault
	// policy opened for the server's current fault, so it is opened once.
	HardwareFaultMaintenanceAnnotation = "health.metalhub.io/maintenance"

	// MaxFaults bounds the fault record: the most recent critical events.
	MaxFaults = 5
)

// FaultPolicy is what metalhub does to a server whose BMC logged a critical event, beyond the
// HardwareFault condition, the Warning event and the metric.
type FaultPolicy string

const (
	// FaultPolicyNone only reports.
	FaultPolicyNone FaultPolicy = "None"
	// FaultPolicyTaint taints the server (HardwareFaultTaintKey, NoBind) so new claims avoid it;
	// a claim bound already keeps it.
	FaultPolicyTaint FaultPolicy = "Taint"
	// FaultPolicyMaintenance taints, and opens a ServerMaintenance for a server no claim holds.
	FaultPolicyMaintenance FaultPolicy = "TaintAndMaintenance"
)

// Set implements flag.Value.
func (p *FaultPolicy) Set(s string) error {
	for _, v := range []FaultPolicy{FaultPolicyNone, FaultPolicyTaint, FaultPolicyMaintenance} {
		if strings.EqualFold(s, string(v)) {
			*p = v
			return nil
		}
	}
	return fmt.Errorf("%q: want None, Taint or TaintAndMaintenance", s)
}

func (p *FaultPolicy) String() string { return string(*p) }

// Fault is one critical event in the fault record.
type Fault struct {
	Entry   string    `json:"entry"`
	Created time.Time `json:"created,omitzero"`
	Sensor  string    `json:"sensor,omitempty"`
	Message string    `json:"message"`
}

func (f Fault) same(e bmc.LogEntry) bool { return f.Entry == e.ID && f.Created.Equal(e.Created) }

// ParseFaults reads the fault record (a JSON list; "" is none).
func ParseFaults(s string) ([]Fault, error) {
	if s == "" {
		return nil, nil
	}
	var out []Fault
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("fault record %q: %w", s, err)
	}
	return out, nil
}

// FaultMessage is the HardwareFault condition's message.
func FaultMessage(record string) string {
	faults, err := ParseFaults(record)
	if err != nil || len(faults) == 0 {
		return record
	}
	parts := make([]string, len(faults))
	for i, f := range faults {
		what := f.Message
		if f.Sensor != "" {
			what = f.Sensor + ": " + what
		}
		parts[i] = fmt.Sprintf("%s (log entry %s", what, f.Entry)
		if !f.Created.IsZero() {
			parts[i] += ", " + f.Created.UTC().Format(time.RFC3339)
		}
		parts[i] += ")"
	}
	return "critical hardware events: " + strings.Join(parts, "; ")
}

// Polls keeps, per server, when its log was last read, the newest entry read and whether
// an event asked for a read now. In memory on purpose: after a restart every log is read once
// and the durable cursor says what is news.
type Polls struct {
	mu sync.Mutex
	m  map[types.UID]*Poll
}

// Poll is one server's last read of its log: when, up to which entry, and whether an event
// asked for another.
type Poll struct {
	At     time.Time
	Cursor string
	Rung   bool
}

// Get is the server's last read.
func (h *Polls) Get(uid types.UID) Poll {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.m[uid]; p != nil {
		return *p
	}
	return Poll{}
}

// Polled records a read of the server's log at at, up to cursor ("" keeps the last).
func (h *Polls) Polled(uid types.UID, at time.Time, cursor string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.entry(uid)
	p.At, p.Rung = at, false
	if cursor != "" {
		p.Cursor = cursor
	}
}

// ring asks for a read of the server's log at its next pass (an event arrived).
func (h *Polls) ring(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.entry(uid)
	p.Rung = true
}

// entry is the server's record, made on first use; the caller holds mu.
func (h *Polls) entry(uid types.UID) *Poll {
	if h.m == nil {
		h.m = map[types.UID]*Poll{}
	}
	p := h.m[uid]
	if p == nil {
		p = &Poll{}
		h.m[uid] = p
	}
	return p
}

// Forget drops a server (it is gone).
func (h *Polls) Forget(uid types.UID) {
	h.mu.Lock()
	delete(h.m, uid)
	h.mu.Unlock()
}

// News picks the critical entries the fault record does not hold yet.
func News(entries []bmc.LogEntry, faults []Fault) []bmc.LogEntry {
	var news []bmc.LogEntry
	for _, e := range entries {
		if !strings.EqualFold(e.Severity, "Critical") || slices.ContainsFunc(faults, func(f Fault) bool { return f.same(e) }) {
			continue
		}
		news = append(news, e)
	}
	return news
}

func faultTaint() metalv1alpha1.Taint {
	return metalv1alpha1.Taint{Key: metalv1alpha1.HardwareFaultTaintKey, Value: "critical", Effect: metalv1alpha1.TaintEffectNoBind}
}

// SetFaultTaint taints the server for its hardware fault (HardwareFaultTaintKey, NoBind), once.
func SetFaultTaint(s *metalv1alpha1.Server) {
	if !slices.ContainsFunc(s.Spec.Taints, func(t metalv1alpha1.Taint) bool { return t.Key == metalv1alpha1.HardwareFaultTaintKey }) {
		s.Spec.Taints = append(s.Spec.Taints, faultTaint())
	}
}

// CriticalEvents counts the critical hardware events recorded on servers, by the sensor type
// the BMC named (Memory, Power Supply / Converter, Fan, Processor, ...).
var CriticalEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "metalhub_hardware_critical_events_total",
	Help: "Critical events read from servers' hardware logs (SEL) and recorded as a HardwareFault, by sensor type.",
}, []string{"sensor_type"})

func init() { metrics.Registry.MustRegister(CriticalEvents) }
