// Package apply owns what the delivery family does on a destination cluster: planning a
// manifest against the cluster (staged when an object needs a kind defined earlier in it),
// server-side apply with the family's owner marks (ownership.go: which VidraResource owns an
// object, and which sync a VidraResource), pruning what left a manifest and the sync-level
// prune guard (prune.go), the inventory of what was applied (inventory.go, kept in ConfigMaps:
// inventory_store.go), the memory of the last apply (memory.go), the handover of objects
// between VidraResources of one sync, namespaces released rather than deleted, and the health
// of applied objects.
//
// It writes objects, never the status of a VidraResource or an InfrahubSync (the reconcilers
// in package delivery do). It imports target, policy and manifests of the family, never the
// reconcilers or the webhook.
package apply
