package shard

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Lease cache and the watch that wakes the membership when a Lease changes.

// NewLeaseCache is a cache of the Leases in namespace only (Options.Leases): the operator's
// rights to Leases end at its namespace, and a cluster's node Leases are none of its business.
func NewLeaseCache(cfg *rest.Config, scheme *runtime.Scheme, namespace string) (cache.Cache, error) {
	return cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject: map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {}}})
}

func (s *Set) reader() client.Reader {
	if s.o.Leases != nil {
		return s.o.Leases
	}
	return s.o.Client
}

// watch observes every change of the set's Leases as it arrives, and kicks a round when one
// frees a shard or a member comes or goes.
func (s *Set) watch(ctx context.Context) error {
	if s.o.Leases == nil {
		return nil
	}
	inf, err := s.o.Leases.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return fmt.Errorf("watching shard leases: %w", err)
	}
	note := func(obj any, added bool) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Labels[SetLabel] != s.o.Name {
			return
		}
		s.observe(l, s.o.Now())
		if added && l.Labels[RoleLabel] == RoleMember || l.Labels[RoleLabel] == RoleShard && holderOf(l) == "" {
			s.poke()
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { note(obj, true) },
		UpdateFunc: func(_, obj any) { note(obj, false) },
		DeleteFunc: func(any) { s.poke() },
	}); err != nil {
		return fmt.Errorf("watching shard leases: %w", err)
	}
	if !s.o.Leases.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	return nil
}

func (s *Set) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
