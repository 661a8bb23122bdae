package lifecycle

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ConflictRetry is how soon a pass whose write lost an optimistic-lock race looks again.
const ConflictRetry = 100 * time.Millisecond

// Handler is a single-step handler: look at p.Obj, do at most one write through p.Client(),
// return what happened. After a spec or metadata write, Wrote: its watch event brings the next
// pass. After a status-only write (which the Predicate filters out by design), Done or
// RequeueAfter: no event will come.
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
	if r.Guard.Stale(obj) {
		return ctrl.Result{RequeueAfter: StaleRetry}, nil
	}
	p := newPass(obj, r.Client, r.Guard)
	res, err := r.Handle(ctx, p)
	if err != nil {
		// Lost an optimistic-lock race: someone else changed the object; decide again on the
		// fresh one, soon and without an error in the logs (IsConflict sees through wrapping).
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: ConflictRetry}, nil
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
