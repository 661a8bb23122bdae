package lifecycle

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Step is one step of a pass over P (a *Pass, or a controller's own pass that embeds one): it
// acts and says so (Wrote, RequeueAfter, Done), or finds nothing to do and says Continue.
type Step[P any] func(ctx context.Context, p P) (Result, error)

// Steps runs steps in order until one returns anything but Continue, or an error; that is the
// pass's result. All of them continuing is Done. So a controller reads as its list of steps
// (Cluster API's phases), and a step that wrote ends the pass with its write.
func Steps[P any](ctx context.Context, p P, steps ...Step[P]) (Result, error) {
	for _, step := range steps {
		res, err := step(ctx, p)
		if err != nil || !res.IsContinue() {
			return res, err
		}
	}
	return Done(), nil
}

// PassOf is what the shared steps need of a controller's pass: a *Pass, or a struct of the
// controller's that embeds one.
type PassOf interface {
	Object() client.Object
	Client() client.Client
}

// Object returns the reconciled object.
func (p *Pass[T]) Object() client.Object { return p.Obj }

// DoneIf ends the pass, Done, for an object cond holds for (one a user asked to be left alone).
func DoneIf[P PassOf](cond func(client.Object) bool) Step[P] {
	return func(_ context.Context, p P) (Result, error) {
		if cond(p.Object()) {
			return Done(), nil
		}
		return Continue(), nil
	}
}

// OnDeletion runs step for an object being deleted, and ends the pass with it.
func OnDeletion[P PassOf](step Step[P]) Step[P] {
	return func(ctx context.Context, p P) (Result, error) {
		if p.Object().GetDeletionTimestamp().IsZero() {
			return Continue(), nil
		}
		return step(ctx, p)
	}
}

// EnsureFinalizer adds finalizer, one write that ends the pass, before anything else is done
// that the finalizer must undo.
func EnsureFinalizer[P PassOf](finalizer string) Step[P] {
	return func(ctx context.Context, p P) (Result, error) {
		o := p.Object()
		if slices.Contains(o.GetFinalizers(), finalizer) {
			return Continue(), nil
		}
		return Wrote("finalizer"), PatchMetadata(ctx, p.Client(), o, func(o client.Object) { AddFinalizer(o, finalizer) })
	}
}
