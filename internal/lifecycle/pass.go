package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var (
	// ErrSecondWrite is returned for a second write to the reconciled object in one pass: the
	// first write's watch event will bring a fresh object; writing again would act on stale data.
	ErrSecondWrite = errors.New("second write to the reconciled object in one pass")
	// ErrReread is returned when a handler reads its own object again mid-pass instead of using
	// the one the pass started with.
	ErrReread = errors.New("reconciled object read again mid-pass")
)

// Pass is one reconcile pass over one object. Its Client lets the handler write that object once.
type Pass[T client.Object] struct {
	// Obj is the object as the cache had it when the pass began. Handlers may change it in
	// memory before their one write.
	Obj T

	c        client.Client
	guard    *Guard
	uid      types.UID
	key      client.ObjectKey
	startRV  string
	wrote    string
	writeErr error
}

func newPass[T client.Object](obj T, c client.Client, g *Guard) *Pass[T] {
	return &Pass[T]{Obj: obj, c: c, guard: g, uid: obj.GetUID(), key: client.ObjectKeyFromObject(obj), startRV: obj.GetResourceVersion()}
}

// Client returns a client for the pass: reads come from the manager's cache; writes to the
// reconciled object are counted, and a second one fails with ErrSecondWrite.
func (p *Pass[T]) Client() client.Client { return &passClient[T]{Client: p.c, p: p} }

// Wrote reports what the pass wrote to its object ("" if nothing).
func (p *Pass[T]) Wrote() string { return p.wrote }

// wroteStatusOnly reports whether the pass's one write went to the status subresource.
func (p *Pass[T]) wroteStatusOnly() bool { return strings.HasPrefix(p.wrote, "status ") }

func (p *Pass[T]) isOwn(obj client.Object) bool {
	if obj.GetUID() != "" {
		return obj.GetUID() == p.uid
	}
	return client.ObjectKeyFromObject(obj) == p.key && sameType(obj, p.Obj)
}

// sameType compares Go types, not their printed names: two API groups' kinds of one name
// (metal.ironcore.dev's and maintenance.metal.ironcore.dev's ServerMaintenance) both print
// as *v1alpha1.ServerMaintenance.
func sameType(a, b runtime.Object) bool { return reflect.TypeOf(a) == reflect.TypeOf(b) }

// write runs one write; for the reconciled object it enforces once-per-pass and records the
// replaced resourceVersion in the guard.
func (p *Pass[T]) write(obj client.Object, what string, do func() error) error {
	if !p.isOwn(obj) {
		return do()
	}
	if p.wrote != "" {
		return fmt.Errorf("%w: %s after %s", ErrSecondWrite, what, p.wrote)
	}
	p.wrote = what
	if err := do(); err != nil {
		return err
	}
	// A no-op write leaves the version as it was; remembering it would block the object.
	if obj.GetResourceVersion() != p.startRV && what != "delete" {
		p.guard.Wrote(p.uid, p.startRV)
	}
	return nil
}

type passClient[T client.Object] struct {
	client.Client
	p *Pass[T]
}

func (c *passClient[T]) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if key == c.p.key && sameType(obj, c.p.Obj) {
		return fmt.Errorf("%w: %s", ErrReread, key)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *passClient[T]) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.p.write(obj, "update", func() error { return c.Client.Update(ctx, obj, opts...) })
}

func (c *passClient[T]) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.p.write(obj, "patch", func() error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

func (c *passClient[T]) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.p.write(obj, "delete", func() error { return c.Client.Delete(ctx, obj, opts...) })
}

func (c *passClient[T]) Status() client.SubResourceWriter {
	return &passStatus[T]{SubResourceWriter: c.Client.Status(), p: c.p}
}

func (c *passClient[T]) SubResource(sub string) client.SubResourceClient {
	return &passSubResource[T]{SubResourceClient: c.Client.SubResource(sub), p: c.p, sub: sub}
}

type passStatus[T client.Object] struct {
	client.SubResourceWriter
	p *Pass[T]
}

func (s *passStatus[T]) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.p.write(obj, "status update", func() error { return s.SubResourceWriter.Update(ctx, obj, opts...) })
}

func (s *passStatus[T]) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.p.write(obj, "status patch", func() error { return s.SubResourceWriter.Patch(ctx, obj, patch, opts...) })
}

type passSubResource[T client.Object] struct {
	client.SubResourceClient
	p   *Pass[T]
	sub string
}

func (s *passSubResource[T]) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.p.write(obj, s.sub+" update", func() error { return s.SubResourceClient.Update(ctx, obj, opts...) })
}

func (s *passSubResource[T]) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.p.write(obj, s.sub+" patch", func() error { return s.SubResourceClient.Patch(ctx, obj, patch, opts...) })
}
