package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Source says which Infrahub artifacts to deliver.
type Source struct {
	// InfrahubAPIURL is the base URL of the Infrahub API.
	// +required
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(http|https)://[a-zA-Z0-9.-]+(:[0-9]+)?(?:/[a-zA-Z0-9-]+)*$`
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != ''",message="must be an absolute http or https URL with a host"
	// +kubebuilder:validation:XValidation:rule="!isURL(self) || self.matches('^[a-zA-Z]+://[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?([.][a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)*([:/?#]|$)')",message="host must be a DNS name or an IPv4 address"
	// +kubebuilder:validation:XValidation:rule="!isURL(self) || url(self).getPort() == '' || (url(self).getPort().size() <= 5 && int(url(self).getPort()) >= 1 && int(url(self).getPort()) <= 65535)",message="port must be between 1 and 65535"
	InfrahubAPIURL string `json:"infrahubAPIURL"`
	// TargetBranch is the Infrahub branch to read.
	// +required
	// +kubebuilder:default=main
	TargetBranch string `json:"targetBranch"`
	// TargetDate reads the branch as it was at this time: an RFC 3339 timestamp or a relative
	// form such as now-2h. The admission webhook refuses a value Infrahub would misread.
	// +optional
	TargetDate string `json:"targetDate,omitempty"`
	// ArtefactName is the name of the artifacts to deliver (spelt as the reference does).
	// +required
	// +kubebuilder:validation:MinLength=1
	ArtefactName string `json:"artefactName"`
	// AllowEmpty lets a query result with no artifacts delete the VidraResources this sync
	// created. Without it an empty result — most often a misspelt artefactName, a wrong
	// branch or a targetDate before the artifacts existed — fails the sync and deletes
	// nothing (the reference deleted everything and reported success).
	// +optional
	AllowEmpty bool `json:"allowEmpty,omitempty"`
}

// InfrahubSyncSpec says what to fetch and where to apply it.
type InfrahubSyncSpec struct {
	// Source of the artifacts.
	// +required
	Source Source `json:"source"`
	// Destination of the artifacts.
	// +optional
	Destination Destination `json:"destination,omitempty"`
	// DependsOn names the InfrahubSyncs that must be Succeeded, with every VidraResource of
	// theirs Healthy, before this sync delivers or its VidraResources apply anything; checked
	// again on every pass. A cycle is refused at admission and reported (DependencyCycle)
	// without it. A metalhub addition.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	DependsOn []Dependency `json:"dependsOn,omitempty"`
	// HealthExpressions decide the health of the objects of the kinds they name with CEL
	// instead of kstatus (Flux's healthCheckExprs). The sync writes them into its
	// VidraResources. A metalhub addition.
	// +optional
	// +listType=map
	// +listMapKey=apiVersion
	// +listMapKey=kind
	// +kubebuilder:validation:MaxItems=32
	HealthExpressions []HealthExpression `json:"healthExpressions,omitempty"`
	// DriftPolicy says what the sync's VidraResources do with an applied object someone
	// changed: Correct (the default) applies the manifest over it, Warn leaves it and reports
	// the difference. The sync writes it into its VidraResources. A metalhub addition.
	// +optional
	DriftPolicy DriftPolicy `json:"driftPolicy,omitempty"`
	// Preview follows Infrahub's open proposed changes into this sync's targetBranch: each one
	// whose source branch changes the sync's artifacts gets a comment saying what they would do
	// to the live objects, dry-run as the sync's VidraResources apply. A metalhub addition.
	// +optional
	Preview *Preview `json:"preview,omitempty"`
}

// Preview configures the preview of proposed changes.
type Preview struct {
	// ProposedChanges turns the comments on proposed changes on.
	// +optional
	ProposedChanges bool `json:"proposedChanges,omitempty"`
}

// PreviewStatus is the last preview of one proposed change.
type PreviewStatus struct {
	// ProposedChange is the proposed change's id in Infrahub.
	ProposedChange string `json:"proposedChange"`
	// Name is the proposed change's name.
	// +optional
	Name string `json:"name,omitempty"`
	// Branch is its source branch.
	Branch string `json:"branch"`
	// Created, Changed, Deleted and Refused count the objects by what the apply would do.
	// +optional
	Created int32 `json:"created,omitempty"`
	// +optional
	Changed int32 `json:"changed,omitempty"`
	// +optional
	Deleted int32 `json:"deleted,omitempty"`
	// +optional
	Refused int32 `json:"refused,omitempty"`
	// Error is why the preview could not be made or posted.
	// +optional
	Error string `json:"error,omitempty"`
	// Time is when the preview was made.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
}

// InfrahubSyncStatus reports the last sync.
type InfrahubSyncStatus struct {
	// Checksums of the artifacts applied in the last successful sync; an unchanged checksum means
	// nothing is downloaded.
	// +optional
	Checksums []string `json:"checksums,omitempty"`
	// LastError is the last error, cleared by a successful sync.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// LastSyncTime is when a pass last queried Infrahub and delivered the result successfully,
	// changed or not: it moves on every successful pass.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// Resources summarises the sync's VidraResources.
	// +optional
	Resources ResourcesSummary `json:"resources,omitempty"`
	// SyncState is the state of the sync.
	// +optional
	SyncState State `json:"syncState,omitempty"`
	// ObservedGeneration is the generation the status reports on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// WaitingOn names the dependency (spec.dependsOn) the sync waits for, empty when none
	// holds it back. A metalhub addition.
	// +optional
	WaitingOn string `json:"waitingOn,omitempty"`
	// Previews report the last preview of each open proposed change into the sync's branch
	// that changes its artifacts (spec.preview). A metalhub addition.
	// +optional
	// +listType=map
	// +listMapKey=proposedChange
	// +kubebuilder:validation:MaxItems=20
	Previews []PreviewStatus `json:"previews,omitempty"`
	// Conditions report readiness and why not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ResourcesSummary counts a sync's VidraResources by how their deployment went.
type ResourcesSummary struct {
	// Total is the number of the sync's VidraResources.
	// +optional
	Total int32 `json:"total,omitempty"`
	// Succeeded is how many of them report Succeeded.
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// Healthy is how many of them report every applied object Healthy (condition Healthy
	// True): a sync that others depend on is ready for them once all are. A metalhub addition.
	// +optional
	Healthy int32 `json:"healthy,omitempty"`
	// Failed names those that report Failed (the first 20).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Failed []string `json:"failed,omitempty"`
}

// InfrahubSync polls Infrahub for artifacts and keeps one VidraResource per artifact.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="Artefact",type=string,JSONPath=`.spec.source.artefactName`
// +kubebuilder:printcolumn:name="Branch",type=string,JSONPath=`.spec.source.targetBranch`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.syncState`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.resources.succeeded`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.resources.healthy`,priority=1
// +kubebuilder:printcolumn:name="Waiting On",type=string,JSONPath=`.status.waitingOn`
// +kubebuilder:printcolumn:name="Resources",type=integer,JSONPath=`.status.resources.total`
// +kubebuilder:printcolumn:name="Last Sync",type=date,JSONPath=`.status.lastSyncTime`
// +kubebuilder:printcolumn:name="Requested",type=date,JSONPath=`.metadata.annotations.infrahub\.operators\.com/requested-at`,priority=1
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.lastError`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InfrahubSync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   InfrahubSyncSpec   `json:"spec,omitempty"`
	Status InfrahubSyncStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// InfrahubSyncList is a list of InfrahubSyncs.
type InfrahubSyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InfrahubSync `json:"items"`
}

func init() {
	SchemeBuilder.Register(&InfrahubSync{}, &InfrahubSyncList{})
}
