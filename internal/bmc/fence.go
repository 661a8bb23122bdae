package bmc

import (
	"context"
	"errors"
	"time"

	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// Fence is what a request must hold while it is sent: Hold fails once the caller may no longer
// act, or may not for as long as the request may run (until deadline; zero for a streamed upload,
// which is cut instead), and giving that right up waits for the holds to be released. expired is
// closed when the right could pass to another (the request is then cut): no request of the
// caller's outlives its right.
type Fence interface {
	Hold(deadline time.Time) (release func(), expired <-chan struct{}, err error)
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

// FenceOf is the fence requests under ctx hold, nil when none: for work that leaves the pass
// (an image pushed beside it) and must stay fenced.
func FenceOf(ctx context.Context) Fence {
	f, _ := ctx.Value(fenceKey).(Fence)
	return f
}

// hold takes ctx's fence, if any, for one request that may run until deadline; ctx ends when
// the right to act could pass.
func hold(ctx context.Context, op string, deadline time.Time) (context.Context, func(), error) {
	f, _ := ctx.Value(fenceKey).(Fence)
	if f == nil {
		return ctx, func() {}, nil
	}
	if wire.IsStream(ctx) {
		deadline = time.Time{}
	}
	release, expired, err := f.Hold(deadline)
	if err != nil {
		return nil, nil, &Error{Reason: ReasonFenced, Op: op, NotSent: true, Err: err}
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-expired:
		case <-cctx.Done():
		}
		cancel()
	}()
	return cctx, func() { cancel(); release() }, nil
}
