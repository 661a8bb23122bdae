package dashboard

import (
	"context"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/telemetry/latest"
)

// Watched kinds, as the snapshot's access map names them.
const (
	kindServers      = "servers"
	kindClaims       = "serverclaims"
	kindMaintenances = "servermaintenances"
	kindBMCs         = "bmcs"
	kindSyncs        = "infrahubsyncs"
	kindResources    = "vidraresources"
	kindEvents       = "events"
)

// Informer indexes.
const (
	byBMC    = "bmc"    // servers by spec.bmcRef
	bySync   = "sync"   // VidraResources by "<namespace>/<sync>"
	byObject = "object" // Server events by the server's name
)

// watcher keeps the hub current from one informer per kind.
type watcher struct {
	c   client.WithWatch
	hub *hub
	// telemetry, if set, gives the servers' readings, taken again every refresh.
	telemetry latest.Source
	refresh   time.Duration

	servers, claims, maintenances, bmcs, syncs, resources, events cache.SharedIndexInformer

	// recompute serialises reading the stores and publishing: a recompute that starts after a
	// store changed sees the change, so the last one published is never stale.
	recompute sync.Mutex
}

// noWatchList keeps the reflector on plain list and watch: the list is where a forbidden kind
// shows first, and where we learn it became readable.
type noWatchList struct{ *cache.ListWatch }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

func (w *watcher) listWatch(kind string, newList func() client.ObjectList, fieldSelector string) cache.ListerWatcher {
	opts := func(o metav1.ListOptions) *client.ListOptions {
		if fieldSelector != "" {
			o.FieldSelector = fieldSelector
		}
		return &client.ListOptions{Raw: &o, Limit: o.Limit, Continue: o.Continue}
	}
	return noWatchList{&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l := newList()
			err := w.c.List(ctx, l, opts(o))
			w.noteAccess(kind, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wi, err := w.c.Watch(ctx, newList(), opts(o))
			if err != nil {
				w.noteAccess(kind, err)
			}
			return wi, err
		},
	}}
}

func (w *watcher) noteAccess(kind string, err error) {
	switch {
	case err == nil:
		w.hub.setAccess(kind, "ok")
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		w.hub.setAccess(kind, "forbidden")
	case apierrors.IsNotFound(err):
		// The CRD is not installed: as good as no access, for the page.
		w.hub.setAccess(kind, "missing")
	default:
		w.hub.setAccess(kind, "error")
	}
}

func newWatcher(c client.WithWatch, h *hub, telemetry latest.Source, refresh time.Duration) *watcher {
	if refresh <= 0 {
		refresh = DefaultTelemetryRefresh
	}
	w := &watcher{c: c, hub: h, telemetry: telemetry, refresh: refresh}
	inf := func(kind string, obj runtime.Object, newList func() client.ObjectList, fieldSelector string, idx cache.Indexers) cache.SharedIndexInformer {
		h.setAccess(kind, "loading")
		i := cache.NewSharedIndexInformer(w.listWatch(kind, newList, fieldSelector), obj, 0, idx)
		// The list wrapper records access; this only keeps the reflector from logging a
		// forbidden kind as an error on every retry.
		_ = i.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { w.noteAccessWatch(kind, err) })
		return i
	}
	w.servers = inf(kindServers, &metalv1alpha1.Server{}, func() client.ObjectList { return &metalv1alpha1.ServerList{} }, "",
		cache.Indexers{byBMC: func(o any) ([]string, error) {
			if s, ok := o.(*metalv1alpha1.Server); ok && s.Spec.BMCRef != nil {
				return []string{s.Spec.BMCRef.Name}, nil
			}
			return nil, nil
		}})
	w.claims = inf(kindClaims, &metalv1alpha1.ServerClaim{}, func() client.ObjectList { return &metalv1alpha1.ServerClaimList{} }, "", cache.Indexers{})
	w.maintenances = inf(kindMaintenances, &metalv1alpha1.ServerMaintenance{}, func() client.ObjectList { return &metalv1alpha1.ServerMaintenanceList{} }, "", cache.Indexers{})
	w.bmcs = inf(kindBMCs, &metalv1alpha1.BMC{}, func() client.ObjectList { return &metalv1alpha1.BMCList{} }, "", cache.Indexers{})
	w.syncs = inf(kindSyncs, &infrahubv1alpha1.InfrahubSync{}, func() client.ObjectList { return &infrahubv1alpha1.InfrahubSyncList{} }, "", cache.Indexers{})
	w.resources = inf(kindResources, &infrahubv1alpha1.VidraResource{}, func() client.ObjectList { return &infrahubv1alpha1.VidraResourceList{} }, "",
		cache.Indexers{bySync: func(o any) ([]string, error) {
			if r, ok := o.(*infrahubv1alpha1.VidraResource); ok {
				if k := syncOf(r); k != "" {
					return []string{k}, nil
				}
			}
			return nil, nil
		}})
	// The page shows a VidraResource's status: its manifest (up to 1 MiB each, any number of
	// them) stays out of memory.
	_ = w.resources.SetTransform(withoutManifest)
	// Only Server events: the details panel shows nothing else, and a busy cluster's other
	// events would fill the memory for nothing.
	w.events = inf(kindEvents, &corev1.Event{}, func() client.ObjectList { return &corev1.EventList{} }, "involvedObject.kind=Server",
		cache.Indexers{byObject: func(o any) ([]string, error) {
			if e, ok := o.(*corev1.Event); ok {
				return []string{e.InvolvedObject.Name}, nil
			}
			return nil, nil
		}})

	w.on(w.servers, func(o any) { w.server(keyOf(o)) })
	w.on(w.bmcs, func(o any) {
		for _, s := range w.byIndex(w.servers, byBMC, keyOf(o)) {
			w.server(s.(*metalv1alpha1.Server).Name)
		}
	})
	w.on(w.claims, func(o any) { w.simple(collClaims, w.claims, keyOf(o)) })
	w.on(w.maintenances, func(o any) { w.simple(collMaintenances, w.maintenances, keyOf(o)) })
	w.on(w.syncs, func(o any) { w.sync(keyOf(o)) })
	w.on(w.resources, func(o any) {
		if r, ok := unwrap(o).(*infrahubv1alpha1.VidraResource); ok {
			if k := syncOf(r); k != "" {
				w.sync(k)
			}
		}
	})
	return w
}

