package bmc

import (
	"context"
	"errors"
)

// ReasonFenced: the request was not sent because the caller no longer holds the right to act on
// this BMC (its shard moved to another replica). Not a failure of the BMC.
const ReasonFenced Reason = "Fenced"

// Fence is what a request must hold while it is sent: Hold fails once the caller may no longer
// act, and giving that right up waits for the holds to be released.
type Fence interface {
	Hold() (release func(), err error)
}

const fenceKey ctxKey = 4

// WithFence makes every request sent under ctx hold f: a request that cannot is not sent
// (ReasonFenced).
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey, f)
}

// IsFenced reports whether err is a request refused by its fence.
func IsFenced(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == ReasonFenced
}

// hold takes ctx's fence, if any, for one request.
func hold(ctx context.Context, op string) (func(), error) {
	f, _ := ctx.Value(fenceKey).(Fence)
	if f == nil {
		return func() {}, nil
	}
	release, err := f.Hold()
	if err != nil {
		return nil, &Error{Reason: ReasonFenced, Op: op, NotSent: true, Err: err}
	}
	return release, nil
}
