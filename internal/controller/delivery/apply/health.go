package apply

import (
	"context"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/controller/delivery/target"
)

// DefaultHealthPoll is how soon a VidraResource whose objects are still progressing looks
// again: a rollout sends no event we watch for (our watches are on our own fields).
const DefaultHealthPoll = 15 * time.Second

// HealthRank orders kstatus results, worst first: the VidraResource reports the worst.
var HealthRank = map[status.Status]int{
	status.FailedStatus: 0, status.NotFoundStatus: 1, status.InProgressStatus: 2,
	status.TerminatingStatus: 3, status.UnknownStatus: 4, status.CurrentStatus: 5,
}

// Health is how the applied objects are doing.
type Health struct {
	Status   status.Status
	NotReady []string // "Kind/ns/name: Status: message", worst first
}

// Judge decides an object's health instead of kstatus; matched false leaves it to kstatus.
type Judge func(ctx context.Context, obj *unstructured.Unstructured) (st status.Status, msg string, matched bool)

// ObjectHealth reads the object and computes its health: judge's (spec.healthExpressions) when
// it has an opinion on the object, else kstatus's.
func ObjectHealth(ctx context.Context, t *target.Target, ref target.ObjectRef, judge Judge) (status.Status, string) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.GVK)
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	if err := t.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return status.NotFoundStatus, "not found"
		}
		return status.UnknownStatus, err.Error()
	}
	if judge != nil {
		if st, msg, ok := judge(ctx, u); ok {
			return st, msg
		}
	}
	res, err := status.Compute(u)
	if err != nil {
		return status.UnknownStatus, err.Error()
	}
	return res.Status, res.Message
}
