package lifecycle

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StaleRetry is how soon a pass that found a stale cache looks again.
const StaleRetry = 200 * time.Millisecond

// guardTTL bounds how long a write is remembered: if the watch event of our write never shows
// (the object was deleted, the watch restarted), the object must not stay blocked.
const guardTTL = 30 * time.Second

// Guard remembers, per object, the resourceVersion our last write replaced. A pass that still
// sees that version is running on a cache that has not caught up with our own write; acting on it
// would redo the step just done (issue a second power action, say).
type Guard struct {
	mu      sync.Mutex
	written map[types.UID]guardEntry
	now     func() time.Time
}

type guardEntry struct {
	replaced string
	at       time.Time
}

// NewGuard returns an empty guard.
func NewGuard() *Guard {
	return &Guard{written: map[types.UID]guardEntry{}, now: time.Now}
}

// Wrote records that a write replaced resourceVersion replaced of obj.
func (g *Guard) Wrote(uid types.UID, replaced string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.written[uid] = guardEntry{replaced: replaced, at: g.now()}
}

// Stale reports whether obj, as read from the cache, predates our last write to it.
func (g *Guard) Stale(obj client.Object) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.written[obj.GetUID()]
	if !ok {
		return false
	}
	if obj.GetResourceVersion() == e.replaced && g.now().Sub(e.at) < guardTTL {
		return true
	}
	// The cache moved on (or we waited long enough): forget the write.
	delete(g.written, obj.GetUID())
	return false
}

// Forget drops what is known of an object, e.g. once it is gone.
func (g *Guard) Forget(uid types.UID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.written, uid)
}

// Len is the number of objects with a write in flight, for tests and metrics.
func (g *Guard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.written)
}
