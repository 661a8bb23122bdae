// Package delivery holds the reconcilers of the infrahub.operators.com family — InfrahubSync
// (infrahubsync_*.go) and VidraResource (vidraresource_*.go) — the watch on the settings
// ConfigMap that serves both, and their assembly (Setup, Options). They
// speak the Vidra operator's API (same group, kinds, fields, Secrets and ConfigMap) without its
// defects (shared/reference/vidra-api.md).
//
// # InfrahubSync
//
// Each pass validates spec.source.targetDate, finds the credentials Secret labelled
// infrahub-api-url=<host> (or <host>_<port>, which wins: a label value cannot hold ':'; keys
// username/password or token/api-token, optional ca.crt) that serves the sync — it names it in
// infrahub.operators.com/syncs, or is the one the webhook admitted (honoured with
// --delivery-trust-admitted-credentials) — and is for the sync's exact scheme, host and port
// (infrahub.operators.com/url, else https on the label's port or 443); never over http:// unless
// --delivery-allow-plain-http-credentials. It runs the stored query (queryName) and
// keeps one VidraResource per artifact, named after the artifact id, controlled by the sync and
// labelled infrahub.operators.com/sync=<sync>. An artifact is downloaded only when its checksum
// differs from the one its VidraResource was written with (annotation
// infrahub.operators.com/checksum; status.checksums lists id:checksum as the report). Only the
// sync's own VidraResources that left the result are deleted. An empty result fails the sync
// with reason EmptyResult and deletes nothing, unless spec.source.allowEmpty is true; an answer
// whose count disagrees with its edges fails with IncompleteResult; a pass that would delete
// more than --delivery-prune-max-fraction of them, or of the objects they applied (counted
// from the inventories, what re-issued artifacts drop included), holds (PruneHeld, apply/prune.go) until the sync is
// annotated confirm-prune=<token> or a query a sync interval later agrees (the first answer is
// recorded in the prune-pending annotation). An artifact back under a new id hands its objects
// over to its new VidraResource (handover-from, honoured only between VidraResources of one
// sync: apply/handover.go) before the old one is deleted. A pass
// that changes nothing writes nothing: status is written only when it changes, so lastSyncTime
// is the time of the last delivered change (or the first success), not of the last query.
//
// # VidraResource
//
// Each pass decodes spec.manifest (multi-document YAML, JSON or a v1 List), resolves every
// object on the destination cluster (its own RESTMapper; a remote cluster through the Secret
// labelled cluster-kubeconfig=<host> or <host>_<port>, key kubeconfig, that names the
// VidraResource or its sync, rebuilt when the Secret's content changes), checks the policy, and server-side applies with field manager
// metalhub-delivery, label infrahub.operators.com/managed-by=metalhub and annotation
// vidraresource.infrahub.operators.com/owned-by=<name> with owner-uids=<name>=<uid>. A manifest
// with an object that is malformed, of an unknown kind or refused by the policy is not applied at
// all. An object owned by another existing VidraResource is not taken over; an orphan (its
// recorded owner gone) only by a VidraResource annotated adopt-orphans-of=<uid>. Objects that
// left the manifest are pruned if the inventory records them and their mark names us by UID
// (anything else: a ForeignMark Warning, skipped); a Namespace still holding unmanaged objects
// is released, not deleted (apply/namespaces.go); the finalizer removes what was applied. Applied kinds
// are watched (metadata only, label-selected): in event mode (destination.reconcileOnEvents or
// eventBasedReconcile) a deleted or changed object is restored at once; otherwise it is reported
// Stale at once and restored by the periodic pass, which runs in both modes.
//
// # Settings
//
// Flags (Options.BindFlags) give requeueSyncAfter, requeueResourcesAfter, queryName and
// eventBasedReconcile; a ConfigMap labelled app=vidra in the operator's namespace (or
// --delivery-settings-namespace; never any namespace, and two there are a conflict under which
// the flags apply) overrides them while it exists and is re-read on every change,
// which also starts a pass of every object. Unknown keys and malformed values are ignored and
// reported in a Warning event on the ConfigMap and the log.
//
// # Rights
//
// The RBAC markers in setup.go cover the controllers' own kinds, the Secrets and ConfigMaps they
// read, and events. They deliberately do NOT include the rights to create what artifacts contain:
// applying a Deployment needs get/list/watch/create/patch/delete on deployments in the
// destination cluster. Grant those kind by kind with a ClusterRole bound to the operator's
// ServiceAccount (or the identity in a remote kubeconfig) and keep --delivery-allowed-kinds in
// step. RBAC kinds and cluster-scoped kinds are refused unless named in --delivery-allowed-kinds
// (the reference ran artifacts with */*, so any artifact could bind itself cluster-admin).
//
// # Packages
//
// The reconcilers here decide and write status; what they use lives below them, by concern:
// apply (plan, server-side apply, prune, inventory, ownership, health), target (clusters,
// kubeconfigs, credentials, impersonation), policy (allowed kinds, limits, settings), sealing
// (the seal admission leaves, the webhook guard) and manifests (decoding, digests, the
// family's labels and annotations). None of them imports this package. Admission (the
// writer's rights) is the webhook's: internal/webhook/rights, which imports this package for
// Options and is never imported by it.
package delivery
