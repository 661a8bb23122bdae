package metal

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

func TestSettleServerOperation(t *testing.T) {
	const before, after = "2026-12-02T10:00:00Z", "2026-12-02T10:00:07Z"
	settle, powerBound := 30*time.Second, 5*time.Minute
	issued := func(op, lastReset, power string) intent.Intent {
		return intent.Intent{Op: op, Phase: intent.Checking, At: time.Unix(1796129242, 0), Sent: time.Unix(1796129243, 0), LastReset: lastReset, Power: power}
	}
	sys := func(power bmc.PowerState, lastReset string) *bmc.SystemStatus {
		return &bmc.SystemStatus{PowerState: power, LastResetTime: lastReset}
	}
	const (
		cycle, graceful = metalv1alpha1.OperationPowerCycleServer, metalv1alpha1.OperationGracefulRestartServer
		off, on         = metalv1alpha1.OperationForceOffServer, metalv1alpha1.OperationForceOnServer
	)
	for _, tc := range []struct {
		name    string
		i       intent.Intent
		now     *bmc.SystemStatus
		elapsed time.Duration
		want    settleVerdict
	}{
		{"restart: LastResetTime moved", issued(cycle, before, "On"), sys(bmc.PowerStateOn, after), time.Second, settleDone},
		{"restart: moved, still powering on", issued(cycle, before, "On"), sys(bmc.PowerStatePoweringOn, after), time.Second, settleDone},
		{"restart: unchanged, too early", issued(cycle, before, "On"), sys(bmc.PowerStateOn, before), 10 * time.Second, settleWait},
		{"restart: unchanged past the settle time, On", issued(cycle, before, "On"), sys(bmc.PowerStateOn, before), 31 * time.Second, settleOwed},
		{"restart: unchanged, in transition, within the power bound", issued(cycle, before, "On"), sys(bmc.PowerStatePoweringOff, before), time.Minute, settleWait},
		{"restart: unchanged, off past the power bound", issued(cycle, before, "On"), sys(bmc.PowerStateOff, before), 6 * time.Minute, settleUncertain},
		{"restart: the BMC stopped reporting", issued(cycle, before, "On"), sys(bmc.PowerStateOn, ""), time.Minute, settleUncertain},
		{"restart: never reported", issued(cycle, "", "On"), sys(bmc.PowerStateOn, ""), time.Minute, settleUncertain},
		{"graceful restart: unchanged past the settle time, the OS may still be shutting down", issued(graceful, before, "On"), sys(bmc.PowerStateOn, before), time.Minute, settleWait},
		{"graceful restart: unchanged past the power bound", issued(graceful, before, "On"), sys(bmc.PowerStateOn, before), 6 * time.Minute, settleOwed},
		{"force-off: was On, is Off", issued(off, "", "On"), sys(bmc.PowerStateOff, ""), time.Second, settleDone},
		{"force-off: was On, powering off", issued(off, before, "On"), sys(bmc.PowerStatePoweringOff, before), time.Second, settleDone},
		{"force-off: still On, within the power bound", issued(off, before, "On"), sys(bmc.PowerStateOn, before), time.Minute, settleWait},
		{"force-off: still On and LastResetTime unchanged past the power bound", issued(off, before, "On"), sys(bmc.PowerStateOn, before), 6 * time.Minute, settleOwed},
		{"force-off: still On, LastResetTime moved (off and on again?)", issued(off, before, "On"), sys(bmc.PowerStateOn, after), 6 * time.Minute, settleUncertain},
		{"force-off: still On, no LastResetTime", issued(off, "", "On"), sys(bmc.PowerStateOn, ""), 6 * time.Minute, settleUncertain},
		{"force-on: was Off, is On", issued(on, before, "Off"), sys(bmc.PowerStateOn, after), time.Second, settleDone},
		{"force-on: still Off and unchanged past the power bound", issued(on, before, "Off"), sys(bmc.PowerStateOff, before), 6 * time.Minute, settleOwed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := settleOperation(tc.i, tc.now, tc.elapsed, settle, powerBound); got != tc.want {
				t.Errorf("settleOperation = %d (%s), want %d", got, why, tc.want)
			}
		})
	}
}

func sortedReasons(t *testing.T, regarding string) string {
	got := eventReasons(t, regarding)
	slices.Sort(got)
	return fmt.Sprint(got)
}

// waitServerOperationDone waits until neither the operation annotation nor an intent is left.
func waitServerOperationDone(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "server operation done", func() (bool, string) {
		s := getServer(t, name)
		_, asked := s.Annotations[metalv1alpha1.OperationAnnotation]
		_, pending := s.Annotations[intent.Annotation]
		return !asked && !pending, fmt.Sprint(s.Annotations)
	})
}

