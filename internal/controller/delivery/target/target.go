package target

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

// ownedByIndex indexes watched objects by their owned-by annotation.
const ownedByIndex = "metadata.annotations.owned-by"

// watchRetry is how long a kind that could not be watched (no list/watch right, say) is read
// with plain GETs before the watch is tried again.
const watchRetry = 5 * time.Minute

// Target is one destination cluster: an uncached client for applies and deletes, its own
// RESTMapper, and metadata-only watches on the kinds applied there.
type Target struct {
	Key         string
	fingerprint string
	Cfg         *rest.Config
	Client      client.Client
	Mapper      meta.RESTMapper
	cache       cache.Cache
	cancel      context.CancelFunc
	Timeout     time.Duration
	onEvent     func(ObjectEvent)
	log         logr.Logger

	mu      sync.Mutex
	watches map[watchKey]*watchEntry

	// Base and as, for a target that impersonates a ServiceAccount: its client acts as that
	// user, and its reads are GETs through it; base (the cluster's own target) only runs the
	// metadata watches that bring passes, and finds what lost knowledge would orphan.
	Base *Target
	As   string
}

type watchKey = schema.GroupVersionKind

type watchEntry struct {
	done     chan struct{}
	err      error
	failedAt time.Time
}

// ObjectEvent is a change to an object we applied, seen by a watch.
type ObjectEvent struct {
	Cluster string // target id
	GVK     schema.GroupVersionKind
	Obj     metav1.Object
	Deleted bool
}

func (t *Target) Stop() {
	if t.cancel != nil {
		t.cancel()
	}
}

func Partial(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{}
	p.SetGroupVersionKind(gvk)
	return p
}

// Watch makes sure objects of gvk we applied are watched, metadata only. It returns nil once
// the watch is filled; an error means reads fall back to GETs for a while.
func (t *Target) Watch(ctx context.Context, gvk schema.GroupVersionKind) error {
	if t.Base != nil {
		return t.Base.Watch(ctx, gvk)
	}
	t.mu.Lock()
	e, ok := t.watches[gvk]
	if ok && e.err != nil && time.Since(e.failedAt) > watchRetry {
		ok = false
	}
	if !ok {
		e = &watchEntry{done: make(chan struct{})}
		t.watches[gvk] = e
		t.mu.Unlock()
		err := t.startWatch(ctx, gvk)
		t.mu.Lock()
		e.err, e.failedAt = err, time.Now()
		close(e.done)
		t.mu.Unlock()
		if err != nil {
			t.log.Info("cannot watch kind; reading it with GETs", "kind", gvk.String(), "error", err.Error())
		}
		return err
	}
	t.mu.Unlock()
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Target) startWatch(ctx context.Context, gvk schema.GroupVersionKind) error {
	// A watch on a kind the identity may not list never fills: without this one request it
	// would hold the pass's worker for the whole timeout, kind after kind of the manifest.
	if err := t.probeList(ctx, gvk); err != nil {
		return err
	}
	obj := Partial(gvk)
	inf, err := t.cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watching %s: %w", gvk, err)
	}
	if err := t.cache.IndexField(ctx, obj, ownedByIndex, func(o client.Object) []string {
		return OwnersOf(o)
	}); err != nil {
		return fmt.Errorf("indexing %s: %w", gvk, err)
	}
	emit := func(o any, deleted bool) {
		if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tomb.Obj
		}
		if m, ok := o.(metav1.Object); ok {
			t.onEvent(ObjectEvent{Cluster: t.ID(), GVK: gvk, Obj: m, Deleted: deleted})
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { emit(o, false) },
		UpdateFunc: func(_, o any) { emit(o, false) },
		DeleteFunc: func(o any) { emit(o, true) },
	}); err != nil {
		return fmt.Errorf("watching %s: %w", gvk, err)
	}
	wctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	if !toolscache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		_ = t.cache.RemoveInformer(context.WithoutCancel(ctx), obj)
		return fmt.Errorf("watch on %s did not fill within %s", gvk, t.Timeout)
	}
	return nil
}

