package delivery

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
	"github.com/metalhub/metalhub/internal/controller/delivery/receiver"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/eventsink"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// The syncs' own bookkeeping annotations (a held prune's record) and the receiver's wake.
// +kubebuilder:rbac:groups=infrahub.operators.com,resources=infrahubsyncs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrahub.operators.com,resources=infrahubsyncs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrahub.operators.com,resources=infrahubsyncs/finalizers,verbs=update
// +kubebuilder:rbac:groups=infrahub.operators.com,resources=vidraresources,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=infrahub.operators.com,resources=vidraresources/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrahub.operators.com,resources=vidraresources/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch
// The inventories (apply/inventory_store.go), in the operator's namespace.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;update;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// Impersonation of the ServiceAccounts VidraResources act as (spec.destination.serviceAccountName).
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=impersonate

// eventBuffer sizes the channels that feed watch and settings events to the controllers.
const eventBuffer = 1024

// Setup registers the family's reconcilers with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	_, err := setup(mgr, o)
	return err
}

// reconcilers are the family's reconcilers, for tests.
type reconcilers struct {
	sync     *InfrahubSyncReconciler
	resource *VidraResourceReconciler
	settings *SettingsReconciler
	clusters *target.ClusterRegistry
}

// ownCache lets the manager start a cache of our own with its other caches, before the
// controllers, and wait for it to fill.
type ownCache struct{ cache.Cache }

func (c ownCache) GetCache() cache.Cache { return c.Cache }

