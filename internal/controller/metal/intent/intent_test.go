package intent

import (
	"context"
	"fmt"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
)

// The operations a BMC and a server carry out, as their controllers tell Parse.
func bmcOperation(op string) bool { return op == metalv1alpha1.OperationGracefulRestartBMC }

func serverOperation(op string) bool {
	switch op {
	case metalv1alpha1.OperationHardRestartServer, metalv1alpha1.OperationPowerCycleServer, metalv1alpha1.OperationGracefulRestartServer,
		metalv1alpha1.OperationForceOffServer, metalv1alpha1.OperationForceOnServer:
		return true
	}
	return false
}

// An operation is issued again only when it certainly did not happen (never sent, or refused
// with a 4xx); a 5xx, like a timeout, may come after the BMC acted and leaves it uncertain.
func TestOperationOutcomeOfAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"accepted", nil, ActionDone},
		{"not sent: the breaker is open", fmt.Errorf("operation: %w", &bmc.Error{Reason: bmc.ReasonTimeout, RetryAt: time.Now().Add(time.Second)}), ActionNotDone},
		{"not sent: reading the system failed", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 500, NotSent: true}, ActionNotDone},
		{"BMC answered 409", &bmc.Error{Reason: bmc.ReasonRejected, StatusCode: 409}, ActionNotDone},
		{"BMC answered 412", &bmc.Error{Reason: bmc.ReasonRejected, StatusCode: 412}, ActionNotDone},
		{"BMC answered 401", &bmc.Error{Reason: bmc.ReasonAuthenticationFailed, StatusCode: 401}, ActionNotDone},
		{"BMC answered 400", &bmc.Error{Reason: bmc.ReasonUnsupported, StatusCode: 400}, ActionRefused},
		{"BMC answered 404", &bmc.Error{Reason: bmc.ReasonNotFound, StatusCode: 404}, ActionRefused},
		{"no such reset type, found before sending", &bmc.Error{Reason: bmc.ReasonUnsupported}, ActionRefused},
		{"BMC answered 500", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 500}, ActionUncertain},
		{"proxy answered 502", fmt.Errorf("operation: %w", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 502}), ActionUncertain},
		{"BMC or proxy answered 503", &bmc.Error{Reason: bmc.ReasonUnavailable, StatusCode: 503}, ActionUncertain},
		{"proxy answered 504", &bmc.Error{Reason: bmc.ReasonTimeout, StatusCode: 504}, ActionUncertain},
		{"BMC answered 501", &bmc.Error{Reason: bmc.ReasonUnsupported, StatusCode: 501}, ActionUncertain},
		{"sent, no answer in time", &bmc.Error{Reason: bmc.ReasonTimeout}, ActionUncertain},
		{"connection dropped", &bmc.Error{Reason: bmc.ReasonConnectionFailed}, ActionUncertain},
		{"canceled", context.Canceled, ActionUncertain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := OutcomeOf(tc.err); got != tc.want {
				t.Errorf("OutcomeOf = %d, want %d", got, tc.want)
			}
		})
	}
}

// The checking phase of a server operation settles it only from what is certain.
func TestOpIntentRoundTrip(t *testing.T) {
	at, sent := time.Unix(1796129242, 0), time.Unix(1796129250, 0)
	cases := []struct {
		in   string
		want Intent
		ok   bool
	}{
		{"graceful-restart-bmc/owed@1796129242", Intent{Op: "graceful-restart-bmc", Phase: Owed, At: at}, true},
		{"graceful-restart-bmc/issuing@1796129242 sent=1796129250 last-reset=2026-12-01T12:47:31+00:00",
			Intent{Op: "graceful-restart-bmc", Phase: Issuing, At: at, Sent: sent, LastReset: "2026-12-01T12:47:31+00:00"}, true},
		{"graceful-restart-bmc/checking@1796129242 sent=1796129250 last-reset=x",
			Intent{Op: "graceful-restart-bmc", Phase: Checking, At: at, Sent: sent, LastReset: "x"}, true},
		{"graceful-restart-bmc/done@1796129242", Intent{}, false},
		{"hard-restart-server/owed@1796129242", Intent{}, false}, // not a BMC operation
		{"graceful-restart-bmc/owed", Intent{}, false},
	}
	for _, tc := range cases {
		got, ok := Parse(tc.in, bmcOperation)
		if ok != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}

// A requester's token goes through every phase of the intent, and the outcome it learns is the
// one the report decided; results of earlier requesters are kept.
func TestOperationRequesterOutcome(t *testing.T) {
	i := Intent{Op: metalv1alpha1.OperationHardRestartServer, Phase: Issuing, At: time.Unix(100, 0), Sent: time.Unix(101, 0), By: "uid.20261202T100000"}
	got, ok := Parse(i.String(), serverOperation)
	if !ok || got != i {
		t.Fatalf("round trip %+v %v", got, ok)
	}
	for _, tc := range []struct {
		name string
		rep  Report
		want string
	}{
		{"carried out", Report{Reason: metalv1alpha1.ReasonOperation}, "old done,uid.20261202T100000 done"},
		{"uncertain", Report{Reason: metalv1alpha1.ReasonOperationUncertain}, "old done,uid.20261202T100000 uncertain"},
		{"refused", Report{Reason: metalv1alpha1.ReasonOperationFailed}, "old done,uid.20261202T100000 refused"},
		{"owed again: no result yet", Report{Reason: metalv1alpha1.ReasonOperationFailed, Next: i.With(Owed).String()}, "old done"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &metalv1alpha1.Server{}
			s.Annotations = map[string]string{ResultAnnotation: "old done"}
			End(s, i, tc.rep)
			if got := s.Annotations[ResultAnnotation]; got != tc.want {
				t.Errorf("result %q, want %q", got, tc.want)
			}
		})
	}
	if got := AppendResult("a done,b done,c done,d done", "e done"); got != "b done,c done,d done,e done" {
		t.Errorf("kept %q", got)
	}
}