// probeList lists one object of gvk, as the watch would list them all: a refusal (Forbidden,
// a kind the cluster does not serve) is known at once, and kept for watchRetry by watch.
func (t *Target) probeList(ctx context.Context, gvk schema.GroupVersionKind) error {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := t.Client.List(ctx, list, client.Limit(1), client.MatchingLabels{manifests.ManagedByLabel: manifests.ManagedByValue}); err != nil {
		return fmt.Errorf("listing %s: %w", gvk, err)
	}
	return nil
}

// watching reports whether gvk's watch is up (reads can come from it).
func (t *Target) watching(gvk schema.GroupVersionKind) bool {
	if t.Base != nil {
		return false // reads go through the impersonated client
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.watches[gvk]
	if !ok {
		return false
	}
	select {
	case <-e.done:
		return e.err == nil
	default:
		return false
	}
}

// Observe returns an object's metadata: from the watch when there is one, else with a GET.
// A missing object is (nil, nil).
func (t *Target) Observe(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (*metav1.PartialObjectMetadata, error) {
	obj := Partial(gvk)
	var err error
	if t.watching(gvk) {
		err = t.cache.Get(ctx, key, obj)
		// Not in a label-filtered watch means: absent, or present without our label (an
		// object someone else created, or whose label was removed). Ask the server.
		if apierrors.IsNotFound(err) {
			err = t.get(ctx, key, obj)
		}
	} else {
		err = t.get(ctx, key, obj)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return obj, nil
}

func (t *Target) get(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	return t.Client.Get(ctx, key, obj)
}

// OwnedObjects lists, from the watches, the objects whose owned-by annotation names owner. It
// finds what a lost status no longer lists.
func (t *Target) OwnedObjects(ctx context.Context, owner string) []ObjectRef {
	if t.Base != nil {
		return t.Base.OwnedObjects(ctx, owner)
	}
	t.mu.Lock()
	var kinds []schema.GroupVersionKind
	for gvk, e := range t.watches {
		select {
		case <-e.done:
			if e.err == nil {
				kinds = append(kinds, gvk)
			}
		default:
		}
	}
	t.mu.Unlock()
	var out []ObjectRef
	for _, gvk := range kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := t.cache.List(ctx, list, client.MatchingFields{ownedByIndex: owner}); err != nil {
			continue
		}
		for _, o := range list.Items {
			out = append(out, ObjectRef{GVK: gvk, Namespace: o.Namespace, Name: o.Name})
		}
	}
	return out
}

// ObjectRef names one object of a cluster.
type ObjectRef struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
}

func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.GVK.Kind + "/" + r.Name
	}
	return r.GVK.Kind + "/" + r.Namespace + "/" + r.Name
}

// Key identifies the object whatever its version.
func (r ObjectRef) Key() string {
	return r.GVK.Group + "/" + r.GVK.Kind + "/" + r.Namespace + "/" + r.Name
}

// DriftToken summarises what of an object is ours: the fields our field manager's apply owns.
// A field someone else changes (kubectl edit, another controller, a forced apply) changes owner
// and leaves our set, so a different token later means drift; a change to fields we never set
// (the Deployment controller's revision annotation, which also moves a Deployment's generation)
// leaves it as it was. "" when we own nothing of the object.
func DriftToken(m metav1.Object) string {
	for _, f := range m.GetManagedFields() {
		if f.Manager == manifests.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply && f.FieldsV1 != nil {
			sum := sha256.Sum256(append([]byte(f.APIVersion+"\x00"), f.FieldsV1.Raw...))
			return hex.EncodeToString(sum[:12])
		}
	}
	return ""
}

// keepOwnManagedFields is the watch caches' transform: of the managed fields, only our apply's
// entry is kept (what driftToken reads), the rest dropped to save memory.
func keepOwnManagedFields(i any) (any, error) {
	if o, ok := i.(metav1.Object); ok {
		var own []metav1.ManagedFieldsEntry
		for _, f := range o.GetManagedFields() {
			if f.Manager == manifests.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
				own = append(own, f)
			}
		}
		o.SetManagedFields(own)
	}
	return i, nil
}

// OwnersOf reads the owned-by annotation. The reference appended its name on every pass
// (defect 6), so "a,a,a" from a migrated object means a.
func OwnersOf(m metav1.Object) []string {
	v := strings.TrimSpace(m.GetAnnotations()[manifests.OwnedByAnnotation])
	if v == "" {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}
