package delivery

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// handover is what a VidraResource's HandoverAnnotation comes to once checked: the
// VidraResource (name, uid) whose objects it takes over, or why it does not.
type handover struct {
	name, uid string
	// honoured: both are of one sync; refused says why not (nil without the annotation).
	honoured bool
	refused  error
}

// checkedHandover reads vr's HandoverAnnotation and honours it only between VidraResources of
// one InfrahubSync: the sync writes it when an artifact's id changes (the webhook refuses it
// from anyone else). Anyone who may write a VidraResource into a namespace could otherwise
// name another's there and take its objects. A read error refuses too: never take over on a
// guess.
func (r *VidraResourceReconciler) checkedHandover(ctx context.Context, vr *infrahubv1alpha1.VidraResource) handover {
	name, uid, ok := handoverOf(vr)
	if !ok {
		return handover{}
	}
	h := handover{name: name, uid: uid}
	var s *infrahubv1alpha1.InfrahubSync
	if syncName, _, ok := SyncRefOf(vr); ok {
		s = &infrahubv1alpha1.InfrahubSync{}
		if err := r.client.Get(ctx, client.ObjectKey{Name: syncName}, s); apierrors.IsNotFound(err) {
			s = nil
		} else if err != nil {
			h.refused = fmt.Errorf("reading InfrahubSync %s: %w", syncName, err)
			return h
		}
	}
	from := &infrahubv1alpha1.VidraResource{}
	if err := r.client.Get(ctx, client.ObjectKey{Name: name}, from); apierrors.IsNotFound(err) {
		from = nil
	} else if err != nil {
		h.refused = fmt.Errorf("reading VidraResource %s: %w", name, err)
		return h
	}
	h.refused = handoverRefusal(vr, from, s, uid)
	h.honoured = h.refused == nil
	return h
}

// handoverRefusal says why vr may not take over the objects of from (nil: gone), the
// VidraResource its annotation names with uid; s is the sync vr's controller reference names
// (nil: none, or gone). Nil when both are of s.
func handoverRefusal(vr, from *infrahubv1alpha1.VidraResource, s *infrahubv1alpha1.InfrahubSync, uid string) error {
	switch {
	case s == nil || !OwnedBy(vr, s):
		return fmt.Errorf("%s is honoured only on a VidraResource of an InfrahubSync, and this one is of none", infrahubv1alpha1.HandoverAnnotation)
	case from == nil:
		return fmt.Errorf("%s names VidraResource %s, which is gone", infrahubv1alpha1.HandoverAnnotation, vr.Annotations[infrahubv1alpha1.HandoverAnnotation])
	case string(from.UID) != uid:
		return fmt.Errorf("%s names VidraResource %s with uid %s, and it has uid %s", infrahubv1alpha1.HandoverAnnotation, from.Name, uid, from.UID)
	case !OwnedBy(from, s):
		return fmt.Errorf("%s names VidraResource %s, which is not of InfrahubSync %s", infrahubv1alpha1.HandoverAnnotation, from.Name, s.Name)
	}
	return nil
}