func setup(mgr ctrl.Manager, o Options) (*reconcilers, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	log := mgr.GetLogger().WithName("delivery")
	scope := target.NewSecretScope(o.SecretsNamespace, o.OperatorNamespace)
	if o.Events == nil {
		ev, err := eventsink.New(mgr, eventsink.Options{})
		if err != nil {
			return nil, err
		}
		o.Events = ev
	}
	rec := o.Events.Recorder("metalhub-delivery")

	// Secrets and the settings ConfigMap come from caches of our own that hold only what
	// carries our labels: the manager's cache would hold every Secret of the cluster.
	credCache, err := labelledCache(mgr, map[client.Object]cache.ByObject{
		&corev1.Secret{}:    {Label: hasLabel(infrahubv1alpha1.InfrahubAPIURLLabel), Namespaces: scope.CacheNamespaces()},
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{manifests.SettingsLabel: manifests.SettingsLabelValue}), Namespaces: only(settingsNamespace(o))},
	})
	if err != nil {
		return nil, err
	}
	kubeconfigCache, err := labelledCache(mgr, map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: hasLabel(infrahubv1alpha1.ClusterKubeconfigLabel), Namespaces: scope.CacheNamespaces()},
	})
	if err != nil {
		return nil, err
	}

	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrahubv1alpha1.VidraResource{}, vrControllerIndex,
		func(obj client.Object) []string {
			if _, uid, ok := apply.SyncRefOf(obj); ok {
				return []string{string(uid)}
			}
			return nil
		}); err != nil {
		return nil, fmt.Errorf("indexing VidraResources by controller: %w", err)
	}

	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrahubv1alpha1.InfrahubSync{}, dependsOnIndex,
		func(obj client.Object) []string {
			return dependencyNames(obj.(*infrahubv1alpha1.InfrahubSync).Spec.DependsOn)
		}); err != nil {
		return nil, fmt.Errorf("indexing InfrahubSyncs by dependency: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &infrahubv1alpha1.VidraResource{}, dependsOnIndex,
		func(obj client.Object) []string {
			return dependencyNames(obj.(*infrahubv1alpha1.VidraResource).Spec.DependsOn)
		}); err != nil {
		return nil, fmt.Errorf("indexing VidraResources by dependency: %w", err)
	}

	settings := &policy.SettingsSource{Base: o.Settings, Reader: credCache, Namespace: settingsNamespace(o)}
	syncEvents := make(chan event.GenericEvent, eventBuffer)
	vrEvents := make(chan event.GenericEvent, eventBuffer)

	id := &target.Identity{DefaultSA: o.DefaultServiceAccount, AllowOperator: o.AllowOperatorIdentity, Self: &target.SelfUser{Client: mgr.GetClient()}}
	switch {
	case o.admission != nil:
		id.Admission = o.admission
	case o.AdmissionWebhook:
		g := &sealing.WebhookGuard{Reader: mgr.GetAPIReader(), OperatorNamespace: o.OperatorNamespace, Interval: time.Minute, Now: time.Now}
		id.Admission = g.Check
	}

	seals := &sealing.Sealer{Keys: sealing.NewKeys(mgr.GetClient(), mgr.GetAPIReader(), InventoryNamespace(o)), Now: time.Now, AssumeSealed: o.assumeSealed}
	inventories := &apply.InventoryStore{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: InventoryNamespace(o),
		ChunkBytes: cmp.Or(o.inventoryChunkBytes, apply.DefaultInventoryChunkBytes)}
	sr := &InfrahubSyncReconciler{
		client: mgr.GetClient(), apiReader: mgr.GetAPIReader(), scheme: mgr.GetScheme(), settings: settings,
		creds: &target.Credentials{Reader: credCache, Live: mgr.GetAPIReader(), Scope: scope, Timeout: o.InfrahubTimeout, MaxBody: o.Limits.MaxManifestBytes,
			AllowPlainHTTP: o.AllowPlainHTTPCredentials, TrustAdmitted: o.TrustAdmittedCredentials, Seals: seals},
		clients: &infrahub.Cache{}, recorder: rec, downloads: o.DownloadConcurrency, now: time.Now,
		pruneMaxFraction: o.PruneMaxFraction, pruneAutoRelease: o.PruneAutoRelease, limits: o.Limits, hosts: policy.NewHostGate(o.SyncConcurrencyPerHost),
		queried: map[types.UID]queryRecord{}, identity: id, inventories: inventories, seals: seals,
	}
	sr.lc = lifecycle.NewReconciler(mgr.GetClient(), func() *infrahubv1alpha1.InfrahubSync { return &infrahubv1alpha1.InfrahubSync{} }, sr.handle)
	// The periodic looks follow the settings, which a ConfigMap may change at run time.
	sr.lc.ResyncFunc = func(ctx context.Context) time.Duration { return settings.Current(ctx).RequeueSyncAfter }

	vr := &VidraResourceReconciler{
		client: mgr.GetClient(), reader: mgr.GetAPIReader(), settings: settings, memory: apply.NewAppliedMemory(), policy: o.Policy,
		recorder: rec, now: time.Now, healthPoll: o.HealthPoll, identity: id,
		trustAdmitted: o.TrustAdmittedCredentials,
		inventories:   inventories,
		seals:         seals,
	}
	vr.lc = lifecycle.NewReconciler(mgr.GetClient(), func() *infrahubv1alpha1.VidraResource { return &infrahubv1alpha1.VidraResource{} }, vr.handle)
	vr.lc.ResyncFunc = func(ctx context.Context) time.Duration { return settings.Current(ctx).RequeueResourcesAfter }
	enqueueVR := func(name string) {
		vrEvents <- event.GenericEvent{Object: &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: name}}}
	}
	vr.clusters = target.NewClusterRegistry(mgr.GetScheme(), mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetRESTMapper(),
		kubeconfigCache, scope, o.InsecureKubeconfig, o.ClusterTimeout,
		func(ev target.ObjectEvent) { vr.onObjectEvent(ev, enqueueVR) }, log.WithName("clusters"))

	setr := &SettingsReconciler{source: settings, client: mgr.GetClient(), recorder: rec,
		syncEvents: syncEvents, vrEvents: vrEvents, last: o.Settings, reported: map[string]bool{}}

	for _, r := range []manager.Runnable{ownCache{credCache}, ownCache{kubeconfigCache}, vr.clusters} {
		if err := mgr.Add(r); err != nil {
			return nil, fmt.Errorf("adding delivery runnable: %w", err)
		}
	}

	err = ctrl.NewControllerManagedBy(mgr).Named("infrahubsync").
		For(&infrahubv1alpha1.InfrahubSync{}, builder.WithPredicates(lifecycle.Predicate())).
		// A VidraResource deleted or edited by hand brings its sync at once (defect 5).
		// A VidraResource's report (deployState) is summarised by its sync.
		// Mapped by SyncRefOf, not Owns: Owns matches a controller reference by group and Kind,
		// any version, and a writer's reference must not bring another's sync either.
		Watches(&infrahubv1alpha1.VidraResource{}, handler.EnqueueRequestsFromMapFunc(syncOfResource),
			builder.WithPredicates(predicate.Or(lifecycle.Predicate(), deployStateChanged()))).
		WatchesRawSource(source.Kind(credCache, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(
			func(ctx context.Context, s *corev1.Secret) []reconcile.Request {
				return syncsForHost(ctx, mgr.GetClient(), s.Labels[infrahubv1alpha1.InfrahubAPIURLLabel])
			}))).
		WatchesRawSource(source.Channel(syncEvents, &handler.EnqueueRequestForObject{})).
		// A dependency's report brings the syncs that wait on it (spec.dependsOn).
		Watches(&infrahubv1alpha1.InfrahubSync{}, dependents(mgr.GetClient(), func() client.ObjectList { return &infrahubv1alpha1.InfrahubSyncList{} }),
			builder.WithPredicates(readinessChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.SyncConcurrency}).
		Complete(sr)
	if err != nil {
		return nil, fmt.Errorf("setting up the InfrahubSync controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("vidraresource").
		For(&infrahubv1alpha1.VidraResource{}, builder.WithPredicates(lifecycle.Predicate())).
		WatchesRawSource(source.Kind(kubeconfigCache, &corev1.Secret{}, handler.TypedEnqueueRequestsFromMapFunc(
			func(ctx context.Context, s *corev1.Secret) []reconcile.Request {
				return resourcesForHost(ctx, mgr.GetClient(), s.Labels[infrahubv1alpha1.ClusterKubeconfigLabel])
			}))).
		// Changes to applied objects, from the watches of every destination cluster.
		WatchesRawSource(source.Channel(vrEvents, &handler.EnqueueRequestForObject{})).
		// A dependency's report brings the VidraResources that wait on it (spec.dependsOn).
		Watches(&infrahubv1alpha1.InfrahubSync{}, dependents(mgr.GetClient(), func() client.ObjectList { return &infrahubv1alpha1.VidraResourceList{} }),
			builder.WithPredicates(readinessChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.ResourceConcurrency}).
		Complete(vr)
	if err != nil {
		return nil, fmt.Errorf("setting up the VidraResource controller: %w", err)
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("delivery-settings").
		WatchesRawSource(source.Kind(credCache, &corev1.ConfigMap{}, handler.TypedEnqueueRequestsFromMapFunc(
			func(context.Context, *corev1.ConfigMap) []reconcile.Request {
				return []reconcile.Request{settingsRequest}
			}))).
		Complete(setr)
	if err != nil {
		return nil, fmt.Errorf("setting up the delivery settings controller: %w", err)
	}
	rs := &reconcilers{sync: sr, resource: vr, settings: setr, clusters: vr.clusters}
	// Previews of proposed changes, one at a time: each downloads and dry-runs.
	err = ctrl.NewControllerManagedBy(mgr).Named("infrahubsync-preview").
		For(&infrahubv1alpha1.InfrahubSync{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(&previewReconciler{rs: rs, interval: o.PreviewInterval, now: time.Now})
	if err != nil {
		return nil, fmt.Errorf("setting up the preview controller: %w", err)
	}
	if _, err := receiver.Setup(mgr, mgr.GetClient(), o.Receiver); err != nil {
		return nil, fmt.Errorf("setting up the Infrahub webhook receiver: %w", err)
	}
	log.Info("delivery controllers configured", "requeueSyncAfter", o.Settings.RequeueSyncAfter.String(),
		"requeueResourcesAfter", o.Settings.RequeueResourcesAfter.String(), "queryName", o.Settings.QueryName,
		"eventBasedReconcile", o.Settings.EventBasedReconcile, "allowedKinds", o.Policy.AllowedKinds,
		"allowedNamespaces", o.Policy.AllowedNamespaces)
	return rs, nil
}

// labelledCache builds a cache of our own for a few label-selected kinds.
func labelledCache(mgr ctrl.Manager, by map[client.Object]cache.ByObject) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: by, DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("creating delivery cache: %w", err)
	}
	// Create the informers now, so the manager waits for them to fill before the controllers
	// start and the first pass already sees the Secrets and the settings.
	for obj := range by {
		if _, err := c.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false)); err != nil {
			return nil, fmt.Errorf("creating delivery informer for %T: %w", obj, err)
		}
	}
	return c, nil
}

