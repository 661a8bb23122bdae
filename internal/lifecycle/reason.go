package lifecycle

import (
	"errors"
	"fmt"
)

// ReasonError is a failure that carries the condition reason it is reported with: what a user
// gave us is missing or wrong (a Secret, an Endpoint, a manifest). Controllers wrap such
// failures with WithReason or Reasonf and read the reason back with ReasonOf.
type ReasonError struct {
	Reason string
	Err    error
}

func (e *ReasonError) Error() string { return e.Err.Error() }
func (e *ReasonError) Unwrap() error { return e.Err }

// WithReason tags err with a condition reason (nil stays nil).
func WithReason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &ReasonError{Reason: reason, Err: err}
}

// Reasonf builds an error tagged with a condition reason.
func Reasonf(reason, format string, a ...any) error {
	return &ReasonError{Reason: reason, Err: fmt.Errorf(format, a...)}
}

// ReasonOf returns the reason err was tagged with, if any.
func ReasonOf(err error) (string, bool) {
	var re *ReasonError
	if errors.As(err, &re) {
		return re.Reason, true
	}
	return "", false
}
