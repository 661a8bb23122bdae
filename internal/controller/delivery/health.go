package delivery

import (
	"context"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// DefaultHealthPoll is how soon a VidraResource whose objects are still progressing looks
// again: a rollout sends no event we watch for (our watches are on our own fields).
const DefaultHealthPoll = 15 * time.Second

// healthRank orders kstatus results, worst first: the VidraResource reports the worst.
var healthRank = map[status.Status]int{
	status.FailedStatus: 0, status.NotFoundStatus: 1, status.InProgressStatus: 2,
	status.TerminatingStatus: 3, status.UnknownStatus: 4, status.CurrentStatus: 5,
}

// health is how the applied objects are doing.
type health struct {
	status   status.Status
	notReady []string // "Kind/ns/name: Status: message", worst first
}

func objectHealth(ctx context.Context, t *target, ref objectRef) (status.Status, string) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.GVK)
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	if err := t.client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return status.NotFoundStatus, "not found"
		}
		return status.UnknownStatus, err.Error()
	}
	res, err := status.Compute(u)
	if err != nil {
		return status.UnknownStatus, err.Error()
	}
	return res.Status, res.Message
}

// reportHealth sets status.health and the Healthy condition from h (nil: not computed this pass).
func reportHealth(st *infrahubv1alpha1.VidraResourceStatus, generation int64, h *health) {
	if h == nil {
		return
	}
	st.Health = string(h.status)
	if h.status == status.CurrentStatus {
		lifecycle.SetCondition(&st.Conditions, generation, infrahubv1alpha1.ConditionHealthy, metav1.ConditionTrue, string(status.CurrentStatus), "every applied object is Current")
		return
	}
	lifecycle.SetCondition(&st.Conditions, generation, infrahubv1alpha1.ConditionHealthy, metav1.ConditionFalse, string(h.status), clip(strings.Join(h.notReady, "; ")))
}
