package delivery

import (
	"context"
	"strings"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
)

// SettingsReconciler watches the settings ConfigMap (labelled app=vidra). Passes read the
// settings themselves, so this reconciler only (a) tells the ConfigMap's author about unknown
// keys and malformed values — with a Warning event and a log line, never a crash (defect 10) —
// and (b) when the effective settings change, starts a pass of every InfrahubSync and
// VidraResource, so a shorter interval or another query name takes effect now, not after the
// interval that was scheduled under the old settings.
type SettingsReconciler struct {
	source     *policy.SettingsSource
	client     client.Client // the manager's: cached reads
	recorder   recorder.EventRecorder
	syncEvents chan<- event.GenericEvent
	vrEvents   chan<- event.GenericEvent

	mu       sync.Mutex
	last     policy.Settings
	reported map[string]bool // ConfigMap ns/name@resourceVersion already reported
}

// settingsRequest is the one request all ConfigMap events map to: there is one set of settings.
var settingsRequest = ctrl.Request{NamespacedName: client.ObjectKey{Name: "delivery-settings"}}

// Reconcile recomputes the settings, reports problems once per ConfigMap version and broadcasts
// a change.
func (r *SettingsReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	v := r.source.View(ctx)
	r.mu.Lock()
	for _, cm := range v.Conflicting {
		key := cm.Namespace + "/" + cm.Name + "@" + cm.ResourceVersion + "#conflict:" + v.Key
		if !r.reported[key] {
			r.reported[key] = true
			log.Error(nil, "settings ConfigMaps conflict", "configmap", cm.Namespace+"/"+cm.Name, "problem", v.Problems[0])
			r.recorder.Eventf(cm, nil, "Warning", infrahubv1alpha1.ReasonSettingsConflict, "Configure", "%s", clipNote(v.Problems[0]))
		}
	}
	if v.From != nil && len(v.Problems) > 0 {
		key := v.From.Namespace + "/" + v.From.Name + "@" + v.From.ResourceVersion
		if !r.reported[key] {
			r.reported[key] = true
			for _, p := range v.Problems {
				log.Info("settings ConfigMap problem", "configmap", v.From.Namespace+"/"+v.From.Name, "problem", p)
			}
			// One event with every problem: events of one object, reason and action are
			// merged into a series that keeps the first note only.
			r.recorder.Eventf(v.From, nil, "Warning", "InvalidSetting", "Configure", "%s", clipNote(strings.Join(v.Problems, "; ")))
		}
	}
	changed := v.Settings != r.last
	r.last = v.Settings
	r.mu.Unlock()
	if !changed {
		return ctrl.Result{}, nil
	}
	from := "flags"
	if v.From != nil {
		from = "ConfigMap " + v.From.Namespace + "/" + v.From.Name
	}
	log.Info("delivery settings changed", "from", from,
		"requeueSyncAfter", v.Settings.RequeueSyncAfter.String(), "requeueResourcesAfter", v.Settings.RequeueResourcesAfter.String(),
		"queryName", v.Settings.QueryName, "eventBasedReconcile", v.Settings.EventBasedReconcile)
	return ctrl.Result{}, r.broadcast(ctx)
}

// broadcast starts a pass of every InfrahubSync and VidraResource.
func (r *SettingsReconciler) broadcast(ctx context.Context) error {
	var syncs infrahubv1alpha1.InfrahubSyncList
	if err := r.client.List(ctx, &syncs); err != nil {
		return err
	}
	var vrs infrahubv1alpha1.VidraResourceList
	if err := r.client.List(ctx, &vrs); err != nil {
		return err
	}
	for i := range syncs.Items {
		if !send(ctx, r.syncEvents, &infrahubv1alpha1.InfrahubSync{ObjectMeta: syncs.Items[i].ObjectMeta}) {
			return ctx.Err()
		}
	}
	for i := range vrs.Items {
		if !send(ctx, r.vrEvents, &infrahubv1alpha1.VidraResource{ObjectMeta: vrs.Items[i].ObjectMeta}) {
			return ctx.Err()
		}
	}
	return nil
}

// send queues a pass of obj through a channel source.
func send(ctx context.Context, ch chan<- event.GenericEvent, obj client.Object) bool {
	select {
	case ch <- event.GenericEvent{Object: obj}:
		return true
	case <-ctx.Done():
		return false
	}
}
