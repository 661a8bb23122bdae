package work

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// NewController begins the controller of one firmware kind as each of them is watched: obj's
// changes that need a pass (lifecycle.Predicate) and a wiped status (statusWiped: its state is
// empty, so the record rebuilds it), and the ServerMaintenances it opens; concurrency at least 1.
func NewController[T client.Object](mgr ctrl.Manager, name string, obj T, statusWiped func(T) bool, concurrency int) *builder.Builder {
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(obj, builder.WithPredicates(predicate.Or(lifecycle.Predicate(),
			lifecycle.StatusWiped(func(o client.Object) bool { return statusWiped(o.(T)) })))).
		Owns(&maintenancev1alpha1.ServerMaintenance{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(concurrency, 1)})
}

// ServerRequests maps a Server to the objects of newList's kind that name it, found by index
// (their server reference's field index).
func ServerRequests(c client.Reader, newList func() client.ObjectList, index string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := newList()
		if err := c.List(ctx, list, client.MatchingFields{index: o.GetName()}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		_ = meta.EachListItem(list, func(item runtime.Object) error {
			if obj, ok := item.(client.Object); ok {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			}
			return nil
		})
		return reqs
	}
}
