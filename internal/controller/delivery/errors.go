package delivery

import (
	"errors"
	"fmt"

	"github.com/metalhub/metalhub/internal/infrahub"
)

// reasonError carries the condition reason of a failure that is not an Infrahub client error
// (those carry their own kind, read by infrahub.Reason).
type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

// withReason tags err with a condition reason.
func withReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &reasonError{reason: reason, err: err}
}

// reasonf builds a tagged error.
func reasonf(reason, format string, a ...any) error {
	return &reasonError{reason: reason, err: fmt.Errorf(format, a...)}
}

// reasonOf returns the condition reason of err: our own tag first, then the Infrahub client's.
func reasonOf(err error) string {
	var re *reasonError
	if errors.As(err, &re) {
		return re.reason
	}
	return infrahub.Reason(err)
}
