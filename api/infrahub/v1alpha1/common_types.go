package v1alpha1

// State is the state of a sync or a deployment.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Stale
type State string

const (
	StatePending   State = "Pending"
	StateRunning   State = "Running"
	StateSucceeded State = "Succeeded"
	StateFailed    State = "Failed"
	StateStale     State = "Stale"
)

// Dependency names an InfrahubSync that must be delivered and healthy before the object that
// names it applies anything.
type Dependency struct {
	// Name of the InfrahubSync.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="must be an InfrahubSync name"
	Name string `json:"name"`
}

// Destination is the cluster and namespace artifacts are applied to.
type Destination struct {
	// Server is the API server URL of a remote cluster. Empty, or
	// https://kubernetes.default.svc, means the local cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(http|https)://[a-zA-Z0-9.-]+(:[0-9]+)?(?:/[a-zA-Z0-9-]+)*$`
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an absolute http or https URL with a host"
	// +kubebuilder:validation:XValidation:rule="!isURL(self) || self.matches('^[a-zA-Z]+://[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*([:/?#]|$)')",message="host must be a DNS name or an IPv4 address"
	// +kubebuilder:validation:XValidation:rule="!isURL(self) || url(self).getPort() == '' || (url(self).getPort().size() <= 5 && int(url(self).getPort()) >= 1 && int(url(self).getPort()) <= 65535)",message="port must be between 1 and 65535"
	Server string `json:"server,omitempty"`
	// Namespace for objects whose manifest names none.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == '' || !format.dns1123Label().validate(self).hasValue()",message="must be a namespace name: lower-case letters, digits and '-', starting and ending with a letter or digit"
	Namespace string `json:"namespace,omitempty"`
	// ReconcileOnEvents restores managed objects as soon as they change, instead of only on the
	// periodic resync.
	// +optional
	// +kubebuilder:default=false
	ReconcileOnEvents bool `json:"reconcileOnEvents,omitempty"`
	// ServiceAccountName, when set, is the ServiceAccount every read, apply and prune of the
	// destination goes through (impersonated), so that its RBAC decides what the artifacts may
	// do. Empty: the operator's --delivery-default-service-account, else the operator itself.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || !format.dns1123Subdomain().validate(self).hasValue()",message="must be a ServiceAccount name"
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// ServiceAccountNamespace is the ServiceAccount's namespace; empty: Namespace (else default).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == '' || !format.dns1123Label().validate(self).hasValue()",message="must be a namespace name"
	ServiceAccountNamespace string `json:"serviceAccountNamespace,omitempty"`
}

