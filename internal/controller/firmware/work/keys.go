package work

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalhub/metalhub/internal/controller/metal/shardkey"
	"github.com/metalhub/metalhub/internal/shard"
)

// BMCRefKey is the shard key of an object acting on the BMC ref names.
func BMCRefKey(o client.Object, ref *corev1.LocalObjectReference) string {
	if ref == nil || ref.Name == "" {
		return shard.KeyObject(o)
	}
	return shard.KeyBMC(ref.Name)
}

// ServerRefKey is the shard key of an object acting on the server ref names: its BMC's.
func ServerRefKey(ctx context.Context, c client.Reader, o client.Object, ref *corev1.LocalObjectReference) string {
	if ref == nil || ref.Name == "" {
		return shard.KeyObject(o)
	}
	return shardkey.ServerByName(ctx, c, ref.Name)
}
