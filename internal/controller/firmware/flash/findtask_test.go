package flash

import (
	"slices"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
)

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
		rec  record.Record
		want string
	}{
		{"fetched: the newest for the image", record.Record{Image: "http://fw/bios-3.bin", At: claim.Unix()}, "/t/3"},
		{"fetched: not the previous attempt's", record.Record{Image: "http://fw/bios-3.bin", At: claim.Unix(), Task: "/t/3"}, "/t/2"},
		{"fetched: too old", record.Record{Image: "http://fw/bios-2.bin", At: claim.Unix()}, ""},
		{"fetched: none for the image", record.Record{Image: "http://fw/bios-9.bin", At: claim.Unix()}, ""},
		{"pushed: by start alone", record.Record{Image: "http://fw/bios-4.bin", At: claim.Unix(), Push: true}, "/t/4"},
		{"pushed: none since the claim", record.Record{Image: "http://fw/bios-4.bin", At: claim.Add(time.Hour).Unix(), Push: true}, ""},
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
	rec := record.Record{Image: "http://fw/bios-3.bin", At: claim.Unix()}
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
