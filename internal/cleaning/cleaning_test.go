package cleaning

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/probe"
	"github.com/metalhub/metalhub/internal/probe/erase"
)

const (
	none = metalv1alpha1.CleaningPolicyNone
	meta = metalv1alpha1.CleaningPolicyMetadata
	root = metalv1alpha1.CleaningPolicyRootDisk
	all  = metalv1alpha1.CleaningPolicyAllDisks
)

// The agent's wire names are the API's.
func TestPolicyNamesMatchTheWire(t *testing.T) {
	if string(meta) != probe.CleaningMetadata || string(root) != probe.CleaningRootDisk || string(all) != probe.CleaningAllDisks {
		t.Fatal("the probe's policy names drifted from the API's")
	}
}

func TestEffective(t *testing.T) {
	for _, tc := range []struct {
		fleet, server, claim, want metalv1alpha1.CleaningPolicy
	}{
		{fleet: all, want: all},
		{fleet: "", want: none},
		{fleet: none, server: all, want: all},               // the server's own wins over the fleet's
		{fleet: all, server: meta, want: meta},              // ... either way
		{fleet: all, claim: meta, want: meta},               // a claim narrows
		{fleet: meta, claim: all, want: meta},               // ... and never widens
		{fleet: root, server: all, claim: none, want: none}, // a claim may ask for nothing
		{fleet: root, claim: "Shred", want: root},           // an unknown claim value changes nothing
		{fleet: "Bogus", server: "", claim: "", want: none}, // nor an unknown fleet value
	} {
		if got := Effective(tc.fleet, tc.server, tc.claim); got != tc.want {
			t.Errorf("Effective(%q, %q, %q) = %q, want %q", tc.fleet, tc.server, tc.claim, got, tc.want)
		}
	}
}

func disk(name, role string, verified bool, m erase.Method) probe.DiskCleaning {
	d := probe.DiskCleaning{BlockDevice: probe.BlockDevice{Name: name, Serial: "S-" + name}, Role: role}
	if role != probe.RoleSkip {
		d.Proof = &erase.Proof{Method: m, Verified: verified}
		if !verified {
			d.Proof.Failure = "3 of 260 sampled blocks not zero"
		}
	}
	return d
}

func TestVerdict(t *testing.T) {
	ok := func(d ...probe.DiskCleaning) []probe.DiskCleaning { return d }
	for i, tc := range []struct {
		policy   metalv1alpha1.CleaningPolicy
		reported string
		disks    []probe.DiskCleaning
		expected []string
		fail     string // "" when it must pass; else a piece of the failure
	}{
		{policy: all, disks: ok(disk("sda", probe.RoleSanitize, true, erase.MethodDiscard), disk("sdb", probe.RoleSanitize, true, erase.MethodOverwrite))},
		{policy: all, disks: ok(disk("sda", probe.RoleSanitize, true, erase.MethodDiscard), disk("sdb", probe.RoleSanitize, false, erase.MethodOverwrite)),
			fail: "disk sdb (serial S-sdb) not erased: 3 of 260"},
		{policy: all, disks: ok(disk("sda", probe.RoleMetadata, true, erase.MethodMetadata)), fail: "only Metadata"},
		{policy: all, disks: ok(disk("sda", probe.RoleSanitize, true, erase.MethodMetadata)), fail: "no sanitization"},
		{policy: all, disks: ok(disk("sda", probe.RoleSanitize, true, erase.MethodZeroOut), disk("sdc", probe.RoleSkip, false, "")),
			expected: []string{"sda", "S-sdc"}},
		{policy: all, disks: ok(disk("sda", probe.RoleSanitize, true, erase.MethodZeroOut)), expected: []string{"sda", "S-nvme0n1"},
			fail: "disk S-nvme0n1 of the inventory is not in the report"},
		{policy: root, disks: ok(disk("sda", probe.RoleSanitize, true, erase.MethodZeroOut), disk("sdb", probe.RoleMetadata, true, erase.MethodMetadata))},
		{policy: root, disks: ok(disk("sda", probe.RoleMetadata, true, erase.MethodMetadata)), fail: "no disk was sanitized"},
		{policy: meta, disks: ok(disk("sda", probe.RoleMetadata, true, erase.MethodMetadata))},
		{policy: meta, disks: ok(probe.DiskCleaning{BlockDevice: probe.BlockDevice{Name: "sda"}, Role: probe.RoleMetadata}), fail: "disk sda has no proof"},
		{policy: all, reported: string(meta), disks: ok(disk("sda", probe.RoleMetadata, true, erase.MethodMetadata)), fail: `policy "Metadata"`},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			e := Entry{Round: "r1", Policy: string(tc.policy), Disks: tc.disks}
			if tc.reported != "" {
				e.Policy = tc.reported
			}
			good, why := Verdict(e, tc.policy, tc.expected)
			switch {
			case tc.fail == "" && !good:
				t.Fatalf("refused: %s", why)
			case tc.fail != "" && good:
				t.Fatalf("passed, want a failure with %q", tc.fail)
			case tc.fail != "" && !strings.Contains(why, tc.fail):
				t.Fatalf("failure %q does not say %q", why, tc.fail)
			}
		})
	}
}

func TestRecordKeepsTheLastCleaningsAndOneEntryPerRound(t *testing.T) {
	var r Record
	for i := range MaxHistory + 3 {
		r.Add(Entry{Round: fmt.Sprint(i)})
	}
	r.Add(Entry{Round: fmt.Sprint(MaxHistory + 2), Policy: "AllDisks"}) // a retried report
	if len(r.Cleanings) != MaxHistory || r.Cleanings[0].Round != "3" {
		t.Fatalf("%d entries, first %q", len(r.Cleanings), r.Cleanings[0].Round)
	}
	if e, ok := r.Of(fmt.Sprint(MaxHistory + 2)); !ok || e.Policy != "AllDisks" {
		t.Fatalf("the retried round's entry: %+v %v", e, ok)
	}
	cm, err := ConfigMap("ns", Record{Server: "s1", Cleanings: r.Cleanings})
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(cm)
	if err != nil || back.Server != "s1" || len(back.Cleanings) != MaxHistory || cm.Name != "cleaning-s1" {
		t.Fatalf("round trip: %+v %v", back, err)
	}
}

// An owed record is keyed by the machine's UUID however it was written, reads back what it
// recorded, and one whose policy is not the API's is owed everything.
func TestOwedRecord(t *testing.T) {
	since := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	cm := OwedConfigMap("metalhub-discovery", Owed{SystemUUID: " {0F0E0D0C-0000-4000-8000-00000000BEEF} ", Policy: "RootDisk", Server: "bmc-1-1", Since: since})
	if cm.Name != "cleaning-owed-0f0e0d0c-0000-4000-8000-00000000beef" || cm.Name != OwedName("0f0e0d0c-0000-4000-8000-00000000BEEF") {
		t.Fatalf("name %q", cm.Name)
	}
	got := DecodeOwed(cm)
	if got.SystemUUID != "0f0e0d0c-0000-4000-8000-00000000beef" || got.Policy != "RootDisk" || got.Server != "bmc-1-1" || !got.Since.Equal(since) {
		t.Fatalf("decoded %+v", got)
	}
	cm.Data["policy"] = "Shred"
	if got := DecodeOwed(cm); got.Policy != metalv1alpha1.CleaningPolicyAllDisks {
		t.Fatalf("unknown policy decoded as %q, want AllDisks", got.Policy)
	}
}
