package registry

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
)

// ServerUUIDIndex is the cache index of Servers by spec.systemUUID, normalised (NormalizeUUID):
// BMCs print UUIDs in either case, with or without braces, and the kernel in lower case.
const ServerUUIDIndex = "spec.systemUUID"

// SetupIndexes registers ServerUUIDIndex on the manager's cache (mgr.GetFieldIndexer()). Call it
// once per manager before the manager starts; a second registration of the same index fails,
// so other packages wanting Servers by UUID should use this index rather than add their own.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &metalv1alpha1.Server{}, ServerUUIDIndex, serverUUIDs); err != nil {
		return fmt.Errorf("indexing Servers by %s: %w", ServerUUIDIndex, err)
	}
	return nil
}

func serverUUIDs(o client.Object) []string {
	s, ok := o.(*metalv1alpha1.Server)
	if !ok || s.Spec.SystemUUID == "" {
		return nil
	}
	return []string{NormalizeUUID(s.Spec.SystemUUID)}
}

// NormalizeUUID is the form of a UUID in ServerUUIDIndex: the one form every comparison of
// system UUIDs uses (bmc.NormalizeUUID), so the registry, the BMC controller and the identity
// check before every action agree on what "the same system" is.
func NormalizeUUID(uuid string) string { return bmc.NormalizeUUID(uuid) }