// A power-cycle answered 500 by a BMC that carried it out (or by a proxy that lost its answer)
// is not issued again: the box is restarted once. Where the BMC reports the system's
// LastResetTime, its move says the restart happened; where it does not, the operation is
// reported uncertain and left alone.
func TestServerOperationAnswered500AfterItsEffectRunsOnce(t *testing.T) {
	for k, tc := range []struct {
		name        string
		reports     bool
		wantReasons string
	}{
		{"BMC reports LastResetTime", true, "[Operation OperationUncertain]"},
		{"BMC reports no LastResetTime", false, "[OperationUncertain]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, b, _ := claimedOn(t, "op500-"+strconv.Itoa(k))
			b.SetReportsSystemLastResetTime(tc.reports)
			b.SetFaults(redfish.Faults{ErrorAfterEffect: 500})
			defer b.ClearFaults()
			start := time.Now()
			annotate(t, name, metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationPowerCycleServer)
			waitServerOperationDone(t, name, 20*time.Second)
			want := strings.Fields(strings.Trim(tc.wantReasons, "[]"))
			waitEvent(t, name, want[0])
			b.ClearFaults()
			waitPower(t, name, metalv1alpha1.PowerStateOn, 15*time.Second)
			recs := since(records(b), start)
			if n := countResets(recs, "ForceRestart"); n != 1 || len(recs) != 1 {
				t.Errorf("BMC actions %v, want one ForceRestart", resetTypes(recs))
			}
			if got := sortedReasons(t, name); got != tc.wantReasons {
				t.Errorf("operation events %s, want %s", got, tc.wantReasons)
			}
		})
	}
}

// A graceful-restart-bmc answered 500 after the BMC reset itself is settled by the BMC's
// LastResetTime, which moved: one reset, not a second.
func TestBMCResetAnswered500AfterItsEffectRunsOnce(t *testing.T) {
	b := takeBMC(t)
	b.SetReportsLastResetTime(true)
	name := registerBMC(t, b, "bmc500")
	waitState(t, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	waitBMCReady(t, "bmc500", "True/"+metalv1alpha1.ReasonConnected)
	b.SetFaults(redfish.Faults{ErrorAfterEffect: 500})
	defer b.ClearFaults()
	start := time.Now()
	annotateBMC(t, "bmc500", metalv1alpha1.OperationAnnotation, metalv1alpha1.OperationGracefulRestartBMC)
	waitBMCOperationDone(t, "bmc500", 30*time.Second)
	waitEvent(t, "bmc500", metalv1alpha1.ReasonOperation)
	if n := managerResets(b, start); n != 1 {
		t.Errorf("BMC resets: %d, want 1", n)
	}
	if got := sortedReasons(t, "bmc500"); got != "[Operation OperationUncertain]" {
		t.Errorf("operation events %s, want [Operation OperationUncertain]", got)
	}
}

// A server operation left "issuing" by a manager that died is settled by the system's
// LastResetTime, compared with what it said before: moved, it was carried out and is not
// repeated; unchanged past the settle time, it never arrived and is issued once more.
func TestServerOperationLeftIssuingByACrashIsSettledByLastResetTime(t *testing.T) {
	for k, tc := range []struct {
		name        string
		baseline    func(now time.Time) string // the LastResetTime before the issue; now is the system's
		wantResets  int
		wantReasons string
	}{
		{"restart never arrived", func(now time.Time) string { return now.UTC().Format(time.RFC3339) }, 1,
			"[Operation OperationFailed OperationUncertain]"},
		{"restart carried out", func(now time.Time) string { return now.Add(-time.Hour).UTC().Format(time.RFC3339) }, 0,
			"[Operation OperationUncertain]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, b, _ := claimedOn(t, "opcrash-"+strconv.Itoa(k))
			b.SetReportsSystemLastResetTime(true)
			start := time.Now()
			// What a manager killed while issuing leaves behind; this one never issued it.
			crashed := intent.Intent{Op: metalv1alpha1.OperationHardRestartServer, Phase: intent.Issuing,
				At: start.Add(-time.Second), Sent: start, LastReset: tc.baseline(systemOf(b).LastResetTime()), Power: "On"}
			annotate(t, name, intent.Annotation, crashed.String())
			waitServerOperationDone(t, name, 30*time.Second)
			waitEvent(t, name, metalv1alpha1.ReasonOperation)
			waitPower(t, name, metalv1alpha1.PowerStateOn, 15*time.Second)
			if n := countResets(since(records(b), start), "ForceRestart"); n != tc.wantResets {
				t.Errorf("restarts: %d, want %d", n, tc.wantResets)
			}
			if got := sortedReasons(t, name); got != tc.wantReasons {
				t.Errorf("operation events %s, want %s", got, tc.wantReasons)
			}
		})
	}
}
