package work

import (
	"context"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
)

func TestOperationStateMatchesWholeTokens(t *testing.T) {
	intent := map[string]string{"lifecycle.metalhub.io/operation": "hard-restart-server/issuing@100 sent=101 by=u.20261202T100000.ab.1.12"}
	if _, pending := OperationState(intent, "u.20261202T100000.ab.1.1"); pending {
		t.Error("a token's prefix matched")
	}
	if _, pending := OperationState(intent, "u.20261202T100000.ab.1.12"); !pending {
		t.Error("the token itself did not match")
	}
	res := map[string]string{"lifecycle.metalhub.io/operation-result": "u.x.1.12 done"}
	if out, _ := OperationState(res, "u.x.1.1"); out != "" {
		t.Errorf("a prefix's result %q", out)
	}
}

// A restart of unknown outcome is asked again only on evidence that it did not happen: a
// LastResetTime that has not moved, or a system still off after it was asked to come on.
func TestRestartMissed(t *testing.T) {
	on, off := bmc.PowerStateOn, bmc.PowerStateOff
	for _, tc := range []struct {
		name   string
		rec    record.Record
		sys    bmc.SystemStatus
		missed bool
	}{
		{"LastResetTime unchanged", record.Record{ResetBefore: "2026-12-04T10:00:00Z", PowerBefore: string(on)}, bmc.SystemStatus{LastResetTime: "2026-12-04T10:00:00Z", PowerState: on}, true},
		{"LastResetTime moved", record.Record{ResetBefore: "2026-12-04T10:00:00Z", PowerBefore: string(on)}, bmc.SystemStatus{LastResetTime: "2026-12-04T10:05:00Z", PowerState: on}, false},
		{"no LastResetTime, on as before", record.Record{ResetBefore: noResetTime, PowerBefore: string(on)}, bmc.SystemStatus{PowerState: on}, false},
		{"no LastResetTime, still off after force-on", record.Record{ResetBefore: noResetTime, PowerBefore: string(off)}, bmc.SystemStatus{PowerState: off}, true},
		{"off before, on now", record.Record{ResetBefore: noResetTime, PowerBefore: string(off)}, bmc.SystemStatus{PowerState: on}, false},
		{"nothing recorded", record.Record{}, bmc.SystemStatus{PowerState: off}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := restartMissed(tc.rec, &tc.sys); (got != "") != tc.missed {
				t.Errorf("restartMissed = %q, want missed %v", got, tc.missed)
			}
		})
	}
}

// The owner's restart of a settings-only server comes when it comes: verify neither asks for a
// restart again nor fails the step, however long ago the settings were staged. An uncertain
// restart of ours past the timeout is late.
func TestRebootAgainNeverTimesOutTheOwner(t *testing.T) {
	staged := time.Unix(1796000000, 0)
	a := &Actor{Options: Options{VerifyTimeout: time.Minute}, Now: func() time.Time { return staged.Add(30 * 24 * time.Hour) }}
	for _, tc := range []struct {
		restart string
		late    bool
	}{{restartOwner, false}, {restartDone, true}} {
		w := &Work{Rec: record.Record{Phase: record.PhaseVerify, At: staged.Unix(), Restart: tc.restart}, HasRec: true,
			Sys: &bmc.SystemStatus{PowerState: bmc.PowerStateOn}}
		_, err, again, late := a.RebootAgain(context.Background(), w, "step cpu is not in effect")
		if err != nil || again || late != tc.late {
			t.Errorf("restart %q: again %v, late %v (want %v), err %v", tc.restart, again, late, tc.late, err)
		}
		if got := w.AwaitingOwner(); got != (tc.restart == restartOwner) {
			t.Errorf("restart %q: AwaitingOwner %v", tc.restart, got)
		}
	}
}
