package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConflictRetry is how soon a pass whose write lost an optimistic-lock race looks again.
const ConflictRetry = 100 * time.Millisecond

// FencedRetry is how soon a pass whose request its fence refused looks again: by then the
// shard's renewal has moved the fence on, or the shard is gone and the pass ends at once.
const FencedRetry = time.Second

// Ownership is what Reconciler.Owner says of an object.
type Ownership int

const (
	// NotOwned: another process's to act on; left alone.
	NotOwned Ownership = iota
	// Owned: this process acts on it now.
	Owned
	// OwnedUncertain: held, but not for certain this moment (a renewal running late, a hand-over
	// under way): looked at again after FencedRetry.
	OwnedUncertain
)

// fenced is an error of a request its fence refused (bmc.Error with reason Fenced): not a failure
// of anything, so no error in the logs and no backoff.
type fenced interface{ Fenced() bool }

func isFenced(err error) bool {
	var f fenced
	return errors.As(err, &f) && f.Fenced()
}

// Handler is a single-step handler: look at p.Obj, do at most one write through p.Client(),
// return what happened. After a spec or metadata write, Wrote: its watch event brings the next
// pass. Status is not written by the handler: it changes p.Obj's status in memory, and the
// Reconciler writes it when the pass made no other write, also when the handler failed: the
// failure is part of the report (see status.go). A status-only write brings no event (the Predicate filters it by design), so
// after one the result's Done or RequeueAfter says when to look again.
type Handler[T client.Object] func(ctx context.Context, p *Pass[T]) (Result, error)

// Reconciler runs a Handler under the discipline: it reads the object from the cache, refuses to
// act on a cache older than our last write, hands the handler a Pass (which refuses a second
// write), and turns the result into a requeue.
type Reconciler[T client.Object] struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// New returns an empty object of the reconciled kind.
	New func() T
	// Handle is the handler.
	Handle Handler[T]
	// Guard remembers our writes; shared by nobody else.
	Guard *Guard
	// Resync is the periodic look when nothing happens; 0 disables it.
	Resync time.Duration
	// ResyncFunc, if set, gives the periodic look at pass time instead of Resync (for intervals
	// that follow settings changed at run time).
	ResyncFunc func(context.Context) time.Duration
	// Owner, if set, says whether this process acts on obj now (internal/shard): an object it
	// does not own is left alone, not even its pause acknowledged; one it owns is handled under
	// the context Owner returns (which fences the pass's BMC requests); one it holds but not for
	// certain this moment (a renewal late) is looked at again after FencedRetry, never dropped:
	// nothing else would bring it back while this process keeps holding it.
	Owner func(ctx context.Context, obj client.Object) (context.Context, Ownership)
	// Context, if set, gives the context a pass over obj runs in, its report's write included
	// (the claim controller marks a binding's writes urgent: apilimit.Urgent).
	Context func(ctx context.Context, obj T) context.Context
}

