// Package cleaning keeps the proof that a released server's disks were erased, where a wiped
// Server status cannot lose it, and judges whether a cleaning report proves what its policy asks.
//
// The record is a ConfigMap per server in the discovery namespace (ObjectName), owned by the
// Server: the registry appends each cleaning report it accepts (the last MaxHistory), the Server
// controller judges the entry of its round (Verdict) before the server is Available again, and
// `metalhub cleaning report` prints it for an auditor.
//
// It builds, parses and judges, and makes no API call. It imports no controller package.
package cleaning

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/probe"
)

const (
	// ServerLabel names the Server a record belongs to.
	ServerLabel = "cleaning.metalhub.io/server"
	// DataKey holds the record's JSON.
	DataKey = "cleaning.json"
	// MaxHistory is how many cleanings a record keeps, newest last.
	MaxHistory = 16
	// maxMessage bounds a failure message (an annotation, a condition message, an event note).
	maxMessage = 1000
)

// The methods of a cleaning done through the BMC (the Server controller writes its entry): the
// BMC's word that it erased, with no block read back.
const (
	// MethodBMCSecureErase: the drive's Redfish Drive.SecureErase.
	MethodBMCSecureErase = "RedfishSecureErase"
	// MethodBMCVolumeInitialize: a Slow Redfish Volume.Initialize of the volume the drive is in.
	MethodBMCVolumeInitialize = "RedfishVolumeInitialize"
)

// ObjectName is the record's ConfigMap name in the discovery namespace.
func ObjectName(server string) string { return "cleaning-" + server }

// rank orders the policies: each erases everything the one before it does.
var rank = map[metalv1alpha1.CleaningPolicy]int{
	metalv1alpha1.CleaningPolicyNone:     0,
	metalv1alpha1.CleaningPolicyMetadata: 1,
	metalv1alpha1.CleaningPolicyRootDisk: 2,
	metalv1alpha1.CleaningPolicyAllDisks: 3,
}

// Valid reports whether p is a policy of the API.
func Valid(p metalv1alpha1.CleaningPolicy) bool {
	_, ok := rank[p]
	return ok
}

// Effective is the policy a claim's release is cleaned by: the server's own, else the fleet's,
// narrowed by the claim's where it asks for less. A claim never widens it: what is erased for
// the next tenant is the fleet's and the server's to say.
func Effective(fleet, server, claim metalv1alpha1.CleaningPolicy) metalv1alpha1.CleaningPolicy {
	p := fleet
	if Valid(server) {
		p = server
	}
	if !Valid(p) {
		p = metalv1alpha1.CleaningPolicyNone
	}
	if Valid(claim) && rank[claim] < rank[p] {
		p = claim
	}
	return p
}

