package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/discovery"
)

// maxRoundWaits bounds the reports waiting at once: a waiting report holds a connection and is
// not authenticated yet (its token is checked against the round it waits for), so whoever knows
// servers' UUIDs could otherwise pile up connections. A fleet's bring-up needs about one per
// booting server whose round is not recorded yet; beyond the bound a report is judged at once.
const maxRoundWaits = 4096

// roundWaits holds the reports that wait for their server's round to show in the cache, by
// server name; the cache's Server handler wakes them.
type roundWaits struct {
	mu      sync.Mutex
	waiting map[string][]chan struct{}
	n, max  int
}

// add registers a wait for server name's round, or returns nil when max reports wait already.
func (w *roundWaits) add(name string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n >= w.max {
		return nil
	}
	ch := make(chan struct{})
	w.waiting[name] = append(w.waiting[name], ch)
	w.n++
	return ch
}

func (w *roundWaits) remove(name string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	left := slices.DeleteFunc(w.waiting[name], func(c chan struct{}) bool { return c == ch })
	if len(left) == 0 {
		delete(w.waiting, name)
		return
	}
	w.waiting[name] = left
}

// wake is the informer's: it runs once the cache holds the object it is called with.
func (w *roundWaits) wake(obj any) {
	s, ok := obj.(*metalv1alpha1.Server)
	if !ok || s.Annotations[discovery.RoundAnnotation] == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.waiting[s.Name] {
		close(ch)
	}
	delete(w.waiting, s.Name)
}

// WatchRounds lets reports wait up to Options.RoundWait for a round the cache behind the
// registry's client does not show yet: inf is that cache's Server informer. Setup calls it;
// without it a report before its round is refused at once.
func (r *Registry) WatchRounds(inf cache.Informer) error {
	if r.opts.RoundWait <= 0 {
		return nil
	}
	w := &roundWaits{waiting: map[string][]chan struct{}{}, max: maxRoundWaits}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.wake,
		UpdateFunc: func(_, obj any) { w.wake(obj) },
	}); err != nil {
		return fmt.Errorf("watching Servers for discovery rounds: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rounds = w
	return nil
}

// awaitRound waits, holding no slot, until the cache shows the round of the server with the
// report's UUID, at most RoundWait: the box powers on before the write that records its round,
// and on a busy API server that write, or the cache's sight of it, comes after the probe's first
// report. Refused then, the probe would try again only after a back-off of seconds. It decides
// nothing: accept judges the report afterwards, whatever the wait found.
func (r *Registry) awaitRound(ctx context.Context, uuid string) {
	r.mu.Lock()
	w := r.rounds
	r.mu.Unlock()
	if w == nil {
		return
	}
	srv, out := r.lookup(ctx, uuid)
	if out != nil || srv.Annotations[discovery.RoundAnnotation] != "" {
		return
	}
	ch := w.add(srv.Name)
	if ch == nil {
		return
	}
	defer w.remove(srv.Name, ch)
	// Written between the lookup and add: the wake is gone, the cache has it.
	if srv, out = r.lookup(ctx, uuid); out != nil || srv.Annotations[discovery.RoundAnnotation] != "" {
		return
	}
	t := time.NewTimer(r.opts.RoundWait)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
}
