package delivery

import (
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// A failure that is not an Infrahub client error (those carry their own kind, read by
// infrahub.Reason) carries its condition reason as a lifecycle.ReasonError (lifecycle.Reasonf,
// lifecycle.WithReason).

// reasonOf returns the condition reason of err: our own tag first, then the Infrahub client's.
func reasonOf(err error) string {
	if reason, ok := lifecycle.ReasonOf(err); ok {
		return reason
	}
	return infrahub.Reason(err)
}