func hasLabel(key string) labels.Selector {
	req, err := labels.NewRequirement(key, selection.Exists, nil)
	if err != nil {
		panic(err) // the keys are constants
	}
	return labels.NewSelector().Add(*req)
}

func only(namespace string) map[string]cache.Config {
	if namespace == "" {
		return nil
	}
	return map[string]cache.Config{namespace: {}}
}

// syncsForHost maps an Infrahub credentials Secret to the syncs whose URL it names.
func syncsForHost(ctx context.Context, c client.Client, labelValue string) []reconcile.Request {
	var list infrahubv1alpha1.InfrahubSyncList
	if labelValue == "" || c.List(ctx, &list) != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range list.Items {
		if values, err := target.HostLabelValues(s.Spec.Source.InfrahubAPIURL); err == nil && slices.Contains(values, labelValue) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: s.Name}})
		}
	}
	return out
}

// resourcesForHost maps a cluster kubeconfig Secret to the VidraResources that deploy there.
func resourcesForHost(ctx context.Context, c client.Client, labelValue string) []reconcile.Request {
	var list infrahubv1alpha1.VidraResourceList
	if labelValue == "" || c.List(ctx, &list) != nil {
		return nil
	}
	var out []reconcile.Request
	for _, vr := range list.Items {
		if target.IsLocal(vr.Spec.Destination.Server) {
			continue
		}
		if values, err := target.HostLabelValues(vr.Spec.Destination.Server); err == nil && slices.Contains(values, labelValue) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: vr.Name}})
		}
	}
	return out
}

