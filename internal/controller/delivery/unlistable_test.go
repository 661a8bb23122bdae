package delivery

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/scheme"
)

// requestCounter counts the requests of the clients of one configuration.
type requestCounter struct {
	n  *atomic.Int64
	rt http.RoundTripper
}

func (c requestCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(req)
}

// unlistableKinds are 25 namespaced kinds of every cluster (none the default policy refuses),
// which the identity of the test may not list.
var unlistableKinds = []schema.GroupVersionKind{
	{Version: "v1", Kind: "ConfigMap"}, {Version: "v1", Kind: "Event"}, {Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ServiceAccount"}, {Version: "v1", Kind: "Pod"}, {Version: "v1", Kind: "Endpoints"},
	{Version: "v1", Kind: "PersistentVolumeClaim"}, {Version: "v1", Kind: "LimitRange"}, {Version: "v1", Kind: "ResourceQuota"},
	{Version: "v1", Kind: "ReplicationController"}, {Version: "v1", Kind: "PodTemplate"},
	{Group: "apps", Version: "v1", Kind: "Deployment"}, {Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"}, {Group: "apps", Version: "v1", Kind: "ReplicaSet"},
	{Group: "apps", Version: "v1", Kind: "ControllerRevision"}, {Group: "batch", Version: "v1", Kind: "Job"},
	{Group: "batch", Version: "v1", Kind: "CronJob"}, {Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"},
	{Group: "storage.k8s.io", Version: "v1", Kind: "CSIStorageCapacity"}, {Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicy"},
	{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}, {Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"},
	{Group: "autoscaling", Version: "v2", Kind: "HorizontalPodAutoscaler"}, {Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"},
}

// A manifest naming kinds the operator's identity cannot list on its cluster must not hold a
// worker until each watch gives up (the cluster timeout, 30 s by default, per kind): a kind
// whose list is refused is known at once, from one request, and not asked again on the next
// pass. The timeout here is an hour, so a watch that waits for it never returns in the test.
func TestUnlistableKindsDoNotHoldTheWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var requests atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "may-list-nothing"}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return requestCounter{n: &requests, rt: rt} }
	reg := target.NewClusterRegistry(scheme.New(), cfg, nil, nil, nil, target.SecretScope{}, false, time.Hour, func(target.ObjectEvent) {}, logr.Discard())
	tg, err := reg.NewTarget(ctx, "local", "test", cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Stop()
	// Resolve the kinds first: discovery is not what is measured.
	for _, gvk := range unlistableKinds {
		if _, err := tg.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			t.Fatal(err)
		}
	}
	before := requests.Load()
	for _, gvk := range unlistableKinds {
		if err := tg.Watch(ctx, gvk); !apierrors.IsForbidden(err) {
			t.Fatalf("watching %s: want Forbidden, got %v", gvk, err)
		}
	}
	first := requests.Load() - before
	for _, gvk := range unlistableKinds {
		if err := tg.Watch(ctx, gvk); !apierrors.IsForbidden(err) {
			t.Fatalf("watching %s again: want Forbidden, got %v", gvk, err)
		}
	}
	again := requests.Load() - before - first
	t.Logf("%d kinds: %d requests, %d on the next pass", len(unlistableKinds), first, again)
	if first > int64(len(unlistableKinds)) || again != 0 {
		t.Fatalf("%d kinds took %d requests, and %d more on the next pass; want at most one each, then none", len(unlistableKinds), first, again)
	}
}