func (w *watcher) noteAccessWatch(kind string, err error) {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) {
		w.noteAccess(kind, err)
	}
}

func (w *watcher) informers() []cache.SharedIndexInformer {
	return []cache.SharedIndexInformer{w.servers, w.claims, w.maintenances, w.bmcs, w.syncs, w.resources, w.events}
}

func (w *watcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, i := range w.informers() {
		wg.Go(func() { i.RunWithContext(ctx) })
	}
	if w.telemetry != nil {
		wg.Go(func() { w.refreshTelemetry(ctx) })
	}
	wg.Wait()
}

// refreshTelemetry publishes every server again each refresh, for the readings: no watch says
// when the collector read a server. Unchanged tiles send nothing (hub.set).
func (w *watcher) refreshTelemetry(ctx context.Context) {
	t := time.NewTicker(w.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, name := range w.servers.GetStore().ListKeys() {
			w.server(name)
		}
	}
}

// on calls f with the old and the new object of every change (a label or owner that moved
// must update where the object was as well as where it is).
func (w *watcher) on(i cache.SharedIndexInformer, f func(o any)) {
	_, _ = i.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { f(o) },
		UpdateFunc: func(old, o any) {
			f(old)
			f(o)
		},
		DeleteFunc: func(o any) { f(o) },
	})
}

func unwrap(o any) any {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return o
}

func keyOf(o any) string {
	k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
	return k
}

func (w *watcher) byIndex(i cache.SharedIndexInformer, index, value string) []any {
	l, _ := i.GetIndexer().ByIndex(index, value)
	return l
}

func (w *watcher) getServer(name string) *metalv1alpha1.Server {
	o, ok, _ := w.servers.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	return o.(*metalv1alpha1.Server)
}

// server publishes one server's summary, or its deletion.
func (w *watcher) server(name string) {
	w.recompute.Lock()
	defer w.recompute.Unlock()
	s := w.getServer(name)
	if s == nil {
		w.hub.del(collServers, name)
		return
	}
	var bmc *metalv1alpha1.BMC
	if s.Spec.BMCRef != nil {
		if o, ok, _ := w.bmcs.GetStore().GetByKey(s.Spec.BMCRef.Name); ok {
			bmc = o.(*metalv1alpha1.BMC)
		}
	}
	sum := summarize(s, bmc)
	if w.telemetry != nil {
		if r, ok := w.telemetry.Latest(name); ok {
			sum.Telemetry = tileTelemetry(r)
		}
	}
	_ = w.hub.set(collServers, name, sum)
}

func (w *watcher) simple(coll string, i cache.SharedIndexInformer, key string) {
	w.recompute.Lock()
	defer w.recompute.Unlock()
	o, ok, _ := i.GetStore().GetByKey(key)
	if !ok {
		w.hub.del(coll, key)
		return
	}
	switch o := o.(type) {
	case *metalv1alpha1.ServerClaim:
		_ = w.hub.set(coll, key, claimItem(o))
	case *metalv1alpha1.ServerMaintenance:
		_ = w.hub.set(coll, key, maintenanceItem(o))
	}
}

func (w *watcher) sync(key string) {
	w.recompute.Lock()
	defer w.recompute.Unlock()
	o, ok, _ := w.syncs.GetStore().GetByKey(key)
	if !ok {
		w.hub.del(collSyncs, key)
		return
	}
	var rs []*infrahubv1alpha1.VidraResource
	for _, r := range w.byIndex(w.resources, bySync, key) {
		rs = append(rs, r.(*infrahubv1alpha1.VidraResource))
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name })
	_ = w.hub.set(collSyncs, key, syncItem(o.(*infrahubv1alpha1.InfrahubSync), rs))
}

// EventItem is one Event about a server, as the details panel lists it.
type EventItem struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		if e.Series != nil && !e.Series.LastObservedTime.IsZero() {
			return e.Series.LastObservedTime.Time
		}
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// recentEvents are a server's events, newest first, at most max.
func (w *watcher) recentEvents(name string, max int) []EventItem {
	out := []EventItem{}
	for _, o := range w.byIndex(w.events, byObject, name) {
		e := o.(*corev1.Event)
		out = append(out, EventItem{Time: eventTime(e), Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// withoutManifest drops a VidraResource's manifest and managed fields before the informer
// stores it.
func withoutManifest(o any) (any, error) {
	if r, ok := o.(*infrahubv1alpha1.VidraResource); ok {
		r.Spec.Manifest = ""
		r.ManagedFields = nil
	}
	return o, nil
}
