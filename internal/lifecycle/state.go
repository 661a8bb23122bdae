package lifecycle

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// StateAnnotation holds an object's lifecycle state. Metadata survives a wiped or restored
// status; status does not.
const StateAnnotation = "lifecycle.metalhub.io/state"

// Source says where a state read came from.
type Source string

const (
	// FromAnnotation is the durable bookkeeping: the normal case.
	FromAnnotation Source = "Annotation"
	// FromDerived was derived from what the controller controls (claim ref, maintenance ref, ...).
	FromDerived Source = "Derived"
	// FromAdopted was adopted once from a status written by the reference operator.
	FromAdopted Source = "Adopted"
	// FromInitial means nothing was known: the object starts its lifecycle.
	FromInitial Source = "Initial"
)

// Store reads and writes one kind's lifecycle state.
type Store[S ~string] struct {
	// Initial is the state of an object nothing is known about.
	Initial S
	// Valid reports whether a value is a state of this lifecycle; others are ignored.
	Valid func(S) bool
	// Derive derives the state from what the controller itself controls, for objects whose
	// annotation is missing (restored from a backup without it, say).
	Derive func(client.Object) (S, bool)
	// Adopt reads a state the reference operator left in status, for migrated objects.
	Adopt func(client.Object) (S, bool)
	// Managed reports whether obj shows that this controller has kept its state before (a
	// status it wrote, bookkeeping of its own). Such an object is never adopted again: its
	// status.state is our own mirror, which can lag the annotation it mirrors, so after the
	// annotation is lost it is derived or starts over, never read back from status.
	Managed func(client.Object) bool
}

// Get returns obj's state and where it came from: the annotation, else derived, else adopted
// (only for an object this controller never managed), else Initial. It never writes: when the source is not
// FromAnnotation the caller persists the state with Set as its one write of the pass.
func (s Store[S]) Get(obj client.Object) (S, Source) {
	if v, ok := obj.GetAnnotations()[StateAnnotation]; ok && s.valid(S(v)) {
		return S(v), FromAnnotation
	}
	if s.Derive != nil {
		if v, ok := s.Derive(obj); ok && s.valid(v) {
			return v, FromDerived
		}
	}
	if s.Adopt != nil && (s.Managed == nil || !s.Managed(obj)) {
		if v, ok := s.Adopt(obj); ok && s.valid(v) {
			return v, FromAdopted
		}
	}
	return s.Initial, FromInitial
}

func (s Store[S]) valid(v S) bool {
	if v == "" {
		return false
	}
	return s.Valid == nil || s.Valid(v)
}

// Set records state on obj with an optimistic lock: if obj changed since it was read, the patch
// fails with a conflict and the next pass decides again on fresh data. obj is updated in place.
func (s Store[S]) Set(ctx context.Context, c client.Writer, obj client.Object, state S) error {
	return PatchMetadata(ctx, c, obj, func(o client.Object) {
		SetAnnotation(o, StateAnnotation, string(state))
	})
}

// PatchMetadata applies mutate to obj and patches the difference with an optimistic lock.
func PatchMetadata(ctx context.Context, c client.Writer, obj client.Object, mutate func(client.Object)) error {
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T is not a client.Object", obj)
	}
	mutate(obj)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("patching metadata of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// SetAnnotation sets one annotation, creating the map if needed.
func SetAnnotation(obj client.Object, key, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
}

// RemoveAnnotation removes one annotation.
func RemoveAnnotation(obj client.Object, key string) {
	a := obj.GetAnnotations()
	delete(a, key)
	obj.SetAnnotations(a)
}

// AddFinalizer adds f to obj unless obj is being deleted: the API server refuses a new finalizer
// on a deleting object, and a pass that tried would fail on every retry.
func AddFinalizer(obj client.Object, f string) {
	if obj.GetDeletionTimestamp().IsZero() {
		controllerutil.AddFinalizer(obj, f)
	}
}
