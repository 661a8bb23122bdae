package metal

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/metalhub/metalhub/internal/bmc"
)

// An operation is issued again only when it certainly did not happen; otherwise it is reported
// uncertain, never repeated.
func TestOperationRetryableOnlyWhenNotCarriedOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"BMC answered 503", &bmc.Error{Reason: bmc.ReasonUnavailable}, true},
		{"BMC answered 409", &bmc.Error{Reason: bmc.ReasonRejected}, true},
		{"not sent: the breaker is open", fmt.Errorf("operation: %w", &bmc.Error{Reason: bmc.ReasonTimeout, RetryAt: time.Now().Add(time.Second)}), true},
		{"sent, no answer in time", &bmc.Error{Reason: bmc.ReasonTimeout}, false},
		{"connection dropped", &bmc.Error{Reason: bmc.ReasonConnectionFailed}, false},
		{"canceled", context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryable(tc.err); got != tc.want {
				t.Errorf("retryable = %t, want %t", got, tc.want)
			}
		})
	}
}
