package metal

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
)

// An operation is issued again only when it certainly did not happen (never sent, or refused
// with a 4xx); a 5xx, like a timeout, may come after the BMC acted and leaves it uncertain.
func TestOperationOutcomeOfAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want actionOutcome
	}{
		{"accepted", nil, actionDone},
		{"not sent: the breaker is open", fmt.Errorf("operation: %w", &bmc.Error{Reason: bmc.ReasonTimeout, RetryAt: time.Now().Add(time.Second)}), actionNotDone},
		{"not sent: reading the system failed", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 500, NotSent: true}, actionNotDone},
		{"BMC answered 409", &bmc.Error{Reason: bmc.ReasonRejected, StatusCode: 409}, actionNotDone},
		{"BMC answered 412", &bmc.Error{Reason: bmc.ReasonRejected, StatusCode: 412}, actionNotDone},
		{"BMC answered 401", &bmc.Error{Reason: bmc.ReasonAuthenticationFailed, StatusCode: 401}, actionNotDone},
		{"BMC answered 400", &bmc.Error{Reason: bmc.ReasonUnsupported, StatusCode: 400}, actionRefused},
		{"BMC answered 404", &bmc.Error{Reason: bmc.ReasonNotFound, StatusCode: 404}, actionRefused},
		{"no such reset type, found before sending", &bmc.Error{Reason: bmc.ReasonUnsupported}, actionRefused},
		{"BMC answered 500", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 500}, actionUncertain},
		{"proxy answered 502", fmt.Errorf("operation: %w", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 502}), actionUncertain},
		{"BMC or proxy answered 503", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 503}, actionUncertain},
		{"proxy answered 504", &bmc.Error{Reason: bmc.ReasonTimeout, StatusCode: 504}, actionUncertain},
		{"BMC answered 501", &bmc.Error{Reason: bmc.ReasonUnsupported, StatusCode: 501}, actionUncertain},
		{"sent, no answer in time", &bmc.Error{Reason: bmc.ReasonTimeout}, actionUncertain},
		{"connection dropped", &bmc.Error{Reason: bmc.ReasonConnectionFailed}, actionUncertain},
		{"canceled", context.Canceled, actionUncertain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcomeOf(tc.err); got != tc.want {
				t.Errorf("outcomeOf = %d, want %d", got, tc.want)
			}
		})
	}
}

func sortedReasons(t *testing.T, regarding string) string {
	got := eventReasons(t, regarding)
	slices.Sort(got)
	return fmt.Sprint(got)
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
