package server

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// blockDeletion holds a deleted server while a claim or maintenance holds it (read from durable
// bookkeeping and refs, never from status), and reports why. It needs no BMC.
func (r *Reconciler) blockDeletion(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	s := p.Obj
	if s.DeletionTimestamp.IsZero() {
		return lifecycle.Continue(), nil
	}
	if !controllerutil.ContainsFinalizer(s, Finalizer) {
		return lifecycle.Done(), nil
	}
	held, why, err := r.held(ctx, p)
	if err != nil {
		return lifecycle.Result{}, err
	}
	if !held {
		return lifecycle.Continue(), nil
	}
	st := s.Status.DeepCopy()
	serverstate.Mirror(st, s.Generation, p.state)
	lifecycle.SetCondition(&st.Conditions, s.Generation, metalv1alpha1.ConditionDeletionBlocked, metav1.ConditionTrue, "Held", why)
	if !equality.Semantic.DeepEqual(*st, s.Status) {
		r.Recorder.Eventf(s, nil, corev1.EventTypeWarning, "DeletionBlocked", "Delete", "%s", why)
		s.Status = *st // the Reconciler writes it
	}
	return lifecycle.RequeueAfter(r.Options.RetryAfter, "deletion blocked"), nil
}

// finalize powers off a deleted server that nothing holds any more (blockDeletion ran first) and
// lets it go; a settings-only one is let go as it runs (its owner's).
func (r *Reconciler) finalize(bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if p.state != metalv1alpha1.ServerStateParked && p.settingsOnly == "" {
		if res, err := r.converge(ctx, p, metalv1alpha1.PowerOff, false); err != nil || !res.IsContinue() {
			return res, err
		}
	}
	return r.release(ctx, p)
}

// held reports whether a claim or maintenance still holds the server.
func (r *Reconciler) held(ctx context.Context, p *serverPass) (bool, string, error) {
	if p.state == metalv1alpha1.ServerStateReserved || p.Obj.Spec.ServerClaimRef != nil {
		if c, err := r.claimOf(ctx, p); err != nil || c != nil {
			if c != nil {
				return true, fmt.Sprintf("claimed by %s/%s: delete the claim first", c.Namespace, c.Name), nil
			}
			return false, "", err
		}
	}
	if p.state == metalv1alpha1.ServerStateMaintenance || p.Obj.Spec.ServerMaintenanceRef != nil {
		if m, err := r.maintenanceObj(ctx, p); err != nil || m != nil {
			if m != nil {
				return true, fmt.Sprintf("in maintenance %s/%s: delete the maintenance first", m.Namespace, m.Name), nil
			}
			if err != nil {
				return false, "", err
			}
		}
		if p.Obj.Spec.ServerMaintenanceRef == nil && p.state == metalv1alpha1.ServerStateMaintenance {
			return false, "", nil
		}
	}
	return false, "", nil
}

// release records the cleaning its machine is still owed, then removes the server's discovery
// objects and its finalizer.
func (r *Reconciler) release(ctx context.Context, p *serverPass) (lifecycle.Result, error) {
	if !controllerutil.ContainsFinalizer(p.Obj, Finalizer) {
		return lifecycle.Done(), nil
	}
	if err := r.oweCleaning(ctx, p); err != nil {
		return lifecycle.Result{}, err
	}
	if err := r.deleteRound(ctx, p); err != nil {
		return lifecycle.Result{}, err
	}
	r.failures.Delete(p.Obj.Name)
	r.inventories.Forget(p.Obj.UID)
	if r.health != nil {
		r.health.Forget(p.Obj.UID)
	}
	r.ledSetAt.Delete(p.Obj.UID)
	r.bootOrderSetAt.Delete(p.Obj.UID)
	return lifecycle.Wrote("finalizer removed"), r.patch(ctx, p, func(s *metalv1alpha1.Server) {
		controllerutil.RemoveFinalizer(s, Finalizer)
	})
}