// NewReconciler returns a Reconciler with a fresh guard and the default resync.
func NewReconciler[T client.Object](c client.Client, newObj func() T, h Handler[T]) *Reconciler[T] {
	return &Reconciler[T]{Client: c, New: newObj, Handle: h, Guard: NewGuard(), Resync: DefaultResync}
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler[T]) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := r.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if r.Owner != nil {
		var own Ownership
		switch ctx, own = r.Owner(ctx, obj); own {
		case NotOwned:
			return ctrl.Result{}, nil
		case OwnedUncertain:
			return ctrl.Result{RequeueAfter: FencedRetry}, nil
		}
	}
	if r.Context != nil {
		ctx = r.Context(ctx, obj)
	}
	if Paused(obj) {
		// Removing the annotation is an update: it brings the next pass. The one write a paused
		// object gets is the acknowledgement, from the pass that saw the pause: passes of one
		// object never overlap, so from here on none of ours is in flight on it.
		return ctrl.Result{}, acknowledgePause(ctx, r.Client, obj)
	}
	if r.Guard.Stale(obj) {
		return ctrl.Result{RequeueAfter: StaleRetry}, nil
	}
	p := newPass(obj, r.Client, r.Guard)
	before := statusOf(obj)
	res, err := r.Handle(ctx, p)
	if r.Owner != nil {
		switch _, own := r.Owner(ctx, obj); own {
		case NotOwned:
			// Given up during the pass: its report is the new holder's to make.
			return ctrl.Result{}, nil
		case OwnedUncertain:
			// Not for certain ours now: no report; the pass is made again once it is (or
			// ends at once when the shard went).
			return ctrl.Result{RequeueAfter: FencedRetry}, nil
		}
	}
	if p.wrote == "" && statusChanged(before, p.Obj) {
		// The pass's report, failed or not: one write, optimistically locked by the
		// resourceVersion it read. (A write the handler attempted, even a failed one, counts:
		// then nothing more is written.)
		if werr := p.Client().Status().Update(ctx, p.Obj); werr != nil {
			err = errors.Join(err, fmt.Errorf("writing %s status: %w", kindOf(p.Obj), werr))
		}
	}
	if err != nil {
		// Lost an optimistic-lock race: someone else changed the object; decide again on the
		// fresh one, soon and without an error in the logs (IsConflict sees through wrapping).
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: ConflictRetry}, nil
		}
		if r.Owner != nil && isFenced(err) {
			return ctrl.Result{RequeueAfter: FencedRetry}, nil
		}
		return ctrl.Result{}, err
	}
	// A status-only write brings no event (the Predicate drops it by design): a handler that
	// says Wrote after one would never be looked at again, so it gets the periodic look.
	if res.IsWrote() && p.wroteStatusOnly() {
		res = Done()
	}
	resync := r.Resync
	if r.ResyncFunc != nil {
		resync = r.ResyncFunc(ctx)
	}
	return res.ctrlResult(resync), nil
}

// kindOf names obj's kind for messages ("server" for *v1alpha1.Server).
func kindOf(obj client.Object) string {
	t := fmt.Sprintf("%T", obj)
	return strings.ToLower(t[strings.LastIndex(t, ".")+1:])
}

// PausedAnnotation pauses every controller of an object: no pass, no write, no BMC or cluster
// action, until it is removed. "metalhub move" sets it on the source before copying and on the
// copies until all have arrived, so neither manager acts on a fleet in transit.
const PausedAnnotation = "metalhub.io/paused"

// PauseAckAnnotation is how a controller acknowledges a pause: the value of PausedAnnotation it
// saw, written once no pass of it on the object is in flight (the pass that writes it is the
// only one). "metalhub move" sets a pause value of its own and copies nothing before every
// object of the source says it: a source whose controllers are gone, or are not metalhub's,
// never acknowledges, and the move stops unless told the source is stopped.
const PauseAckAnnotation = "metalhub.io/paused-ack"

// acknowledgePause writes PauseAckAnnotation on a paused object that does not carry it yet.
func acknowledgePause(ctx context.Context, c client.Client, obj client.Object) error {
	v := obj.GetAnnotations()[PausedAnnotation]
	if obj.GetAnnotations()[PauseAckAnnotation] == v {
		return nil
	}
	err := PatchMetadata(ctx, c, obj, func(o client.Object) { SetAnnotation(o, PauseAckAnnotation, v) })
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // the newer object's event brings the next look
	}
	if apierrors.IsForbidden(err) {
		// A kind this operator may not patch is paused all the same; only a move that waits
		// for it would notice, and names it.
		ctrl.LoggerFrom(ctx).V(1).Info("cannot acknowledge the pause", "error", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("acknowledging the pause of %s: %w", kindOf(obj), err)
	}
	return nil
}

// MovedFromAnnotation marks a copy "metalhub move" made with the UID of its source object: a
// move run again knows its own copies, and bookkeeping that names the source by UID (a
// server's maintenance boot) still recognises the copy.
const MovedFromAnnotation = "metalhub.io/moved-from"

// Paused reports whether o carries PausedAnnotation (any value but "false").
func Paused(o client.Object) bool {
	v, ok := o.GetAnnotations()[PausedAnnotation]
	return ok && v != "false"
}
