package receiver

import (
	"context"
	"time"

	"sync"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Bounds of the waker's memory.
const (
	maxPending = 1024 // artifact checksums remembered per sync; past it the sync is woken
	maxTracked = 4096 // syncs remembered; idle ones are forgotten past it
	wakers     = 2    // syncs woken at once
	retryWake  = time.Second
)

// waker wakes syncs, at most once per interval each, and only when an event names a checksum the
// sync has not delivered yet: a burst of events costs one wake per sync, and the events the woken
// pass covered cost nothing after it.
type waker struct {
	reader   client.Reader
	w        client.Writer
	interval time.Duration
	log      logr.Logger
	now      func() time.Time
	queue    workqueue.TypedDelayingInterface[string]

	mu    sync.Mutex
	syncs map[string]*syncWakes
}

// syncWakes is one sync's: when it was last woken and the events since.
type syncWakes struct {
	last     time.Time
	pending  map[string]pendingEvent // by artifact id
	overflow bool
}

type pendingEvent struct {
	checksum string
	at       time.Time
}

func newWaker(reader client.Reader, w client.Writer, interval time.Duration, log logr.Logger, now func() time.Time) *waker {
	return &waker{reader: reader, w: w, interval: interval, log: log, now: now, syncs: map[string]*syncWakes{},
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "infrahub-receiver"})}
}

func (k *waker) add(sync, artifact, checksum string, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.syncs[sync]
	if st == nil {
		if len(k.syncs) >= maxTracked {
			k.forgetIdle(at)
		}
		st = &syncWakes{pending: map[string]pendingEvent{}}
		k.syncs[sync] = st
	}
	if _, ok := st.pending[artifact]; ok || len(st.pending) < maxPending {
		st.pending[artifact] = pendingEvent{checksum: checksum, at: at}
	} else {
		st.overflow = true
	}
	if d := st.last.Add(k.interval).Sub(at); d > 0 {
		k.queue.AddAfter(sync, d)
	} else {
		k.queue.Add(sync)
	}
}

// forgetIdle drops syncs with nothing pending whose interval has run out. Called with mu held.
func (k *waker) forgetIdle(now time.Time) {
	for name, st := range k.syncs {
		if len(st.pending) == 0 && !st.overflow && now.Sub(st.last) >= k.interval {
			delete(k.syncs, name)
		}
	}
}

func (k *waker) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range wakers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				name, quit := k.queue.Get()
				if quit {
					return
				}
				k.process(ctx, name)
				k.queue.Done(name)
			}
		}()
	}
	wg.Wait()
}

func (k *waker) process(ctx context.Context, name string) {
	now := k.now()
	k.mu.Lock()
	st := k.syncs[name]
	if st == nil || len(st.pending) == 0 && !st.overflow {
		k.mu.Unlock()
		return
	}
	if d := st.last.Add(k.interval).Sub(now); d > 0 {
		// An early Add of a sync already waiting: it waits for its interval.
		k.queue.AddAfter(name, d)
		k.mu.Unlock()
		return
	}
	pending, overflow := st.pending, st.overflow
	st.pending, st.overflow = map[string]pendingEvent{}, false
	k.mu.Unlock()

	var s infrahubv1alpha1.InfrahubSync
	if err := k.reader.Get(ctx, client.ObjectKey{Name: name}, &s); err != nil {
		if !apierrors.IsNotFound(err) {
			k.retry(name, pending, overflow, err)
		}
		return
	}
	if !overflow && k.covered(ctx, &s, pending) {
		coalesced.Inc()
		return
	}
	if err := lifecycle.PatchMetadata(ctx, k.w, &s, func(o client.Object) {
		lifecycle.SetAnnotation(o, infrahubv1alpha1.RequestedAtAnnotation, now.UTC().Format(time.RFC3339Nano))
	}); err != nil {
		if !apierrors.IsNotFound(err) {
			k.retry(name, pending, overflow, err)
		}
		return
	}
	k.mu.Lock()
	st.last = now
	k.mu.Unlock()
	wakes.Inc()
	k.log.V(1).Info("Woke InfrahubSync for Infrahub artifact events", "sync", name, "artifacts", len(pending))
}

// covered reports whether the sync already delivered every pending event: the VidraResource of
// each artifact holds the event's checksum, or, for an artifact it has none of, a pass finished
// after the event came (it queried Infrahub after the artifact was made).
func (k *waker) covered(ctx context.Context, s *infrahubv1alpha1.InfrahubSync, pending map[string]pendingEvent) bool {
	for id, ev := range pending {
		var vr infrahubv1alpha1.VidraResource
		err := k.reader.Get(ctx, client.ObjectKey{Name: id}, &vr)
		switch {
		case err == nil && vr.Annotations[manifests.ChecksumAnnotation] == ev.checksum:
			continue
		case err == nil:
			return false
		case apierrors.IsNotFound(err):
			// lastSyncTime is whole seconds: only a later second proves the pass came after.
			if t := s.Status.LastSyncTime; t == nil || !t.Time.After(ev.at) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// retry puts the events back and tries the sync again shortly.
func (k *waker) retry(name string, pending map[string]pendingEvent, overflow bool, err error) {
	k.log.Error(err, "Waking InfrahubSync", "sync", name)
	k.mu.Lock()
	if st := k.syncs[name]; st != nil {
		for id, ev := range pending {
			if _, newer := st.pending[id]; !newer {
				st.pending[id] = ev
			}
		}
		st.overflow = st.overflow || overflow
	}
	k.mu.Unlock()
	k.queue.AddAfter(name, retryWake)
}
