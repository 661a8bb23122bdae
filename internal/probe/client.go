package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// Answer is the registry's reply to an accepted report.
type Answer struct {
	// Done means the registry holds this round's report; the agent can stop.
	Done bool `json:"done"`
}

// StatusError is a non-200 answer from the registry.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("registry answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// Retryable reports whether the same report may succeed later: server-side trouble, throttling,
// or a server or round that does not exist yet (the controller may still be starting the round,
// or the registry's cache may be behind). 400 and 413 will not change by waiting.
func (e *StatusError) Retryable() bool {
	switch {
	case e.Code >= 500, e.Code == http.StatusTooManyRequests, e.Code == http.StatusRequestTimeout:
		return true
	case e.Code == http.StatusUnauthorized, e.Code == http.StatusNotFound, e.Code == http.StatusConflict:
		return true
	}
	return false
}

// Permanent reports whether err means the report itself is refused, so sending it again is useless.
func Permanent(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && !se.Retryable()
}

// Client posts reports to the registry.
type Client struct {
	// RegistryURL is the registry's base URL, e.g. http://metalhub-registry:8082.
	RegistryURL string
	// Token is the round's bearer token. Never logged.
	Token string
	// HTTPClient defaults to one with a 30s timeout.
	HTTPClient *http.Client
	// Attempts bounds the tries of one Send (default 6); Backoff is the first wait between them
	// (default 1s), doubling up to MaxBackoff (default 30s), with jitter so a rack of servers
	// booting together does not retry in lockstep.
	Attempts   int
	Backoff    time.Duration
	MaxBackoff time.Duration
	Logger     logr.Logger
}

// maxAnswerBytes bounds what we read of an answer: it is a tiny JSON object or an error line.
const maxAnswerBytes = 64 << 10

// Post sends the report once.
func (c *Client) Post(ctx context.Context, r *Report) (Answer, error) {
	return c.post(ctx, RegisterPath, r)
}

// PostCleaning sends a cleaning report once.
func (c *Client) PostCleaning(ctx context.Context, r *CleaningReport) (Answer, error) {
	return c.post(ctx, CleanPath, r)
}

func (c *Client) post(ctx context.Context, path string, v any) (Answer, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Answer{}, fmt.Errorf("encoding report: %w", err)
	}
	url := strings.TrimRight(c.RegistryURL, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, fmt.Errorf("building request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("posting report to %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return Answer{}, fmt.Errorf("reading registry answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return Answer{}, &StatusError{Code: resp.StatusCode, Message: strings.TrimSpace(string(data))}
	}
	var a Answer
	if err := json.Unmarshal(data, &a); err != nil {
		return Answer{}, fmt.Errorf("decoding registry answer: %w", err)
	}
	return a, nil
}

// Send posts the report, retrying transport errors and retryable answers with backoff, at most
// Attempts times. It returns the last error when every attempt failed.
func (c *Client) Send(ctx context.Context, r *Report) (Answer, error) {
	return c.send(ctx, func() (Answer, error) { return c.Post(ctx, r) })
}

// SendCleaning posts a cleaning report with Send's retries.
func (c *Client) SendCleaning(ctx context.Context, r *CleaningReport) (Answer, error) {
	return c.send(ctx, func() (Answer, error) { return c.PostCleaning(ctx, r) })
}

func (c *Client) send(ctx context.Context, post func() (Answer, error)) (Answer, error) {
	attempts := c.Attempts
	if attempts <= 0 {
		attempts = 6
	}
	wait := c.Backoff
	if wait <= 0 {
		wait = time.Second
	}
	maxWait := c.MaxBackoff
	if maxWait <= 0 {
		maxWait = 30 * time.Second
	}
	var err error
	for attempt := 1; ; attempt++ {
		var a Answer
		if a, err = post(); err == nil || Permanent(err) || attempt >= attempts {
			return a, err
		}
		d := wait/2 + rand.N(wait/2+1) // jitter in [wait/2, wait]
		c.Logger.V(1).Info("report not accepted, retrying", "attempt", attempt, "in", d.String(), "error", err.Error())
		if err := sleep(ctx, d); err != nil {
			return Answer{}, err
		}
		wait = min(2*wait, maxWait)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Agent collects and reports until the registry says it is done.
type Agent struct {
	Client *Client
	// Collect produces a fresh report for each post (hardware can change while we wait, e.g.
	// a link coming up or LLDP learning a neighbour).
	Collect func(context.Context) (*Report, error)
	// Interval is the pause between posts while the registry is not done (default 30s).
	Interval time.Duration
	// Once sends a single report (with Send's retries) and returns.
	Once   bool
	Logger logr.Logger
}

// ErrNotDone is returned by a Once run when the registry did not answer done.
var ErrNotDone = errors.New("registry has not confirmed the report")

// Run reports until the registry answers done (nil), ctx ends, or the registry refuses the
// report for good (a Permanent error).
func (a *Agent) Run(ctx context.Context) error {
	interval := a.Interval
	if interval <= 0 {
		interval = 30 * time.Second
	}
	for {
		r, err := a.Collect(ctx)
		if err != nil {
			return fmt.Errorf("collecting hardware: %w", err)
		}
		ans, err := a.Client.Send(ctx, r)
		switch {
		case err == nil && ans.Done:
			a.Logger.Info("report accepted", "systemUUID", r.SystemUUID)
			return nil
		case err != nil && ctx.Err() != nil:
			// Stopped by the caller while the registry was answering: that is why Run ends,
			// whatever the last answer was.
			if errors.Is(err, ctx.Err()) {
				return err
			}
			return errors.Join(ctx.Err(), err)
		case err != nil && Permanent(err):
			return err
		case err != nil:
			a.Logger.Info("report not accepted yet", "error", err.Error())
		default:
			a.Logger.Info("registry not done yet")
		}
		if a.Once {
			if err != nil {
				return err
			}
			return ErrNotDone
		}
		if err := sleep(ctx, interval); err != nil {
			return err
		}
	}
}

// String keeps the token out of logs and error messages that print the client.
func (c Client) String() string {
	return fmt.Sprintf("probe.Client{RegistryURL: %q, Token: <redacted>}", c.RegistryURL)
}
