package bmc

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/bmc/logs"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

const (
	// proofTTL is how old a proof of the system's identity LogEntries takes instead of reading
	// the system again: polled for every server, it would otherwise cost two requests, while
	// the controller reads the system (System, proven) on its own polls anyway. A log is only
	// read, never acted on: at worst, after an address swap, another box's log is read for that
	// long, and nothing is sent to it. 0 would prove every call, at a request more each.
	proofTTL = 2 * time.Minute
)

// logCache remembers, per system URI, where its log's entries are, and who last answered at the
// system's address (any read of it), so that a steady-state LogEntries is one GET.
type logCache struct {
	mu    sync.Mutex
	where map[string]string
	seen  map[string]seenSystem
}

type seenSystem struct {
	id    Identity
	sysID string
	at    time.Time
}

func (l *logCache) saw(uri string, sys *schemas.ComputerSystem, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]seenSystem{}
	}
	l.seen[uri] = seenSystem{id: Identity{UUID: sys.UUID, SerialNumber: sys.SerialNumber}, sysID: sys.ID, at: now}
}

// proven says whether the system at uri was read as want less than proofTTL ago.
func (l *logCache) proven(uri string, want Identity, now time.Time) bool {
	l.mu.Lock()
	s, ok := l.seen[uri]
	l.mu.Unlock()
	return ok && now.Sub(s.at) < proofTTL && !now.Before(s.at) && isSystem(want, s.id, s.sysID)
}

func (l *logCache) entries(uri string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.where[uri]
	return e, ok
}

func (l *logCache) remember(uri, entries string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.where == nil {
		l.where = map[string]string{}
	}
	l.where[uri] = entries
}

func (l *logCache) forget(uri string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.where, uri)
}

// LogEntry is one entry of a system's hardware event log.
type LogEntry = logs.Entry

// LogEntries implements BMC.
func (c *conn) LogEntries(ctx context.Context, systemID, after string) ([]LogEntry, error) {
	var out []LogEntry
	err := c.onLog(ctx, systemID, "read event log of "+systemID, func(api *gofish.APIClient, uri string) (err error) {
		out, err = logs.Read(api, c.log, uri, after)
		return err
	})
	return out, err
}

// LogCursor implements BMC.
func (c *conn) LogCursor(ctx context.Context, systemID string) (string, error) {
	var id string
	err := c.onLog(ctx, systemID, "read event log cursor of "+systemID, func(api *gofish.APIClient, uri string) (err error) {
		id, err = logs.Newest(api, uri)
		return err
	})
	return id, err
}

// onLog runs read on the Entries collection of the system's event log, found once per system
// and remembered; the system is proven first unless a proof of it is recent (recentlyProven).
func (c *conn) onLog(ctx context.Context, systemID, op string, read func(api *gofish.APIClient, uri string) error) error {
	if strings.TrimSpace(systemID) == "" {
		return wire.New(ReasonInvalidConfig, op, "system ID is empty")
	}
	api, err := c.client(ctx)
	if err != nil {
		return wire.Wrap(op, err)
	}
	for attempt := 0; ; attempt++ {
		uri, _, err := c.resolveSystem(api, systemID)
		if err != nil {
			return wire.Wrap(op, err)
		}
		entries, known := c.logs.entries(uri)
		if !known || !c.recentlyProven(ctx, uri) {
			sys, err := c.getSystem(ctx, systemID)
			if err != nil {
				return wire.Wrap(op, err)
			}
			if !known {
				if entries, err = logs.Find(api, &c.root, sys); err != nil {
					return wire.Wrap(op, err)
				}
				// getSystem may have resolved the system anew.
				if uri, _, err = c.resolveSystem(api, systemID); err != nil {
					return wire.Wrap(op, err)
				}
				c.logs.remember(uri, entries)
				c.log.V(1).Info("found event log", "system", systemID, "entries", entries)
			}
		}
		if err = read(api, entries); err == nil {
			return nil
		}
		if !known || attempt > 0 || ReasonOf(err) != ReasonNotFound {
			return wire.Wrap(op, err)
		}
		// The log moved (a firmware update): look for it again, once.
		c.logs.forget(uri)
	}
}

// recentlyProven says whether ctx asks for no identity (Expect) or the system at uri was read
// as the one it asks for a moment ago.
func (c *conn) recentlyProven(ctx context.Context, uri string) bool {
	want, ok := ctx.Value(expectKey{}).(Identity)
	return !ok || c.logs.proven(uri, want, c.opts.Now())
}
