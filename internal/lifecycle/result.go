package lifecycle

import (
	"math/rand/v2"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// DefaultResync is how often an object is looked at when nothing happens to it: the safety net
// for missed events and for observing hardware that does not send any.
const DefaultResync = 10 * time.Minute

type resultKind int

const (
	kindDone resultKind = iota
	kindWrote
	kindRequeue
	kindContinue
)

// Result is what a single-step handler says after its look: it wrote (stop, the write's event
// continues), wants another look after a delay, or is done until something changes.
type Result struct {
	kind  resultKind
	after time.Duration
	ahead bool
	// Reason says why, for logs and tests.
	Reason string
}

// Wrote says the handler wrote and the pass must stop.
func Wrote(reason string) Result { return Result{kind: kindWrote, Reason: reason} }

// RequeueAfter asks for another pass after d (e.g. to observe a power action in flight).
func RequeueAfter(d time.Duration, reason string) Result {
	return Result{kind: kindRequeue, after: d, Reason: reason}
}

// AheadPriority is the work-queue priority of a pass asked for with Ahead; new objects and
// their events come at 0.
const AheadPriority = 10

// Ahead puts the object's next pass ahead of objects still waiting for their first: a claim
// that holds its server reports Bound before the next one starts binding, instead of after all
// of them. It takes a requeue to carry it; controller-runtime's priority queue keeps the higher
// of two adds, so the write's own watch event (at 0) does not lower it.
func (r Result) Ahead() Result {
	r.ahead = true
	return r
}

// Done says nothing is left to do until an event or the periodic resync.
func Done() Result { return Result{kind: kindDone} }

// Continue says a step found nothing to do and the next step runs (see Steps). A handler that
// returns it is Done.
func Continue() Result { return Result{kind: kindContinue} }

// IsContinue reports whether the step let the next one run.
func (r Result) IsContinue() bool { return r.kind == kindContinue }

// IsWrote reports whether the handler wrote.
func (r Result) IsWrote() bool { return r.kind == kindWrote }

// After is the requeue delay of a RequeueAfter result, else 0.
func (r Result) After() time.Duration {
	if r.kind == kindRequeue {
		return r.after
	}
	return 0
}

// ctrlResult turns r into a controller-runtime result. A write needs no requeue: its watch
// event brings the next pass. Done still comes back after resync (jittered so that a fleet
// created at once does not resync at once).
func (r Result) ctrlResult(resync time.Duration) ctrl.Result {
	switch r.kind {
	case kindWrote:
		return ctrl.Result{}
	case kindRequeue:
		if r.ahead {
			return ctrl.Result{RequeueAfter: r.after, Priority: new(AheadPriority)}
		}
		return ctrl.Result{RequeueAfter: r.after}
	default:
		if resync <= 0 {
			return ctrl.Result{}
		}
		return ctrl.Result{RequeueAfter: Jitter(resync)}
	}
}

// Jitter spreads d by up to a tenth, so that objects created at once are not all looked at
// again at once.
func Jitter(d time.Duration) time.Duration { return d + rand.N(d/10+1) }