// Well-known metadata keys, kept as the reference writes them so that existing Secrets and
// managed objects are recognised.
const (
	// InfrahubAPIURLLabel on a Secret names the Infrahub host (with or without port) whose
	// credentials it holds.
	InfrahubAPIURLLabel = "infrahub-api-url"
	// ClusterKubeconfigLabel on a Secret names the remote API server host its kubeconfig reaches.
	ClusterKubeconfigLabel = "cluster-kubeconfig"
	// OwnedByAnnotation on a managed object names the VidraResource that applied it, or the
	// VidraResources sharing it (comma-separated, Vidra's shared ownership).
	OwnedByAnnotation = "vidraresource.infrahub.operators.com/owned-by"
	// AdoptAnnotation on an object that no VidraResource created names the one VidraResource
	// allowed to take it over; without it, such an object is never applied over.
	AdoptAnnotation = "vidraresource.infrahub.operators.com/adopt"
	// VidraResourceFinalizer removes what a VidraResource applied.
	VidraResourceFinalizer = "vidraresource.infrahub.operators.com/finalizer"
	// InventoryAnnotation on a VidraResource is where earlier versions recorded, ahead of each
	// apply, the cluster and the objects it may have applied there. The inventory now lives in
	// ConfigMaps of the operator's namespace; this annotation is read once, moved and removed.
	InventoryAnnotation = "infrahub.operators.com/inventory"
	// RequestedAtAnnotation set by a user forces a sync now.
	RequestedAtAnnotation = "infrahub.operators.com/requested-at"

	// OwnerUIDsAnnotation on a managed object records the UID of each VidraResource named in
	// OwnedByAnnotation, as name=uid pairs (comma-separated). The name alone (Vidra's mark) is
	// kept for compatibility; the UID tells a VidraResource from a later one of the same name.
	OwnerUIDsAnnotation = "vidraresource.infrahub.operators.com/owner-uids"
	// AdoptOrphansAnnotation on a VidraResource lists the UIDs (comma-separated) of gone
	// VidraResources whose objects it may take over. An orphan (its recorded owner is gone) is
	// never taken otherwise, not even by a new VidraResource of the same name.
	AdoptOrphansAnnotation = "vidraresource.infrahub.operators.com/adopt-orphans-of"
	// HandoverAnnotation on a VidraResource names the VidraResource (name:uid) whose objects it
	// takes over: the sync sets it when an artifact's id changed but its name and content did
	// not, and deletes the old VidraResource only once the new one has applied.
	HandoverAnnotation = "infrahub.operators.com/handover-from"

	// ConfirmPruneAnnotation on an InfrahubSync releases a held prune: its value must be the
	// token the PruneHeld condition names (<count>-<fingerprint>), so a confirmation of one prune
	// never approves another.
	ConfirmPruneAnnotation = "infrahub.operators.com/confirm-prune"
	// PrunePendingAnnotation on an InfrahubSync is the sync's durable record of a held prune:
	// <token>@<RFC 3339 time of the first answer>. A later query with the same answer, a sync
	// interval on, releases it.
	PrunePendingAnnotation = "infrahub.operators.com/prune-pending"
	// MaxArtifactsAnnotation on an InfrahubSync lowers --delivery-max-artifacts-per-sync for it.
	MaxArtifactsAnnotation = "infrahub.operators.com/max-artifacts"
	// MaxSyncBytesAnnotation on an InfrahubSync lowers --delivery-max-sync-bytes for it.
	MaxSyncBytesAnnotation = "infrahub.operators.com/max-sync-bytes"
	// PruneMaxFractionAnnotation on an InfrahubSync lowers --delivery-prune-max-fraction for
	// that sync (a value above the flag's is ignored).
	PruneMaxFractionAnnotation = "infrahub.operators.com/prune-max-fraction"
	// SyncsAnnotation on a credentials or kubeconfig Secret lists (comma-separated) the
	// InfrahubSyncs allowed to use it; a Secret that names no sync serves none. For a kubeconfig
	// Secret, a sync named here covers the VidraResources it controls.
	SyncsAnnotation = "infrahub.operators.com/syncs"
	// VidraResourcesAnnotation on a kubeconfig Secret lists (comma-separated) the VidraResources
	// (made by hand, controlled by no sync) allowed to use it.
	VidraResourcesAnnotation = "infrahub.operators.com/vidraresources"
	// URLAnnotation on a credentials Secret states the exact endpoint its credentials are for,
	// as scheme://host[:port] (e.g. https://infrahub.example:8443). Without it the infrahub-api-url
	// label decides: <host> means https on port 443, <host>_<port> https on that port. A sync
	// whose URL differs in scheme, host or port gets no credentials.
	URLAnnotation = "infrahub.operators.com/url"
	// AdmittedCredentialsAnnotation on an InfrahubSync names (namespace/name) a credentials
	// Secret the sync uses although the Secret does not name it. The mutating webhook sets it on
	// a sync naming none to the Secret labelled for its host (as Vidra finds it); the validating
	// webhook admits it only from a writer allowed to read that Secret, and the operator honours
	// it only with --delivery-trust-admitted-credentials (which --enable-webhooks turns on).
	AdmittedCredentialsAnnotation = "infrahub.operators.com/admitted-credentials"
	// AdmittedKubeconfigAnnotation on a VidraResource is the same for its kubeconfig Secret.
	AdmittedKubeconfigAnnotation = "infrahub.operators.com/admitted-kubeconfig"
	// SealAnnotation on an InfrahubSync or a VidraResource is the admission webhook's seal: an
	// HMAC, with a key only the operator holds, over what the object makes the operator do
	// (destination, ServiceAccount, source, admitted Secrets, controller reference, manifest
	// digest), written once the writer was found to have the rights for all of it. The operator
	// honours a writer-named ServiceAccount and the admitted-* annotations only on an object whose
	// seal verifies; it seals the VidraResources it writes for a sync itself. Written by anyone
	// else, the annotation is replaced or removed by the webhook.
	SealAnnotation = "infrahub.operators.com/seal"
	// ReadmitAnnotation on an InfrahubSync or a VidraResource asks admission to judge it again
	// with the rights of whoever writes it (any value; a timestamp is usual), which seals an
	// object written before the webhook was serving:
	//   kubectl annotate infrahubsyncs,vidraresources --all infrahub.operators.com/readmit="$(date +%s)" --overwrite
	ReadmitAnnotation = "infrahub.operators.com/readmit"
	// WriterLabel records who created an InfrahubSync or a VidraResource (a digest of the user
	// name), set by the mutating admission webhook; the validating one counts them per writer
	// (--delivery-max-objects-per-writer). The operator's own objects carry none.
	WriterLabel = "infrahub.operators.com/writer"
)

// HealthExpression decides, with CEL, the health of the applied objects of one apiVersion and
// kind instead of kstatus: the shape of Flux's Kustomization healthCheckExprs, so that its
// community expressions work as written. The object's top-level fields are the expressions'
// variables (apiVersion, kind, metadata, spec, status). Failed is evaluated first, then
// Current, then InProgress; an object none of them holds for is InProgress. A metalhub addition.
type HealthExpression struct {
	// APIVersion of the objects the expressions judge (group/version, or v1).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	APIVersion string `json:"apiVersion"`
	// Kind of the objects the expressions judge.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Current is the CEL expression that is true once the object has reached the state asked
	// for (Healthy).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Current string `json:"current"`
	// InProgress is the CEL expression that is true while the object is on its way.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	InProgress string `json:"inProgress,omitempty"`
	// Failed is the CEL expression that is true when the object will not get there without
	// help; evaluated before the others.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Failed string `json:"failed,omitempty"`
}

// DriftPolicy says what a VidraResource does with an object of its that someone changed
// after it was applied.
// +kubebuilder:validation:Enum=Correct;Warn
type DriftPolicy string

const (
	// DriftPolicyCorrect applies the manifest over the change (the default; empty means it).
	DriftPolicyCorrect DriftPolicy = "Correct"
	// DriftPolicyWarn leaves an existing object as it is when it differs from the manifest, and
	// reports the difference (status.drift, condition Drifted, a DriftDetected event). Objects
	// that do not exist are still created.
	DriftPolicyWarn DriftPolicy = "Warn"
)

// MaxDriftedObjects bounds status.drift, MaxDriftFields the fields listed for each object.
const (
	MaxDriftedObjects = 20
	MaxDriftFields    = 20
)

// DriftedObject is an applied object that differs from the manifest and was left as it is
// (driftPolicy Warn). Only field paths are listed, never values: the object may be a Secret.
type DriftedObject struct {
	// +required
	APIVersion string `json:"apiVersion"`
	// +required
	Kind string `json:"kind"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +required
	Name string `json:"name"`
	// Fields are the JSON pointers (RFC 6901, as in a JSON patch) of the fields that differ,
	// the first 20.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Fields []string `json:"fields,omitempty"`
}
