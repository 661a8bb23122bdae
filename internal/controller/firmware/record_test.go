package firmware

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
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
func TestFindTask(t *testing.T) {
	claim := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return claim.Add(d).Format(time.RFC3339) }
	tasks := []bmc.TaskStatus{
		{URI: "/t/1", Image: "http://fw/bios-2.bin", StartTime: at(-time.Hour)},
		{URI: "/t/2", Image: "http://fw/bios-3.bin", StartTime: at(-30 * time.Second)},
		{URI: "/t/3", Image: "http://fw/bios-3.bin", StartTime: at(2 * time.Second)},
		{URI: "/t/4", Image: "metalhub-image-1-bios-4.bin", StartTime: at(time.Second)},
	}
	for _, tc := range []struct {
		name string
		rec  Record
		want string
	}{
		{"fetched: the newest for the image", Record{Image: "http://fw/bios-3.bin", At: claim.Unix()}, "/t/3"},
		{"fetched: not the previous attempt's", Record{Image: "http://fw/bios-3.bin", At: claim.Unix(), Task: "/t/3"}, "/t/2"},
		{"fetched: too old", Record{Image: "http://fw/bios-2.bin", At: claim.Unix()}, ""},
		{"fetched: none for the image", Record{Image: "http://fw/bios-9.bin", At: claim.Unix()}, ""},
		{"pushed: by start alone", Record{Image: "http://fw/bios-4.bin", At: claim.Unix(), Push: true}, "/t/4"},
		{"pushed: none since the claim", Record{Image: "http://fw/bios-4.bin", At: claim.Add(time.Hour).Unix(), Push: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The BMC's order is its own: oldest first, newest first, the same answer.
			for _, list := range [][]bmc.TaskStatus{tasks, reversed(tasks)} {
				got := ""
				task, uncertain := findTask(list, tc.rec)
				if task != nil {
					got = task.URI
				}
				if got != tc.want || uncertain {
					t.Errorf("findTask = %q (uncertain %v), want %q", got, uncertain, tc.want)
				}
			}
		})
	}
}

// Tasks without a payload (many vendors') name no image: one that started after the claim cannot
// be ruled out, so it is the flash's, uncertainly; a task for the image still wins.
func TestFindTaskWithoutPayload(t *testing.T) {
	claim := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return claim.Add(d).Format(time.RFC3339) }
	old := bmc.TaskStatus{URI: "/t/old", StartTime: at(-time.Hour)}
	anon := bmc.TaskStatus{URI: "/t/anon", StartTime: at(3 * time.Second)}
	anonNewer := bmc.TaskStatus{URI: "/t/anon2", StartTime: at(9 * time.Second)}
	noStart := bmc.TaskStatus{URI: "/t/nostart", Image: "http://fw/other.bin"}
	mine := bmc.TaskStatus{URI: "/t/mine", Image: "http://fw/bios-3.bin", StartTime: at(time.Second)}
	rec := Record{Image: "http://fw/bios-3.bin", At: claim.Unix()}
	for _, tc := range []struct {
		name      string
		tasks     []bmc.TaskStatus
		want      string
		uncertain bool
	}{
		{"only old tasks: ruled out", []bmc.TaskStatus{old}, "", false},
		{"one without payload since the claim", []bmc.TaskStatus{old, anon}, "/t/anon", true},
		{"the newest of those", []bmc.TaskStatus{anonNewer, old, anon}, "/t/anon2", true},
		{"no start time: cannot be ruled out", []bmc.TaskStatus{old, noStart}, "/t/nostart", true},
		{"the image's own task wins", []bmc.TaskStatus{anonNewer, mine, anon}, "/t/mine", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, list := range [][]bmc.TaskStatus{tc.tasks, reversed(tc.tasks)} {
				got := ""
				task, uncertain := findTask(list, rec)
				if task != nil {
					got = task.URI
				}
				if got != tc.want || uncertain != tc.uncertain {
					t.Errorf("findTask = %q (uncertain %v), want %q (uncertain %v)", got, uncertain, tc.want, tc.uncertain)
				}
			}
		})
	}
}

func reversed(in []bmc.TaskStatus) []bmc.TaskStatus {
	out := slices.Clone(in)
	slices.Reverse(out)
	return out
}

func TestTaskLook(t *testing.T) {
	poll := 10 * time.Second
	for _, tc := range []struct{ retryAfter, want time.Duration }{
		{0, poll}, {time.Second, poll}, {30 * time.Second, 30 * time.Second}, {time.Hour, 100 * time.Second},
	} {
		if got := taskLook(tc.retryAfter, poll); got != tc.want {
			t.Errorf("taskLook(%s) = %s, want %s", tc.retryAfter, got, tc.want)
		}
	}
}

// A pending request is recognised by its whole token, not by another that starts like it.
func TestOperationStateMatchesWholeTokens(t *testing.T) {
	intent := map[string]string{"lifecycle.metalhub.io/operation": "hard-restart-server/issuing@100 sent=101 by=u.20261202T100000.ab.1.12"}
	if _, pending := operationState(intent, "u.20261202T100000.ab.1.1"); pending {
		t.Error("a token's prefix matched")
	}
	if _, pending := operationState(intent, "u.20261202T100000.ab.1.12"); !pending {
		t.Error("the token itself did not match")
	}
	res := map[string]string{"lifecycle.metalhub.io/operation-result": "u.x.1.12 done"}
	if out, _ := operationState(res, "u.x.1.1"); out != "" {
		t.Errorf("a prefix's result %q", out)
	}
}

// A restart of unknown outcome is asked again only on evidence that it did not happen: a
// LastResetTime that has not moved, or a system still off after it was asked to come on.
func TestRestartMissed(t *testing.T) {
	on, off := bmc.PowerStateOn, bmc.PowerStateOff
	for _, tc := range []struct {
		name   string
		rec    Record
		sys    bmc.SystemStatus
		missed bool
	}{
		{"LastResetTime unchanged", Record{ResetBefore: "2026-12-04T10:00:00Z", PowerBefore: string(on)}, bmc.SystemStatus{LastResetTime: "2026-12-04T10:00:00Z", PowerState: on}, true},
		{"LastResetTime moved", Record{ResetBefore: "2026-12-04T10:00:00Z", PowerBefore: string(on)}, bmc.SystemStatus{LastResetTime: "2026-12-04T10:05:00Z", PowerState: on}, false},
		{"no LastResetTime, on as before", Record{ResetBefore: noResetTime, PowerBefore: string(on)}, bmc.SystemStatus{PowerState: on}, false},
		{"no LastResetTime, still off after force-on", Record{ResetBefore: noResetTime, PowerBefore: string(off)}, bmc.SystemStatus{PowerState: off}, true},
		{"off before, on now", Record{ResetBefore: noResetTime, PowerBefore: string(off)}, bmc.SystemStatus{PowerState: on}, false},
		{"nothing recorded", Record{}, bmc.SystemStatus{PowerState: off}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := restartMissed(tc.rec, &tc.sys); (got != "") != tc.missed {
				t.Errorf("restartMissed = %q, want missed %v", got, tc.missed)
			}
		})
	}
}
