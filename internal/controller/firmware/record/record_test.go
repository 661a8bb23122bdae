package record

import (
	"reflect"
	"strings"
	"testing"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

func TestRemainingSteps(t *testing.T) {
	img := func(v string) systemv1alpha1.ImageSpec {
		return systemv1alpha1.ImageSpec{URI: "http://fw/bios-" + v + ".bin"}
	}
	path := []systemv1alpha1.VersionStep{{Version: "v2", Image: img("v2")}, {Version: "v3", Image: img("v3")}}
	for _, tc := range []struct {
		name    string
		path    []systemv1alpha1.VersionStep
		force   bool
		current string
		want    string
	}{
		{"no path, older", nil, false, "v1", "v5"},
		{"no path, there", nil, false, "v5", ""},
		{"no path, there, forced", nil, true, "v5", "v5"},
		{"path, before it", path, false, "v1", "v2 v3 v5"},
		{"path, on its first step", path, false, "v2", "v3 v5"},
		{"path, on its last step", path, false, "v3", "v5"},
		{"path, there", path, false, "v5", ""},
		{"path, unknown version", path, false, "v9", "v2 v3 v5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &systemv1alpha1.BIOSVersionTemplate{Version: "v5", Image: img("v5"), UpgradePath: tc.path}
			if tc.force {
				spec.UpdatePolicy = systemv1alpha1.UpdatePolicyForce
			}
			var got []string
			for _, s := range Remaining(spec, tc.current) {
				got = append(got, s.Version)
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("remaining from %s = %v, want %s", tc.current, got, tc.want)
			}
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := Record{Phase: PhaseTask, For: "P79 v1.46 (01/15/2018)", Version: "P79 v1.46 (01/15/2018)", Image: "http://x/b.bin", Attempt: 2, Failed: 1, At: 1796000000, Task: "/redfish/v1/TaskService/Tasks/3"}
	got, ok := Parse(r.String())
	if !ok || !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip: %+v %v", got, ok)
	}
	for _, bad := range []string{"", "{", `{"phase":"flying"}`, "owed"} {
		if _, ok := Parse(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Two steps asking for their restart within one second get different tokens.
func TestTokensDiffer(t *testing.T) {
	a := Record{Phase: PhaseReboot, Version: "cpu", Attempt: 1, At: 1796000000}
	b := a
	b.Version = "sriov"
	c := a
	c.Rerequested = 1
	if a.Token("u") == b.Token("u") || a.Token("u") == c.Token("u") || strings.ContainsAny(a.Token("u"), " ,") {
		t.Errorf("tokens %s %s %s", a.Token("u"), b.Token("u"), c.Token("u"))
	}
}

// The task of a claimed flash whose answer was lost: by image and start for one the BMC
// fetched, by start alone for a pushed one; never the previous attempt's.
