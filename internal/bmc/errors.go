package bmc

import "github.com/metalhub/metalhub/internal/bmc/wire"

// The typed error lives in package wire, which the service packages share; these names keep
// it where callers have always found it.

// Reason is a stable, CamelCase classification of a BMC failure. Controllers
// copy it into condition reasons, so the values must never change.
type Reason = wire.Reason

// Error is the typed error every BMC operation returns. Use errors.As to get
// it, errors.Is with the Err* sentinels, or ReasonOf for a condition reason.
type Error = wire.Error

// The reasons; see package wire for what each means.
const (
	ReasonAuthenticationFailed  = wire.ReasonAuthenticationFailed
	ReasonConnectionFailed      = wire.ReasonConnectionFailed
	ReasonUnavailable           = wire.ReasonUnavailable
	ReasonTimeout               = wire.ReasonTimeout
	ReasonNotFound              = wire.ReasonNotFound
	ReasonUnsupported           = wire.ReasonUnsupported
	ReasonTLSVerificationFailed = wire.ReasonTLSVerificationFailed
	ReasonRejected              = wire.ReasonRejected
	ReasonCanceled              = wire.ReasonCanceled
	ReasonInvalidConfig         = wire.ReasonInvalidConfig
	ReasonUnknown               = wire.ReasonUnknown
	ReasonFenced                = wire.ReasonFenced
)

// Sentinels let callers write errors.Is(err, bmc.ErrTimeout).
var (
	ErrAuthenticationFailed  = wire.ErrAuthenticationFailed
	ErrConnectionFailed      = wire.ErrConnectionFailed
	ErrUnavailable           = wire.ErrUnavailable
	ErrTimeout               = wire.ErrTimeout
	ErrNotFound              = wire.ErrNotFound
	ErrUnsupported           = wire.ErrUnsupported
	ErrTLSVerificationFailed = wire.ErrTLSVerificationFailed
	ErrRejected              = wire.ErrRejected
	ErrCanceled              = wire.ErrCanceled
	ErrInvalidConfig         = wire.ErrInvalidConfig
	ErrUnreachable           = wire.ErrUnreachable
	ErrNotSent               = wire.ErrNotSent
)

// ReasonOf returns the stable reason for err; "" for nil.
func ReasonOf(err error) Reason { return wire.ReasonOf(err) }

// ReasonString is ReasonOf as a plain string, handy for condition reasons.
func ReasonString(err error) string { return wire.ReasonString(err) }
