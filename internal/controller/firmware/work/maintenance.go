package work

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// holding is what holdMaintenance found or did.
type holding struct {
	wrote    string // the owner's spec.serverMaintenanceRef was set (the pass's write)
	created  bool   // the maintenance was created (a write to another object)
	held     bool   // the server is in it
	waiting  string // why not yet
	conflict string // the maintenance named is another server's
}

// holdMaintenance gets the server into the maintenance the owner's spec.serverMaintenanceRef
// names (*ref), one step per pass: name it (ours: name in namespace), create it (controlled by
// the owner, so it goes with it), then wait for the server to be in it. Held is read from the
// Server's own bookkeeping (its maintenance ref and durable state), never from a status.
func holdMaintenance(ctx context.Context, c client.Client, owner client.Object, ref **metalv1alpha1.ObjectReference,
	maint *maintenancev1alpha1.ServerMaintenance, server *metalv1alpha1.Server,
	name, namespace string, policy metalv1alpha1.ServerMaintenancePolicy, reason string) (holding, error) {
	if *ref == nil {
		base := owner.DeepCopyObject().(client.Object)
		*ref = &metalv1alpha1.ObjectReference{Namespace: namespace, Name: name}
		if err := c.Patch(ctx, owner, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return holding{}, fmt.Errorf("naming the ServerMaintenance: %w", err)
		}
		return holding{wrote: "maintenance named"}, nil
	}
	r := *ref
	if maint == nil {
		if policy == "" {
			policy = metalv1alpha1.ServerMaintenancePolicyOwnerApproval
		}
		m := &maintenancev1alpha1.ServerMaintenance{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name,
				Annotations: map[string]string{metalv1alpha1.MaintenanceReasonAnnotation: reason}},
			Spec: maintenancev1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: server.Name}, Policy: policy},
		}
		if err := controllerutil.SetControllerReference(owner, m, c.Scheme()); err != nil {
			return holding{}, err
		}
		if err := c.Create(ctx, m); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return holding{waiting: fmt.Sprintf("ServerMaintenance %s/%s exists but is not in the cache yet", r.Namespace, r.Name)}, nil
			}
			return holding{}, fmt.Errorf("creating ServerMaintenance %s/%s: %w", r.Namespace, r.Name, err)
		}
		return holding{created: true, wrote: "maintenance created"}, nil
	}
	if maint.Spec.ServerRef == nil || maint.Spec.ServerRef.Name != server.Name {
		return holding{conflict: fmt.Sprintf("ServerMaintenance %s/%s is not server %s's: nothing is done", r.Namespace, r.Name, server.Name)}, nil
	}
	if !maint.DeletionTimestamp.IsZero() {
		return holding{waiting: fmt.Sprintf("ServerMaintenance %s/%s is being deleted", r.Namespace, r.Name)}, nil
	}
	in := server.Spec.ServerMaintenanceRef
	if in != nil && in.Namespace == r.Namespace && in.Name == r.Name &&
		server.Annotations[lifecycle.StateAnnotation] == string(metalv1alpha1.ServerStateMaintenance) {
		return holding{held: true}, nil
	}
	if server.Annotations[metalv1alpha1.ParkedAnnotation] != "" {
		return holding{waiting: fmt.Sprintf("server %s is parked: it enters ServerMaintenance %s/%s once unparked", server.Name, r.Namespace, r.Name)}, nil
	}
	if cl := server.Spec.ServerClaimRef; cl != nil && maint.Spec.Policy != metalv1alpha1.ServerMaintenancePolicyEnforced {
		return holding{waiting: fmt.Sprintf("server %s is claimed by %s/%s: waiting for its owner to approve ServerMaintenance %s/%s (label %s on the claim)",
			server.Name, cl.Namespace, cl.Name, r.Namespace, r.Name, metalv1alpha1.MaintenanceApprovedLabel)}, nil
	}
	return holding{waiting: fmt.Sprintf("waiting for server %s to enter ServerMaintenance %s/%s", server.Name, r.Namespace, r.Name)}, nil
}

