package wire

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/stmcginnis/gofish/schemas"
)

// Reason is a stable, CamelCase classification of a BMC failure. Controllers
// copy it into condition reasons, so the values must never change.
type Reason string

const (
	// ReasonAuthenticationFailed: the BMC rejected the credentials (401/403).
	ReasonAuthenticationFailed Reason = "AuthenticationFailed"
	// ReasonConnectionFailed: the BMC could not be reached or dropped the
	// connection (refused, reset, EOF, DNS).
	ReasonConnectionFailed Reason = "ConnectionFailed"
	// ReasonUnavailable: the BMC answered with a server error (5xx other than 501).
	ReasonUnavailable Reason = "Unavailable"
	// ReasonTimeout: no complete answer within the request timeout or the
	// caller's deadline.
	ReasonTimeout Reason = "Timeout"
	// ReasonNotFound: the resource (system, collection) does not exist (404).
	ReasonNotFound Reason = "NotFound"
	// ReasonUnsupported: the BMC does not support the request (400/405/501, or a
	// reset type / boot target it does not advertise).
	ReasonUnsupported Reason = "Unsupported"
	// ReasonTLSVerificationFailed: the BMC certificate could not be verified.
	ReasonTLSVerificationFailed Reason = "TLSVerificationFailed"
	// ReasonRejected: any other 4xx (409 conflict, 412 precondition, ...).
	ReasonRejected Reason = "Rejected"
	// ReasonCanceled: the caller's context was canceled.
	ReasonCanceled Reason = "Canceled"
	// ReasonInvalidConfig: the target (address, CA bundle, system ID) is invalid
	// before any request is made.
	ReasonInvalidConfig Reason = "InvalidConfig"
	// ReasonUnknown: anything not classified above.
	ReasonUnknown Reason = "Unknown"
	// ReasonFenced: the request was not sent because the caller no longer holds the right to act
	// on this BMC (its shard moved to another replica). Not a failure of the BMC.
	ReasonFenced Reason = "Fenced"
)

// Sentinels let callers write errors.Is(err, wire.ErrTimeout).
var (
	ErrAuthenticationFailed  = errors.New(string(ReasonAuthenticationFailed))
	ErrConnectionFailed      = errors.New(string(ReasonConnectionFailed))
	ErrUnavailable           = errors.New(string(ReasonUnavailable))
	ErrTimeout               = errors.New(string(ReasonTimeout))
	ErrNotFound              = errors.New(string(ReasonNotFound))
	ErrUnsupported           = errors.New(string(ReasonUnsupported))
	ErrTLSVerificationFailed = errors.New(string(ReasonTLSVerificationFailed))
	ErrRejected              = errors.New(string(ReasonRejected))
	ErrCanceled              = errors.New(string(ReasonCanceled))
	ErrInvalidConfig         = errors.New(string(ReasonInvalidConfig))
	// ErrUnreachable matches a request that was not sent because the BMC failed at the
	// transport level a moment ago (see Error.RetryAt); its Reason is that failure's.
	ErrUnreachable = errors.New("Unreachable")
	// ErrNotSent matches an action (a reset) whose request was never sent: what failed came
	// before it, such as reading the resource it acts on. Unlike a timeout after the request,
	// it says for certain that the action did not happen.
	ErrNotSent = errors.New("NotSent")
)

var sentinels = map[Reason]error{
	ReasonAuthenticationFailed:  ErrAuthenticationFailed,
	ReasonConnectionFailed:      ErrConnectionFailed,
	ReasonUnavailable:           ErrUnavailable,
	ReasonTimeout:               ErrTimeout,
	ReasonNotFound:              ErrNotFound,
	ReasonUnsupported:           ErrUnsupported,
	ReasonTLSVerificationFailed: ErrTLSVerificationFailed,
	ReasonRejected:              ErrRejected,
	ReasonCanceled:              ErrCanceled,
	ReasonInvalidConfig:         ErrInvalidConfig,
}

// Error is the typed error every BMC operation returns. Use errors.As to get
// it, errors.Is with the Err* sentinels, or ReasonOf for a condition reason.
type Error struct {
	// Reason classifies the failure.
	Reason Reason
	// Op says what was attempted, e.g. "power on System.Embedded.1".
	Op string
	// StatusCode is the HTTP status when the BMC answered, else 0.
	StatusCode int
	// Err is the underlying cause.
	Err error
	// RetryAt is set when the request was not sent because the BMC is unreachable: it is not
	// tried again before then. See RetryAt and ErrUnreachable.
	RetryAt time.Time
	// NotSent is set when an action's request was not sent (see ErrNotSent).
	NotSent bool
}

