package manifests

import infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"

// FieldManager is the server-side apply field manager of everything the delivery family applies:
// the API server then knows which fields are ours and leaves other managers' fields alone.
const FieldManager = "metalhub-delivery"

// Metadata the delivery family writes. The reference's keys (owned-by annotation, finalizer,
// Secret labels) live in the API package; these are metalhub's own.
const (
	// SyncLabel on a VidraResource names the InfrahubSync that created it, for kubectl
	// selectors. Ownership itself is decided by the controller owner reference, not the label.
	SyncLabel = "infrahub.operators.com/sync"
	// ChecksumAnnotation on a VidraResource is the Infrahub checksum of the artifact content in
	// its spec.manifest: the durable half of checksum gating (status.checksums is the report).
	ChecksumAnnotation = "infrahub.operators.com/checksum"
	// ManifestHashAnnotation is the sha256 of the spec.manifest the sync wrote; a manifest edited
	// by hand no longer matches and is downloaded and written again.
	ManifestHashAnnotation = "infrahub.operators.com/manifest-sha256"
	// ArtifactNameAnnotation records the artifact's name in Infrahub, for humans.
	ArtifactNameAnnotation = "infrahub.operators.com/artifact-name"

	// ManagedByLabel marks every object a VidraResource applied; the watches select on it so
	// they only hold objects we manage. Which VidraResource owns an object is the owned-by
	// annotation (infrahubv1alpha1.OwnedByAnnotation): label values cannot hold every name.
	ManagedByLabel = "infrahub.operators.com/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "metalhub"

	// SettingsLabel/SettingsLabelValue select the reference's settings ConfigMap (app=vidra).
	SettingsLabel      = "app"
	SettingsLabelValue = "vidra"
)

// The finalizer and owned-by annotation, re-exported for the package's own brevity.
const (
	Finalizer         = infrahubv1alpha1.VidraResourceFinalizer
	OwnedByAnnotation = infrahubv1alpha1.OwnedByAnnotation
)
