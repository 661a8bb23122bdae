package policy

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// hostBusyRetry is how soon a pass turned away by a busy Infrahub host comes back: behind the
// work already queued, so the other hosts' syncs go first.
const hostBusyRetry = time.Second

// HostGate bounds how many sync passes query one Infrahub host at once. The sync workers are
// shared by every tenant; without it a slow Infrahub (or one tenant's huge syncs on it) holds
// all of them for up to a pass deadline each, and the syncs of every other host wait. A pass
// that finds its host full does not wait for a slot: it gives its worker back and is queued
// again (see InfrahubSyncReconciler.syncStep).
type HostGate struct {
	limit int
	mu    sync.Mutex
	busy  map[string]int
}

// NewHostGate admits limit passes per host; limit <= 0 admits any number.
func NewHostGate(limit int) *HostGate {
	return &HostGate{limit: limit, busy: map[string]int{}}
}

// Enter takes one of host's slots. ok is false when all are taken; otherwise leave gives the
// slot back (once, however often it is called).
func (g *HostGate) Enter(host string) (leave func(), ok bool) {
	if g == nil || g.limit <= 0 {
		return func() {}, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy[host] >= g.limit {
		return nil, false
	}
	g.busy[host]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.busy[host]--; g.busy[host] <= 0 {
				delete(g.busy, host) // no entry kept for a host nobody queries any more
			}
		})
	}, true
}

// inFlight is how many passes query host now.
func (g *HostGate) inFlight(host string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy[host]
}

// BusyRetry spreads the returns of passes turned away together.
func BusyRetry() time.Duration { return wait.Jitter(hostBusyRetry, 1) }

// PerHostDefault is the share of the sync workers one host may hold when the flag says
// nothing: half, rounded up, so the other half is always there for the other hosts.
func PerHostDefault(workers int) int {
	return (workers + 1) / 2
}
