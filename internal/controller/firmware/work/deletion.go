package work

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/firmware/record"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Finalizer holds every firmware object, and every *Set, until deleting it leaves its box safe:
// without it, deleting an object mid-flash garbage-collects its ServerMaintenance and hands the
// box back with an image being written or a restart owed, and a Set's recreated child flashes
// again.
const Finalizer = "system.metalhub.io/firmware"

// underWay: the record's phase has sent something whose end is not seen yet (a flash, its task,
// the restart it owes, the read-back after it). A deleted object sees these through; from any
// other phase nothing was sent, or all of it ended, and it may go.
func underWay(w *Work) bool {
	if !w.HasRec {
		return false
	}
	switch w.Rec.Phase {
	case record.PhaseIssuing, record.PhaseTask, record.PhaseReboot, record.PhaseVerify:
		return true
	}
	return false
}

// Leave lets go of a deleted firmware object at a safe point, one write a pass: first the
// maintenances metalhub made for it (their deletion hands the box back), then the finalizer.
// Continue while the object is not being deleted, or has work under way (the steps after this
// one see it through and start nothing new: every phase that would start something is one
// Leave ends first).
func (a *Actor) Leave(ctx context.Context, w *Work, maints ...*maintenancev1alpha1.ServerMaintenance) (lifecycle.Result, error) {
	o := w.Self
	if o.GetDeletionTimestamp().IsZero() || underWay(w) {
		return lifecycle.Continue(), nil
	}
	for _, m := range maints {
		if m != nil && metav1.IsControlledBy(m, o) && m.DeletionTimestamp.IsZero() {
			if err := w.C.Delete(ctx, m); client.IgnoreNotFound(err) != nil {
				return lifecycle.Result{}, fmt.Errorf("deleting ServerMaintenance %s/%s: %w", m.Namespace, m.Name, err)
			}
			return lifecycle.Wrote("maintenance released"), nil
		}
	}
	if !controllerutil.ContainsFinalizer(o, Finalizer) {
		return lifecycle.Done(), nil
	}
	a.Recorder.Eventf(o, nil, corev1.EventTypeNormal, "Released", "Delete", "nothing under way on %s: the object may go", w.Target())
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, w.C, o, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
	})
}

// MaintList is maints as a list, for Leave.
func MaintList(maints map[string]*maintenancev1alpha1.ServerMaintenance) []*maintenancev1alpha1.ServerMaintenance {
	out := make([]*maintenancev1alpha1.ServerMaintenance, 0, len(maints))
	for _, m := range maints {
		out = append(out, m)
	}
	return out
}

// targetGone ends the pass of an object whose target is not there (no reference, or the Server or
// BMC it names does not exist): nothing can be under way on it, so a deleted one goes at once.
func (a *Actor) targetGone(ctx context.Context, w *Work) (lifecycle.Result, error) {
	o := w.Self
	if o.GetDeletionTimestamp().IsZero() || !controllerutil.ContainsFinalizer(o, Finalizer) {
		return lifecycle.Done(), nil
	}
	return lifecycle.Wrote("finalizer removed"), lifecycle.PatchMetadata(ctx, w.C, o, func(o client.Object) {
		controllerutil.RemoveFinalizer(o, Finalizer)
	})
}
