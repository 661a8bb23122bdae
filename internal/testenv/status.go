package testenv

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WriteStatus writes obj's status as a test's outsider would (a wiped status, a restore, a
// status from another operator): controllers never write status themselves, the lifecycle
// Reconciler does.
func WriteStatus(ctx context.Context, c client.Client, obj client.Object) error {
	return c.Status().Update(ctx, obj)
}
