package rights

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// WriterLabelValue is the value of infrahubv1alpha1.WriterLabel for a user: a digest, as a user
// name need not be a label value (and need not be shown to every reader of the object).
func WriterLabelValue(username string) string {
	h := sha256.Sum256([]byte(username))
	return hex.EncodeToString(h[:20])
}

// IsOperator reports whether user is the operator itself, whose writes are its syncs' (bounded
// per sync) and its own bookkeeping.
func (a *Admission) IsOperator(ctx context.Context, user authenticationv1.UserInfo) (bool, error) {
	op, err := a.operatorUser(ctx)
	return err == nil && user.Username == op, err
}

// checkWriter bounds how many objects of a kind one writer has: the mutating webhook labels each
// object with its writer on create and keeps the label on updates; here a create must carry its
// writer's label (else that webhook is not installed, and the object would escape the count)
// and find the writer under the bound, and no update may change the label. The operator's own
// objects pass. The count comes from the cache: writes admitted at the same moment may pass a
// few over the bound.
func (a *Admission) checkWriter(ctx context.Context, user authenticationv1.UserInfo, kind string, list client.ObjectList, old, obj metav1.Object) error {
	if isOp, err := a.IsOperator(ctx, user); err != nil || isOp {
		return err
	}
	label := infrahubv1alpha1.WriterLabel
	if old != nil {
		if old.GetLabels()[label] != obj.GetLabels()[label] {
			return fmt.Errorf("label %s records who created the %s and cannot change", label, kind)
		}
		return nil
	}
	want := WriterLabelValue(user.Username)
	if got := obj.GetLabels()[label]; got != want {
		return fmt.Errorf("the %s does not carry label %s=%s, which the mutating webhook sets: install the MutatingWebhookConfiguration with the validating one", kind, label, want)
	}
	max := a.Options.Limits.MaxObjectsPerWriter
	if max <= 0 {
		return nil
	}
	if err := a.Client.List(ctx, list, client.MatchingLabels{label: want}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("counting the %ss of user %q: %w", kind, user.Username, err)
	}
	if n := itemCount(list); n >= max {
		return fmt.Errorf("user %q already has %d %ss, the most one writer may have (--delivery-max-objects-per-writer=%d); delete some first", user.Username, n, kind, max)
	}
	return nil
}

func itemCount(list client.ObjectList) int {
	switch l := list.(type) {
	case *infrahubv1alpha1.VidraResourceList:
		return len(l.Items)
	case *infrahubv1alpha1.InfrahubSyncList:
		return len(l.Items)
	}
	return 0
}
