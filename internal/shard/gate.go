package shard

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// KeyFunc gives the key an object is sharded by. Everything that acts on one BMC must give that
// BMC's key (KeyBMC), so that one replica acts on it.
type KeyFunc[T client.Object] func(ctx context.Context, obj T) string

// Gate makes rec act only on the objects of the shards s holds, their BMC requests fenced by
// their shard, and brings the objects of every shard s takes to the controller's queue (a
// source added to b). With s nil it changes nothing.
func Gate[T client.Object](s *Set, c cache.Cache, b *builder.Builder, rec *lifecycle.Reconciler[T], list func() client.ObjectList, key KeyFunc[T]) *builder.Builder {
	if s == nil {
		return b
	}
	g := &gate{set: s, cache: c, list: list, key: func(ctx context.Context, o client.Object) (string, bool) {
		t, ok := o.(T)
		if !ok {
			return "", false
		}
		return key(ctx, t), true
	}}
	rec.Owner = g.own
	s.mu.Lock()
	s.gates = append(s.gates, g)
	s.mu.Unlock()
	return b.WatchesRawSource(g)
}

// KeyBMC is the shard key of everything that acts on the BMC named name.
func KeyBMC(name string) string { return "bmc/" + name }

// KeyObject is the shard key of an object that acts on no BMC: its own name.
func KeyObject(o client.Object) string {
	return "object/" + o.GetNamespace() + "/" + o.GetName()
}

type gate struct {
	set   *Set
	cache cache.Cache
	list  func() client.ObjectList
	key   func(ctx context.Context, o client.Object) (string, bool)

	mu    sync.Mutex
	ctx   context.Context
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// fence is the bmc.Fence of one shard.
type fence struct {
	set   *Set
	shard int
}

func (f fence) Hold(deadline time.Time) (func(), <-chan struct{}, error) {
	return f.set.Hold(f.shard, deadline)
}

func (g *gate) own(ctx context.Context, obj client.Object) (context.Context, lifecycle.Ownership) {
	key, ok := g.key(ctx, obj)
	if !ok {
		return ctx, lifecycle.NotOwned
	}
	i := g.set.ShardOf(key)
	switch held, certain := g.set.Holding(i); {
	case !held:
		return ctx, lifecycle.NotOwned
	case !certain:
		// Taken, but its renewal (or, under load, the write that took it) ran past the renew
		// deadline: dropping the object now would lose it, since only taking a shard enqueues
		// its objects again.
		return ctx, lifecycle.OwnedUncertain
	}
	return bmc.WithFence(ctx, fence{g.set, i}), lifecycle.Owned
}

// Start implements source.Source: the shards held already are brought in once the cache has
// synced, the ones taken later as they are taken.
func (g *gate) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	g.mu.Lock()
	g.ctx, g.queue = ctx, q
	g.mu.Unlock()
	go func() {
		for _, i := range g.set.Held() {
			g.enqueue(ctx, q, i)
		}
	}()
	return nil
}

func (g *gate) acquired(i int) {
	g.mu.Lock()
	ctx, q := g.ctx, g.queue
	g.mu.Unlock()
	if q == nil {
		return // Start brings it
	}
	go g.enqueue(ctx, q, i)
}

// enqueue adds every object of shard i to q.
func (g *gate) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], i int) {
	if !g.cache.WaitForCacheSync(ctx) {
		return
	}
	list := g.list()
	if err := g.cache.List(ctx, list); err != nil {
		g.set.o.Logger.Error(err, "listing the objects of a shard taken", "shard", i)
		return
	}
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		obj, ok := o.(client.Object)
		if !ok {
			return nil
		}
		if key, ok := g.key(ctx, obj); ok && g.set.ShardOf(key) == i {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
		return nil
	})
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "metalhub"
	}
	return strings.ToLower(h)
}
