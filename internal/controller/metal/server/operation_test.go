package server

import (
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/intent"
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