func (e *Error) Error() string {
	var inner *Error
	if errors.As(e.Err, &inner) {
		// The innermost *Error prints the reason; say it once.
		return e.Op + ": " + e.Err.Error()
	}
	msg := fmt.Sprintf("%s: %s", e.Op, e.Reason)
	if e.StatusCode != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Fenced reports whether e is a request refused by its fence (for callers that match on the
// method and need not import this package).
func (e *Error) Fenced() bool { return e.Reason == ReasonFenced }

// Is makes errors.Is(err, ErrTimeout) and friends work.
func (e *Error) Is(target error) bool {
	if target == ErrUnreachable {
		return !e.RetryAt.IsZero()
	}
	if target == ErrNotSent {
		return e.NotSent || !e.RetryAt.IsZero()
	}
	s, ok := sentinels[e.Reason]
	return ok && s == target
}

// ReasonOf returns the stable reason for err; "" for nil.
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return Classify("", err).Reason
}

// ReasonString is ReasonOf as a plain string, handy for condition reasons.
func ReasonString(err error) string { return string(ReasonOf(err)) }

func New(reason Reason, op string, format string, args ...any) *Error {
	return &Error{Reason: reason, Op: op, Err: fmt.Errorf(format, args...)}
}

// Wrap classifies err (if it is not already an *Error) and adds op as context.
func Wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		// Keep the original classification; prefix the operation for context.
		if op == "" || op == e.Op {
			return err
		}
		var ue *url.Error
		if errors.As(err, &ue) && ue.Err == e {
			// net/http's `Get "url":` only repeats what e.Op says.
			err = e
		}
		return &Error{Reason: e.Reason, Op: op, StatusCode: e.StatusCode, RetryAt: e.RetryAt, NotSent: e.NotSent, Err: err}
	}
	return Classify(op, err)
}

// NotSent wraps a failure that came before an action's request: the action did not happen.
func NotSent(op string, err error) error {
	if err == nil {
		return nil
	}
	w := Wrap(op, err)
	var e *Error
	if errors.As(w, &e) {
		c := *e
		c.NotSent = true
		return &c
	}
	return w
}

// Classify maps a raw error from gofish / net/http to an *Error.
func Classify(op string, err error) *Error {
	var typed *Error
	if errors.As(err, &typed) {
		// Ours already, e.g. inside a *url.Error or a collection member's failure.
		return &Error{Reason: typed.Reason, Op: op, StatusCode: typed.StatusCode, RetryAt: typed.RetryAt, NotSent: typed.NotSent, Err: err}
	}
	e := &Error{Reason: ReasonUnknown, Op: op, Err: err}
	// A connection that was never made carried no request.
	var dialErr *net.OpError
	e.NotSent = errors.As(err, &dialErr) && dialErr.Op == "dial"

	var collErr *schemas.CollectionError
	if errors.As(err, &collErr) {
		// gofish aggregates member failures without Unwrap: classify by the
		// first failure so a broken collection still gets a useful reason.
		for _, f := range collErr.Failures {
			inner := Classify(op, f)
			e.Reason, e.StatusCode, e.RetryAt = inner.Reason, inner.StatusCode, inner.RetryAt
			break
		}
		return e
	}

	var rfErr *schemas.Error
	if errors.As(err, &rfErr) && rfErr.HTTPReturnedStatusCode != 0 {
		e.StatusCode = rfErr.HTTPReturnedStatusCode
		e.Reason = reasonForStatus(e.StatusCode)
		return e
	}

	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		e.Reason = ReasonCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrTimeout):
		e.Reason = ReasonTimeout
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		e.Reason = ReasonTLSVerificationFailed
	case errors.As(err, &netErr) && netErr.Timeout():
		e.Reason = ReasonTimeout
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		e.Reason = ReasonConnectionFailed
	default:
		var opErr *net.OpError
		var dnsErr *net.DNSError
		if errors.As(err, &opErr) || errors.As(err, &dnsErr) {
			e.Reason = ReasonConnectionFailed
		}
	}
	return e
}

func reasonForStatus(code int) Reason {
	switch {
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return ReasonAuthenticationFailed
	case code == http.StatusNotFound, code == http.StatusGone:
		return ReasonNotFound
	case code == http.StatusBadRequest, code == http.StatusMethodNotAllowed, code == http.StatusNotImplemented:
		return ReasonUnsupported
	case code == http.StatusRequestTimeout, code == http.StatusGatewayTimeout:
		return ReasonTimeout
	case code >= 500:
		return ReasonUnavailable
	case code >= 400:
		return ReasonRejected
	}
	return ReasonUnknown
}

// StatusError builds an *Error for a non-success HTTP answer seen outside gofish.
func StatusError(op string, code int, body []byte) *Error {
	if len(body) > 512 {
		body = body[:512]
	}
	return &Error{Reason: reasonForStatus(code), Op: op, StatusCode: code, Err: fmt.Errorf("%s", body)}
}

// redacted is an error whose text had a secret taken out. It unwraps to its classification
// alone (an *Error without a cause), so that nothing below it can print the secret again.
type redacted struct {
	msg string
	cls *Error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.cls }

// Redact returns err with secret taken out of its text, keeping its classification (reason,
// status, retry time) for errors.Is, errors.As and ReasonOf.
func Redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), secret, "[redacted]")
	var e *Error
	if !errors.As(err, &e) {
		e = Classify("", err)
	}
	return &redacted{msg: msg, cls: &Error{Reason: e.Reason, Op: e.Op, StatusCode: e.StatusCode, RetryAt: e.RetryAt, NotSent: e.NotSent}}
}