// Wider is the policy of a and b that erases more.
func Wider(a, b metalv1alpha1.CleaningPolicy) metalv1alpha1.CleaningPolicy {
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// Flag is a command-line flag value for a policy that refuses what the API would.
func Flag(p *metalv1alpha1.CleaningPolicy) flag.Value { return policyFlag{p} }

type policyFlag struct{ p *metalv1alpha1.CleaningPolicy }

func (f policyFlag) String() string {
	if f.p == nil {
		return ""
	}
	return string(*f.p)
}

func (f policyFlag) Set(v string) error {
	if !Valid(metalv1alpha1.CleaningPolicy(v)) {
		return fmt.Errorf("%q: want None, Metadata, RootDisk or AllDisks", v)
	}
	*f.p = metalv1alpha1.CleaningPolicy(v)
	return nil
}

// Entry is one cleaning: the agent's report as the registry accepted it.
type Entry struct {
	// Round is the cleaning round the report came with.
	Round string `json:"round"`
	// Policy is what the round asked.
	Policy string `json:"policy"`
	// Reported is when the registry accepted it.
	Reported time.Time `json:"reported"`
	// DMIUUID is the DMI system UUID of the machine that erased.
	DMIUUID string `json:"dmiUUID"`
	// Disks are the agent's per-disk results and proofs.
	Disks []probe.DiskCleaning `json:"disks"`
}

// Record is a server's cleaning history.
type Record struct {
	Server     string  `json:"server"`
	SystemUUID string  `json:"systemUUID,omitempty"`
	Cleanings  []Entry `json:"cleanings"`
}

// Add appends e, replacing an entry of the same round (a retried report), and keeps the last
// MaxHistory.
func (r *Record) Add(e Entry) {
	r.Cleanings = slices.DeleteFunc(r.Cleanings, func(x Entry) bool { return x.Round == e.Round })
	r.Cleanings = append(r.Cleanings, e)
	if n := len(r.Cleanings); n > MaxHistory {
		r.Cleanings = r.Cleanings[n-MaxHistory:]
	}
}

// Of returns the entry of round, if the record has one.
func (r *Record) Of(round string) (Entry, bool) {
	for _, e := range r.Cleanings {
		if e.Round == round {
			return e, true
		}
	}
	return Entry{}, false
}

// Verdict says whether e proves a cleaning by policy: every disk the policy covers is erased
// the way it asks and read back as erased, and every disk of the server's inventory (expected:
// kernel names or serials of its drives, empty when unknown) is in the report. The failure
// names the first disk that did not hold, for people.
func Verdict(e Entry, policy metalv1alpha1.CleaningPolicy, expected []string) (bool, string) {
	if e.Policy != string(policy) {
		return false, fmt.Sprintf("the report is of policy %q, the round asked %q", e.Policy, policy)
	}
	var bad []string
	seen := map[string]bool{}
	sanitized := 0
	for _, d := range e.Disks {
		seen[d.Name], seen[d.Serial] = true, true
		if d.Role == probe.RoleSkip {
			continue
		}
		if d.Role == probe.RoleSanitize {
			sanitized++
		}
		if policy == metalv1alpha1.CleaningPolicyAllDisks && d.Role != probe.RoleSanitize {
			bad = append(bad, fmt.Sprintf("disk %s was only %s, AllDisks sanitizes every disk", diskName(d), d.Role))
			continue
		}
		p := d.Proof
		switch {
		case p == nil:
			bad = append(bad, fmt.Sprintf("disk %s has no proof", diskName(d)))
		case !p.Verified:
			bad = append(bad, fmt.Sprintf("disk %s not erased: %s", diskName(d), p.Failure))
		case d.Role == probe.RoleSanitize && p.Method == "Metadata":
			bad = append(bad, fmt.Sprintf("disk %s: a metadata wipe is no sanitization", diskName(d)))
		}
	}
	if policy == metalv1alpha1.CleaningPolicyRootDisk && sanitized == 0 {
		bad = append(bad, "no disk was sanitized as the root disk")
	}
	for _, x := range expected {
		if x != "" && !seen[x] {
			bad = append(bad, fmt.Sprintf("disk %s of the inventory is not in the report", x))
		}
	}
	if len(bad) == 0 {
		return true, ""
	}
	msg := strings.Join(bad, "; ")
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	return false, msg
}

func diskName(d probe.DiskCleaning) string {
	if d.Serial != "" {
		return d.Name + " (serial " + d.Serial + ")"
	}
	return d.Name
}

// Summary says what a verified entry proved, for an event or a condition message.
func Summary(e Entry) string {
	n, attested, methods := 0, 0, map[string]int{}
	for _, d := range e.Disks {
		if d.Proof != nil && d.Proof.Verified {
			n++
			methods[string(d.Proof.Method)]++
			if d.Proof.Samples == 0 {
				attested++
			}
		}
	}
	keys := make([]string, 0, len(methods))
	for k := range methods {
		keys = append(keys, fmt.Sprintf("%d by %s", methods[k], k))
	}
	slices.Sort(keys)
	how := "erased and read back"
	switch {
	case attested == n && n > 0:
		how = "erased by the BMC (its word, nothing read back)"
	case attested > 0:
		how = fmt.Sprintf("erased (%d read back, %d on the BMC's word)", n-attested, attested)
	}
	return fmt.Sprintf("policy %s, round %s: %d disks %s (%s)", e.Policy, e.Round, n, how, strings.Join(keys, ", "))
}

// ConfigMap builds the record's ConfigMap.
func ConfigMap(namespace string, rec Record) (*corev1.ConfigMap, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding the cleaning record of server %s: %w", rec.Server, err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ObjectName(rec.Server), Labels: map[string]string{ServerLabel: rec.Server}},
		Data:       map[string]string{DataKey: string(b)},
	}, nil
}

// Decode reads a record's ConfigMap.
func Decode(cm *corev1.ConfigMap) (*Record, error) {
	rec := &Record{}
	if err := json.Unmarshal([]byte(cm.Data[DataKey]), rec); err != nil {
		return nil, fmt.Errorf("decoding cleaning record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return rec, nil
}
