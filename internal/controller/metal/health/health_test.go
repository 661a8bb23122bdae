package health

import (
	"slices"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
)

func TestLogNews(t *testing.T) {
	at := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	crit := func(id string) bmc.LogEntry {
		return bmc.LogEntry{ID: id, Created: at, Severity: "Critical", SensorType: "Memory", Message: "ECC " + id}
	}
	for _, tc := range []struct {
		name    string
		entries []bmc.LogEntry
		faults  []Fault
		want    []string
	}{
		{"nothing", nil, nil, nil},
		{"OK and Warning are no fault", []bmc.LogEntry{{ID: "1", Severity: "OK"}, {ID: "2", Severity: "Warning"}}, nil, nil},
		{"a critical entry", []bmc.LogEntry{{ID: "1", Severity: "OK"}, crit("2")}, nil, []string{"2"}},
		{"severity in any case", []bmc.LogEntry{{ID: "3", Severity: "critical"}}, nil, []string{"3"}},
		{"recorded already (a restart re-reads it)", []bmc.LogEntry{crit("2"), crit("3")},
			[]Fault{{Entry: "2", Created: at}}, []string{"3"}},
		{"the same id at another time is another entry (a cleared log starts over)", []bmc.LogEntry{crit("2")},
			[]Fault{{Entry: "2", Created: at.Add(-time.Hour)}}, []string{"2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range News(tc.entries, tc.faults) {
				got = append(got, e.ID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("news %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFaultMessage(t *testing.T) {
	rec := `[{"entry":"7","created":"2026-12-03T03:00:00Z","sensor":"Memory","message":"Uncorrectable ECC on DIMM A3"},{"entry":"9","message":"PSU 2 lost input"}]`
	want := "critical hardware events: Memory: Uncorrectable ECC on DIMM A3 (log entry 7, 2026-12-03T03:00:00Z); PSU 2 lost input (log entry 9)"
	if got := FaultMessage(rec); got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := FaultMessage("not json"); got != "not json" {
		t.Fatalf("an unreadable record is shown as it is, got %q", got)
	}
}

func TestFaultPolicyFlag(t *testing.T) {
	var p FaultPolicy
	for in, want := range map[string]FaultPolicy{"none": FaultPolicyNone, "Taint": FaultPolicyTaint, "taintandmaintenance": FaultPolicyMaintenance} {
		if err := p.Set(in); err != nil || p != want {
			t.Errorf("Set(%q) = %q, %v", in, p, err)
		}
	}
	if err := p.Set("evict"); err == nil {
		t.Error("an unknown policy is accepted")
	}
}

func TestEventConcerns(t *testing.T) {
	s := &metalv1alpha1.Server{Spec: metalv1alpha1.ServerSpec{SystemURI: "/redfish/v1/Systems/1"}}
	for origin, want := range map[string]bool{
		"/redfish/v1/Systems/1":                        true,
		"/redfish/v1/Systems/1/Memory/DIMM3":           true,
		"/redfish/v1/Systems/12":                       false,
		"/redfish/v1/Systems/2/Processors/CPU1":        false,
		"/redfish/v1/Chassis/1/Power#/PowerSupplies/1": true, // a chassis' PSU: every system in it
		"": true,
	} {
		ev := &bmc.Event{Events: []bmc.EventRecord{{Origin: origin}}}
		if got := concerns(ev, s); got != want {
			t.Errorf("origin %q: concerns = %v, want %v", origin, got, want)
		}
	}
}
