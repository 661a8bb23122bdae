package metal

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

func sortedReasons(t *testing.T, regarding string) string {
	got := eventReasons(t, regarding)
	slices.Sort(got)
	return fmt.Sprint(got)
}

// waitServerOperationDone waits until neither the operation annotation nor an intent is left.
func waitServerOperationDone(t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "server operation done", func() (bool, string) {
		s := suite.Server(env, name)
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
	t.Parallel()
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
			recs := suite.Since(fleet.BoxActions(b), start)
			if n := countResets(recs, "ForceRestart"); n != 1 || len(recs) != 1 {
				t.Errorf("BMC actions %v, want one ForceRestart", suite.ResetTypes(recs))
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
	t.Parallel()
	b := fleet.Take(t)
	b.SetReportsLastResetTime(true)
	name := fleet.RegisterBMC(t, b, "bmc500")
	suite.WaitServerState(t, env, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
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
	t.Parallel()
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
			if n := countResets(suite.Since(fleet.BoxActions(b), start), "ForceRestart"); n != tc.wantResets {
				t.Errorf("restarts: %d, want %d", n, tc.wantResets)
			}
			if got := sortedReasons(t, name); got != tc.wantReasons {
				t.Errorf("operation events %s, want %s", got, tc.wantReasons)
			}
		})
	}
}
