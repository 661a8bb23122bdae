package metal

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/shard"
)

// Shard keys (internal/shard): everything that acts on one BMC has that BMC's key, so that one
// replica acts on it; claims, rules and groups act on no BMC and spread by their own names.

// ServerShardKey is the shard key of s: its BMC's, or its own for a server with inline access
// (its BMC is its alone).
func ServerShardKey(s *metalv1alpha1.Server) string {
	if s.Spec.BMCRef != nil && s.Spec.BMCRef.Name != "" {
		return shard.KeyBMC(s.Spec.BMCRef.Name)
	}
	return shard.KeyBMC("server:" + s.Name)
}

// ServerShardKeyByName is the shard key of the server named name, read from c (the cache); a
// server not found has the key it would have with inline access.
func ServerShardKeyByName(ctx context.Context, c client.Reader, name string) string {
	s := &metalv1alpha1.Server{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		return shard.KeyBMC("server:" + name)
	}
	return ServerShardKey(s)
}

func bmcShardKey(_ context.Context, b *metalv1alpha1.BMC) string { return shard.KeyBMC(b.Name) }

func serverShardKey(_ context.Context, s *metalv1alpha1.Server) string { return ServerShardKey(s) }

func bmcUserShardKey(_ context.Context, u *metalv1alpha1.BMCUser) string {
	if u.Spec.BMCRef != nil {
		return shard.KeyBMC(u.Spec.BMCRef.Name)
	}
	return shard.KeyObject(u)
}

func objectShardKey[T client.Object](_ context.Context, o T) string { return shard.KeyObject(o) }

// serverRefShardKey keys an object by the server it names.
func serverRefShardKey[T client.Object](c client.Reader, ref func(T) string) shard.KeyFunc[T] {
	return func(ctx context.Context, o T) string {
		if name := ref(o); name != "" {
			return ServerShardKeyByName(ctx, c, name)
		}
		return shard.KeyObject(o)
	}
}
