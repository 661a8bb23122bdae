package infrahub

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// Sentinel kinds. Every error returned by the client is an *Error whose Kind
// is one of these, so callers can use errors.Is and Reason alike.
var (
	ErrBadCredentials    = errors.New("bad credentials")
	ErrPermissionDenied  = errors.New("permission denied")
	ErrQueryNotFound     = errors.New("stored query not found")
	ErrQueryFailed       = errors.New("query failed")
	ErrArtifactNotFound  = errors.New("artifact not found")
	ErrBranchNotFound    = errors.New("branch not found")
	ErrTooLarge          = errors.New("response too large")
	ErrInvalidTargetDate = errors.New("invalid target date")
	ErrInvalidRequest    = errors.New("request rejected")
	ErrInvalidResponse   = errors.New("invalid response")
	ErrIncompleteResult  = errors.New("incomplete result")
	ErrUnavailable       = errors.New("unavailable")
	ErrTimeout           = errors.New("timeout")
	ErrTLS               = errors.New("TLS error")
	ErrInvalidConfig     = errors.New("invalid client configuration")
	ErrRedirectRefused   = errors.New("redirect to another origin refused")
	ErrCanceled          = errors.New("canceled")
)

// Reasons are stable, CamelCase strings meant for metav1.Condition.Reason.
const (
	ReasonAuthenticationFailed = "AuthenticationFailed"
	ReasonPermissionDenied     = "PermissionDenied"
	ReasonQueryNotFound        = "QueryNotFound"
	ReasonQueryFailed          = "QueryFailed"
	ReasonArtifactNotFound     = "ArtifactNotFound"
	ReasonBranchNotFound       = "BranchNotFound"
	ReasonArtifactTooLarge     = "ArtifactTooLarge"
	ReasonInvalidTargetDate    = "InvalidTargetDate"
	ReasonInvalidRequest       = "InvalidRequest"
	ReasonInvalidResponse      = "InvalidResponse"
	ReasonIncompleteResult     = "IncompleteResult" // = infrahubv1alpha1.ReasonIncompleteResult
	ReasonUnavailable          = "Unavailable"
	ReasonTimeout              = "Timeout"
	ReasonTLSError             = "TLSError"
	ReasonInvalidConfig        = "InvalidConfig"
	ReasonRedirectRefused      = "RedirectRefused"
	ReasonCanceled             = "Canceled"
	ReasonUnknown              = "Unknown"
)

var reasons = []struct {
	kind   error
	reason string
}{
	{ErrBadCredentials, ReasonAuthenticationFailed},
	{ErrPermissionDenied, ReasonPermissionDenied},
	{ErrQueryNotFound, ReasonQueryNotFound},
	{ErrQueryFailed, ReasonQueryFailed},
	{ErrArtifactNotFound, ReasonArtifactNotFound},
	{ErrBranchNotFound, ReasonBranchNotFound},
	{ErrTooLarge, ReasonArtifactTooLarge},
	{ErrInvalidTargetDate, ReasonInvalidTargetDate},
	{ErrInvalidRequest, ReasonInvalidRequest},
	{ErrInvalidResponse, ReasonInvalidResponse},
	{ErrIncompleteResult, ReasonIncompleteResult},
	{ErrUnavailable, ReasonUnavailable},
	{ErrTimeout, ReasonTimeout},
	{ErrTLS, ReasonTLSError},
	{ErrInvalidConfig, ReasonInvalidConfig},
	{ErrRedirectRefused, ReasonRedirectRefused},
	{ErrCanceled, ReasonCanceled},
}

// Error is what every client method returns on failure. It never carries a
// password, token or request body.
type Error struct {
	Op         string   // what was attempted, e.g. `query "ArtifactIDs"`
	Kind       error    // one of the Err* sentinels
	StatusCode int      // HTTP status, 0 when no response was received
	Messages   []string // messages reported by Infrahub (GraphQL errors)
	Err        error    // underlying cause, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("infrahub: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Kind.Error())
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.StatusCode)
	}
	if len(e.Messages) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(e.Messages, "; "))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap exposes both the kind and the cause to errors.Is/As.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Reason maps an error to a stable condition reason; "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		for _, r := range reasons {
			if e.Kind == r.kind {
				return r.reason
			}
		}
	}
	for _, r := range reasons {
		if errors.Is(err, r.kind) {
			return r.reason
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCanceled
	}
	return ReasonUnknown
}

// Messages returns the server-reported messages carried by err, if any.
func Messages(err error) []string {
	var e *Error
	if errors.As(err, &e) {
		return e.Messages
	}
	return nil
}

// transportError classifies a failure to get a response at all. parent is
// the caller's context: its cancellation is Canceled, while our own
// per-request deadline (or the caller's) is Timeout.
func transportError(op string, parent context.Context, err error) *Error {
	kind := ErrUnavailable
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verify           *tls.CertificateVerificationError
		record           tls.RecordHeaderError
	)
	switch {
	case parent.Err() != nil && errors.Is(parent.Err(), context.Canceled):
		kind = ErrCanceled
	case errors.Is(err, ErrRedirectRefused):
		kind = ErrRedirectRefused
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		kind = ErrTimeout
	case errors.As(err, &unknownAuthority), errors.As(err, &hostname), errors.As(err, &invalid),
		errors.As(err, &verify), errors.As(err, &record):
		kind = ErrTLS
	}
	return &Error{Op: op, Kind: kind, Err: err}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