// syncOfResource maps a VidraResource to the sync its controller reference names (SyncRefOf).
func syncOfResource(_ context.Context, obj client.Object) []reconcile.Request {
	if name, _, ok := apply.SyncRefOf(obj); ok {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
	}
	return nil
}

// deployStateChanged passes a VidraResource update that changed its deployState.
// dependsOnIndex indexes InfrahubSyncs and VidraResources by the syncs their spec.dependsOn
// names.
const dependsOnIndex = ".spec.dependsOn.name"

func dependencyNames(deps []infrahubv1alpha1.Dependency) []string {
	out := make([]string, len(deps))
	for i, d := range deps {
		out[i] = d.Name
	}
	return out
}

// dependents maps a sync to the objects of the list kind whose spec.dependsOn names it.
func dependents(c client.Reader, list func() client.ObjectList) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		l := list()
		if err := c.List(ctx, l, client.MatchingFields{dependsOnIndex: o.GetName()}); err != nil {
			return nil
		}
		var out []reconcile.Request
		_ = meta.EachListItem(l, func(item runtime.Object) error {
			if obj, ok := item.(client.Object); ok {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			}
			return nil
		})
		return out
	})
}

// readinessChanged passes what can change whether a sync is ready for its dependents: its
// creation and deletion, and a report that changes its state, generation or counts.
func readinessChanged() predicate.Predicate {
	return predicate.Funcs{
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*infrahubv1alpha1.InfrahubSync)
			n, okN := e.ObjectNew.(*infrahubv1alpha1.InfrahubSync)
			return okO && okN && (o.Status.SyncState != n.Status.SyncState || o.Status.ObservedGeneration != n.Status.ObservedGeneration ||
				o.Generation != n.Generation || o.Status.Resources.Healthy != n.Status.Resources.Healthy ||
				o.Status.Resources.Total != n.Status.Resources.Total || !n.DeletionTimestamp.IsZero())
		},
	}
}

func deployStateChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okO := e.ObjectOld.(*infrahubv1alpha1.VidraResource)
			n, okN := e.ObjectNew.(*infrahubv1alpha1.VidraResource)
			// ObservedGeneration too: an applied rewrite frees room in its sync's apply window.
			// Health too: a sync counts its healthy VidraResources for the syncs that depend on it.
			return okO && okN && (o.Status.DeployState != n.Status.DeployState || o.Status.ObservedGeneration != n.Status.ObservedGeneration ||
				healthyOf(o) != healthyOf(n))
		},
	}
}

func healthyOf(vr *infrahubv1alpha1.VidraResource) bool {
	return meta.IsStatusConditionTrue(vr.Status.Conditions, infrahubv1alpha1.ConditionHealthy)
}
