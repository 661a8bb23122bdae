package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// MaxManifestLength bounds spec.manifest, in characters (the schema's maxLength below says the
// same): 1 MiB, the default --delivery-max-manifest-bytes, is generous for an artifact and
// leaves room under etcd's 1.5 MiB per object for the status and metadata. Characters, not
// bytes: a manifest of many multi-byte characters can still exceed what etcd stores, and is
// then refused by the API server as too large.
const MaxManifestLength = 1 << 20

// VidraResourceSpec holds one artifact's manifest and where to apply it.
type VidraResourceSpec struct {
	// Destination of the manifest.
	// +optional
	Destination Destination `json:"destination,omitempty"`
	// DependsOn names the InfrahubSyncs that must be Succeeded, with every VidraResource of
	// theirs Healthy, before this manifest is applied; checked again on every pass. A sync
	// writes its own spec.dependsOn here. A metalhub addition.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	DependsOn []Dependency `json:"dependsOn,omitempty"`
	// HealthExpressions decide the health of the applied objects of the kinds they name with
	// CEL instead of kstatus (Flux's healthCheckExprs). A sync writes its own here. A metalhub
	// addition.
	// +optional
	// +listType=map
	// +listMapKey=apiVersion
	// +listMapKey=kind
	// +kubebuilder:validation:MaxItems=32
	HealthExpressions []HealthExpression `json:"healthExpressions,omitempty"`
	// DriftPolicy says what to do with an applied object someone changed: Correct (the
	// default) applies the manifest over it, Warn leaves it as it is and reports the
	// difference (status.drift, condition Drifted). Objects that do not exist are created
	// either way. A sync writes its own here. A metalhub addition.
	// +optional
	DriftPolicy DriftPolicy `json:"driftPolicy,omitempty"`
	// Manifest is the artifact's content: one or more YAML or JSON documents, at most
	// 1 MiB (1048576 characters).
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Manifest string `json:"manifest,omitempty"`
	// ReconciledAt is when the sync last wrote this manifest.
	// +optional
	ReconciledAt *metav1.Time `json:"reconciledAt,omitempty"`
}

// ManagedResource is one object applied from the manifest.
type ManagedResource struct {
	// +required
	APIVersion string `json:"apiVersion"`
	// +required
	Kind string `json:"kind"`
	// +required
	Name string `json:"name"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// VidraResourceStatus reports the last deployment.
type VidraResourceStatus struct {
	// DeployState is the state of the deployment (spelt as the reference does).
	// +optional
	DeployState State `json:"DeployState,omitempty"`
	// LastError is the last error, cleared by a successful apply.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// LastSyncTime is when the manifest was last applied successfully.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// ManagedResources are the objects applied from the manifest: the first 1,000 of them
	// (managedResourceCount counts them all).
	// +optional
	ManagedResources []ManagedResource `json:"managedResources,omitempty"`
	// ManagedResourceCount is how many objects were applied from the manifest, for kubectl get.
	// +optional
	ManagedResourceCount int32 `json:"managedResourceCount,omitempty"`
	// Health is how the applied objects are doing, as kstatus computes it: Current when every
	// one is, else InProgress, Failed or NotFound for the first that is not.
	// +optional
	// +kubebuilder:validation:Enum=Current;InProgress;Failed;NotFound;Terminating;Unknown
	Health string `json:"health,omitempty"`
	// Drift lists the applied objects that differ from the manifest and were left as they are
	// (driftPolicy Warn), the first 20, with the paths of the fields that differ. A metalhub
	// addition.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Drift []DriftedObject `json:"drift,omitempty"`
	// ObservedGeneration is the generation the status reports on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions report readiness and why not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VidraResource applies one Infrahub artifact to a cluster and keeps it there.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.DeployState`
// +kubebuilder:printcolumn:name="Resources",type=integer,JSONPath=`.status.managedResourceCount`
// +kubebuilder:printcolumn:name="Health",type=string,JSONPath=`.status.health`
// +kubebuilder:printcolumn:name="Drift",type=string,JSONPath=`.status.conditions[?(@.type=="Drifted")].status`,priority=1
// +kubebuilder:printcolumn:name="Last Sync",type=date,JSONPath=`.status.lastSyncTime`
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.lastError`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VidraResource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VidraResourceSpec   `json:"spec,omitempty"`
	Status VidraResourceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// VidraResourceList is a list of VidraResources.
type VidraResourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VidraResource `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VidraResource{}, &VidraResourceList{})
}
