package netboot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/discovery"
)

// UUIDField is the field index IndexByUUID registers: a ServerBootConfiguration's system UUID
// label.
const UUIDField = "netboot.metalhub.io/system-uuid"

// IndexByUUID registers UUIDField on the ServerBootConfigurations of a cache that Options.Client
// reads through (Options.Indexed).
func IndexByUUID(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &metalv1alpha1.ServerBootConfiguration{}, UUIDField, func(o client.Object) []string {
		if v := o.GetLabels()[discovery.SystemUUIDLabel]; v != "" {
			return []string{strings.ToLower(v)}
		}
		return nil
	})
}

// IndexedClient returns a client for Options.Client with Options.Indexed: the
// ServerBootConfigurations of namespace come from a cache indexed by UUID, which runs until ctx
// ends; every other read goes to the API server (cfg's rate limits apply to those). It returns
// once the cache has synced.
func IndexedClient(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, namespace string) (client.Client, error) {
	// The cache's reflectors log through the context's logger; without one they fall back to
	// controller-runtime's global logger, which a test process may never set.
	if _, err := logr.FromContext(ctx); err != nil {
		ctx = logr.NewContext(ctx, logr.Discard())
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ReaderFailOnMissingInformer: true,
		ByObject: map[client.Object]cache.ByObject{&metalv1alpha1.ServerBootConfiguration{}: {
			Namespaces: map[string]cache.Config{namespace: {}}}}})
	if err != nil {
		return nil, fmt.Errorf("netboot: building the boot configuration cache: %w", err)
	}
	if err := IndexByUUID(ctx, c); err != nil {
		return nil, fmt.Errorf("netboot: indexing boot configurations: %w", err)
	}
	// Ask for the informer before starting, so that the sync below waits for it.
	if _, err := c.GetInformer(ctx, &metalv1alpha1.ServerBootConfiguration{}); err != nil {
		return nil, fmt.Errorf("netboot: boot configuration informer: %w", err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, errors.New("netboot: the boot configuration cache did not sync")
	}
	return client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: c,
		DisableFor: []client.Object{&metalv1alpha1.Server{}, &corev1.Secret{}}}})
}
