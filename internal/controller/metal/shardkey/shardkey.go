// Package shardkey says which shard (internal/shard) each metal object belongs to: everything
// that acts on one BMC has that BMC's key, so that one replica acts on it; claims, rules and
// groups act on no BMC and spread by their own names.
//
// It only computes keys (reading a Server when an object names one): it writes no object and does
// not decide which shards a replica holds (internal/shard does). It imports no controller package
// nor the assembly (hack/layers.sh).
package shardkey

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/shard"
)

// Server is the shard key of s: its BMC's, or its own for a server with inline access
// (its BMC is its alone).
func Server(s *metalv1alpha1.Server) string {
	if s.Spec.BMCRef != nil && s.Spec.BMCRef.Name != "" {
		return shard.KeyBMC(s.Spec.BMCRef.Name)
	}
	return shard.KeyBMC("server:" + s.Name)
}

// ServerByName is the shard key of the server named name, read from c (the cache); a
// server not found has the key it would have with inline access.
func ServerByName(ctx context.Context, c client.Reader, name string) string {
	s := &metalv1alpha1.Server{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		return shard.KeyBMC("server:" + name)
	}
	return Server(s)
}

// ForBMC, ForServer, ForBMCUser and ForObject are the keys as the shard gates take them.
func ForBMC(_ context.Context, b *metalv1alpha1.BMC) string { return shard.KeyBMC(b.Name) }

func ForServer(_ context.Context, s *metalv1alpha1.Server) string { return Server(s) }

func ForBMCUser(_ context.Context, u *metalv1alpha1.BMCUser) string {
	if u.Spec.BMCRef != nil {
		return shard.KeyBMC(u.Spec.BMCRef.Name)
	}
	return shard.KeyObject(u)
}

func ForObject[T client.Object](_ context.Context, o T) string { return shard.KeyObject(o) }

// ForServerRef keys an object by the server it names.
func ForServerRef[T client.Object](c client.Reader, ref func(T) string) shard.KeyFunc[T] {
	return func(ctx context.Context, o T) string {
		if name := ref(o); name != "" {
			return ServerByName(ctx, c, name)
		}
		return shard.KeyObject(o)
	}
}
