package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/stmcginnis/gofish/schemas"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Reason
	}{
		{schemas.ConstructError(401, nil), ReasonAuthenticationFailed},
		{schemas.ConstructError(403, nil), ReasonAuthenticationFailed},
		{schemas.ConstructError(404, nil), ReasonNotFound},
		{schemas.ConstructError(400, nil), ReasonUnsupported},
		{schemas.ConstructError(405, nil), ReasonUnsupported},
		{schemas.ConstructError(501, nil), ReasonUnsupported},
		{schemas.ConstructError(500, nil), ReasonUnavailable},
		{schemas.ConstructError(503, nil), ReasonUnavailable},
		{schemas.ConstructError(412, nil), ReasonRejected},
		{schemas.ConstructError(409, nil), ReasonRejected},
		{&schemas.CollectionError{Failures: map[string]error{"/x": schemas.ConstructError(404, nil)}}, ReasonNotFound},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), ReasonTimeout},
		{context.Canceled, ReasonCanceled},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, ReasonConnectionFailed},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), ReasonConnectionFailed},
		{errors.New("mystery"), ReasonUnknown},
		{nil, ""},
	} {
		if got := ReasonOf(tc.err); got != tc.want {
			t.Errorf("%v: got %q, want %q", tc.err, got, tc.want)
		}
	}
	// An *Error keeps its reason through wrapping and extra context.
	e := Wrap("outer", fmt.Errorf("ctx: %w", &Error{Reason: ReasonTimeout, Op: "inner"}))
	if !errors.Is(e, ErrTimeout) || errors.Is(e, ErrNotFound) || ReasonOf(e) != ReasonTimeout {
		t.Errorf("wrapped: %v", e)
	}
}
