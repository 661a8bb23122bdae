package work

import (
	"testing"

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
