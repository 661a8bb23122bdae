package apply

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// syncKind is the Kind a sync's controller reference names.
const syncKind = "InfrahubSync"

// SyncRefOf is the InfrahubSync a VidraResource's controller reference names: only a reference
// with exactly this API's apiVersion and Kind counts. The API server accepts any apiVersion in
// an owner reference, so one of another group or version with the sync's Kind, name and UID is
// a writer's claim, not the sync's; every decision that a VidraResource is a sync's (counting,
// pruning, lending Secrets, admission) goes through here and OwnedBy.
func SyncRefOf(obj metav1.Object) (name string, uid types.UID, ok bool) {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.APIVersion != infrahubv1alpha1.GroupVersion.String() || ref.Kind != syncKind || ref.Name == "" || ref.UID == "" {
		return "", "", false
	}
	return ref.Name, ref.UID, true
}

// OwnedBy reports whether vr belongs to sync s: its controller reference (SyncRefOf) names s by
// name and UID. A namesake created after the sync was deleted has another UID.
func OwnedBy(vr metav1.Object, s *infrahubv1alpha1.InfrahubSync) bool {
	name, uid, ok := SyncRefOf(vr)
	return ok && s != nil && s.UID != "" && uid == s.UID && name == s.Name
}