// ReleaseMaintenance deletes the maintenance the owner created, which hands the server back;
// one the user named is theirs to delete.
func ReleaseMaintenance(ctx context.Context, c client.Client, owner client.Object, maint *maintenancev1alpha1.ServerMaintenance) (lifecycle.Result, error) {
	if maint == nil || !metav1.IsControlledBy(maint, owner) || !maint.DeletionTimestamp.IsZero() {
		return lifecycle.Done(), nil
	}
	if err := c.Delete(ctx, maint); err != nil && !apierrors.IsNotFound(err) {
		return lifecycle.Result{}, fmt.Errorf("deleting ServerMaintenance %s/%s: %w", maint.Namespace, maint.Name, err)
	}
	return lifecycle.Done(), nil // its deletion (Owns) brings the next pass
}

// ServerHold is what HoldServers needs: a BMC's servers, the maintenances its object names and
// finds, and how to name them.
type ServerHold struct {
	Servers []metalv1alpha1.Server
	Named   []metalv1alpha1.ObjectReference
	Maints  map[string]*maintenancev1alpha1.ServerMaintenance // found, by name
	Prefix  string
	Policy  metalv1alpha1.ServerMaintenancePolicy
	Reason  string
	SetRefs func(owner client.Object, refs []metalv1alpha1.ObjectReference)
}

// HoldServers takes every server of a BMC into a maintenance of its own, one step per pass:
// names them on the owner (one write), creates the missing ones (controlled by the owner), then
// waits until every server is in its own; Continue once they all are.
func (a *Actor) HoldServers(ctx context.Context, w *Work, h ServerHold) (lifecycle.Result, error) {
	want := make([]metalv1alpha1.ObjectReference, 0, len(h.Servers))
	for _, s := range h.Servers {
		want = append(want, metalv1alpha1.ObjectReference{Namespace: a.Options.MaintenanceNamespace, Name: ChildName(h.Prefix, s.Name)})
	}
	if !equality.Semantic.DeepEqual(want, h.Named) {
		return lifecycle.Wrote("maintenances named"), lifecycle.PatchMetadata(ctx, w.C, w.Self, func(o client.Object) { h.SetRefs(o, want) })
	}
	created, waiting := 0, 0
	for i, s := range h.Servers {
		m := h.Maints[want[i].Name]
		if m == nil {
			m = &maintenancev1alpha1.ServerMaintenance{
				ObjectMeta: metav1.ObjectMeta{Namespace: want[i].Namespace, Name: want[i].Name,
					Annotations: map[string]string{metalv1alpha1.MaintenanceReasonAnnotation: h.Reason}},
				Spec: maintenancev1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: s.Name}, Policy: h.Policy},
			}
			if err := controllerutil.SetControllerReference(w.Self, m, w.C.Scheme()); err != nil {
				return lifecycle.Result{}, err
			}
			if err := w.C.Create(ctx, m); err != nil && !apierrors.IsAlreadyExists(err) {
				return lifecycle.Result{}, fmt.Errorf("creating ServerMaintenance %s/%s: %w", m.Namespace, m.Name, err)
			}
			created++
			continue
		}
		in := s.Spec.ServerMaintenanceRef
		if in == nil || in.Namespace != m.Namespace || in.Name != m.Name || s.Annotations[lifecycle.StateAnnotation] != string(metalv1alpha1.ServerStateMaintenance) {
			waiting++
		}
	}
	switch {
	case created > 0:
		a.Recorder.Eventf(w.Self, nil, corev1.EventTypeNormal, "MaintenanceRequested", "Maintain", "%d ServerMaintenance(s) requested for the servers of %s", created, w.Target())
		return lifecycle.Done(), nil
	case waiting > 0:
		w.Waiting = fmt.Sprintf("waiting for %d of %d server(s) of %s to enter maintenance", waiting, len(h.Servers), w.Target())
		return lifecycle.Done(), nil
	}
	return lifecycle.Continue(), nil
}

// ReleaseAll deletes the maintenances the owner created.
func ReleaseAll(ctx context.Context, c client.Client, owner client.Object, maints map[string]*maintenancev1alpha1.ServerMaintenance) (lifecycle.Result, error) {
	for _, m := range maints {
		if metav1.IsControlledBy(m, owner) && m.DeletionTimestamp.IsZero() {
			if err := c.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
				return lifecycle.Result{}, fmt.Errorf("deleting ServerMaintenance %s/%s: %w", m.Namespace, m.Name, err)
			}
		}
	}
	return lifecycle.Done(), nil
}
