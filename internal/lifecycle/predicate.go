package lifecycle

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// Predicate passes every event a single-step reconciler needs and drops status churn: an update
// passes when the generation (spec), annotations, labels, finalizers, owner references or
// deletion timestamp changed. A status-only write — our own report fields — does not pass.
//
// A plain GenerationChangedPredicate is not enough: our state annotation, a user's operation or
// requested-at annotation, a finalizer removed by another controller and a deletion all leave
// the generation as it was, and the next step would never run.
func Predicate() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			if e.ObjectOld == nil || e.ObjectNew == nil {
				return true
			}
			return Relevant(e.ObjectOld, e.ObjectNew)
		},
	}
}

// Relevant reports whether the change from old to new is one a reconciler must see.
func Relevant(old, new client.Object) bool {
	return old.GetGeneration() != new.GetGeneration() ||
		!maps.Equal(old.GetAnnotations(), new.GetAnnotations()) ||
		!maps.Equal(old.GetLabels(), new.GetLabels()) ||
		!slices.Equal(old.GetFinalizers(), new.GetFinalizers()) ||
		!equality.Semantic.DeepEqual(old.GetOwnerReferences(), new.GetOwnerReferences()) ||
		!equality.Semantic.DeepEqual(old.GetDeletionTimestamp(), new.GetDeletionTimestamp())
}

// StatusWiped passes a status update that left the object without its reported state (a wiped or
// restored status), so it is rebuilt at once rather than at the next resync. Our own reports
// always set the state and do not pass.
func StatusWiped(empty func(client.Object) bool) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld != nil && e.ObjectNew != nil && !empty(e.ObjectOld) && empty(e.ObjectNew)
		},
	}
}
