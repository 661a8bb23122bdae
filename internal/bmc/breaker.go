package bmc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// breaker is a conn's circuit breaker. A BMC that does not answer at the transport level
// (refused, reset, no answer within the request timeout) would cost every caller that much
// again; after one such failure the conn fails fast instead, for a window that doubles with
// every failure up to a cap and ends on the first answer. When a window ends a single probe
// (GET of the service root, which needs no session) goes out in the background: callers keep
// failing fast until it answers, so a dead BMC holds no caller's worker after the first
// failure. Any HTTP answer, 4xx and 5xx included, means the BMC is alive.
type breaker struct {
	mu sync.Mutex
	// failures counts transport failures since the last answer.
	failures int
	// openUntil is when the window ends (by opts.Now); zero while closed.
	openUntil time.Time
	// probing is set while the probe of an ended window is in flight; probeBy (by opts.Now) is
	// when its outcome is known at the latest.
	probing bool
	probeBy time.Time
	// answered and tripped are the wall times of the last answer and the last trip: a failure
	// of a request that began before either says nothing new about the BMC.
	answered, tripped time.Time
	cause             *Error
}

// backoff is the window after the n-th consecutive failure: min doubling up to max, with
// jitter in [d/2, d] so the servers of a rack that went down together are not probed in step.
func backoff(n int, minWait, maxWait time.Duration) time.Duration {
	d := minWait
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	return d/2 + rand.N(d/2+1)
}

// admit returns nil when a request to the BMC may go out, else the fast-fail error for op. The
// first caller after a window ended starts the probe.
func (c *conn) admit(op string) error {
	b := &c.brk
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() {
		return nil
	}
	now := c.opts.Now()
	if !b.probing && !now.Before(b.openUntil) && c.life.Err() == nil {
		b.probing, b.probeBy = true, now.Add(probeTimeout(c.opts))
		c.wg.Add(1)
		go c.probe()
	}
	at := b.openUntil
	if b.probing {
		// The probe may answer at once: come back after the first window, not the probe's
		// whole bound.
		at = b.probeBy
		if soon := now.Add(c.opts.UnreachableBackoff); soon.Before(at) {
			at = soon
		}
	}
	var last any = b.cause.Reason
	if b.cause.Err != nil {
		last = b.cause.Err
	}
	return &Error{Reason: b.cause.Reason, Op: op, RetryAt: at,
		Err: fmt.Errorf("BMC unreachable, not tried again before %s (last failure: %v)", at.UTC().Format(time.RFC3339), last)}
}

// settle records the outcome of one exchange that began at start (wall time): err nil is an
// answer. ctx is the caller's context.
func (c *conn) settle(ctx context.Context, start time.Time, err *Error) {
	if err != nil && !c.unanswered(ctx, start, err) {
		return
	}
	b := &c.brk
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.answered = time.Now()
		if !b.openUntil.IsZero() {
			c.log.Info("BMC answers again", "failures", b.failures)
			unreachable.WithLabelValues(c.base).Set(0)
		}
		b.failures, b.openUntil, b.cause = 0, time.Time{}, nil
		return
	}
	if !start.After(b.answered) || !start.After(b.tripped) {
		return
	}
	b.failures++
	wait := backoff(b.failures, c.opts.UnreachableBackoff, c.opts.MaxUnreachableBackoff)
	b.tripped, b.openUntil, b.cause = time.Now(), c.opts.Now().Add(wait), err
	unreachable.WithLabelValues(c.base).Set(1)
	c.log.Info("BMC unreachable, failing fast", "retryIn", wait.String(), "failures", b.failures, "error", err.Error())
}

// unanswered tells a transport failure (the BMC is not there) from everything else: an answer
// that is an error (TLS refused, garbage) comes from a live BMC, and a caller that gave up,
// or whose deadline left the request little time, says nothing about the BMC.
func (c *conn) unanswered(ctx context.Context, start time.Time, err *Error) bool {
	switch ctxErr := ctx.Err(); {
	case errors.Is(ctxErr, context.Canceled):
		return false
	case ctxErr != nil:
		// The caller's deadline came first. Controllers bound a pass by the request timeout,
		// so this is how a dead BMC looks to them; a request that got less than half of it
		// may have been the slow last step of a live BMC.
		return time.Since(start) >= c.opts.RequestTimeout/2
	}
	return err.Reason == ReasonTimeout || err.Reason == ReasonConnectionFailed
}

// probeTimeout bounds the probe: a free slot (held at most a request timeout by others), then
// its own request timeout.
func probeTimeout(o Options) time.Duration { return 2 * o.RequestTimeout }

// probe asks the service root whether the BMC is back, once per ended window.
func (c *conn) probe() {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.life, probeTimeout(c.opts))
	defer cancel()
	ctx = context.WithValue(context.WithValue(ctx, noAuthKey, true), probeKey, true)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/redfish/v1/", nil)
	if err == nil {
		if resp, serr := c.send(req, "", true); serr == nil {
			resp.Body.Close()
		}
	}
	c.brk.mu.Lock()
	c.brk.probing = false
	c.brk.mu.Unlock()
}

// RetryAt says when a BMC that is failing fast (errors.Is(err, ErrUnreachable)) is tried
// again; false for any other error.
func RetryAt(err error) (time.Time, bool) {
	var e *Error
	if errors.As(err, &e) && !e.RetryAt.IsZero() {
		return e.RetryAt, true
	}
	return time.Time{}, false
}
