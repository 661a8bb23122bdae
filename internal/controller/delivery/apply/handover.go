package apply

import (
	"fmt"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// Handover is what a VidraResource's HandoverAnnotation comes to once checked: the
// VidraResource (name, uid) whose objects it takes over, or why it does not.
type Handover struct {
	Name, UID string
	// Honoured: both are of one sync; refused says why not (nil without the annotation).
	Honoured bool
	Refused  error
}

// HandoverRefusal says why vr may not take over the objects of from (nil: gone), the
// VidraResource its annotation names with uid; s is the sync vr's controller reference names
// (nil: none, or gone). Nil when both are of s.
func HandoverRefusal(vr, from *infrahubv1alpha1.VidraResource, s *infrahubv1alpha1.InfrahubSync, uid string) error {
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
