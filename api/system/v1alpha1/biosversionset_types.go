package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BIOSVersionSetSpec selects servers and says what BIOSVersion each gets, and how fast.
// +kubebuilder:validation:XValidation:rule="size(self.biosVersionTemplate.version) > 0",message="version is required"
type BIOSVersionSetSpec struct {
	// ServerSelector selects the servers by label.
	// +required
	ServerSelector metav1.LabelSelector `json:"serverSelector"`
	// BIOSVersionTemplate is each selected server's BIOSVersion.
	// +required
	BIOSVersionTemplate BIOSVersionTemplate `json:"biosVersionTemplate"`
	// Rollout paces the upgrade in waves (metalhub's own field); without it every selected
	// server starts at once, as in the reference.
	// +optional
	Rollout *RolloutSpec `json:"rollout,omitempty"`
}

// BIOSVersionSetStatus counts the set's BIOSVersions by state and reports the rollout.
type BIOSVersionSetStatus struct {
	// FullyLabeledServers is how many servers the selector selects.
	// +optional
	FullyLabeledServers int32 `json:"fullyLabeledServers,omitempty"`
	// AvailableBIOSVersion is how many BIOSVersions the set has made so far.
	// +optional
	AvailableBIOSVersion int32 `json:"availableBIOSVersion,omitempty"`
	// +optional
	PendingBIOSVersion int32 `json:"pendingBIOSVersion,omitempty"`
	// +optional
	InProgressBIOSVersion int32 `json:"inProgressBIOSVersion,omitempty"`
	// +optional
	CompletedBIOSVersion int32 `json:"completedBIOSVersion,omitempty"`
	// +optional
	FailedBIOSVersion int32 `json:"failedBIOSVersion,omitempty"`
	// Rollout reports the waves (metalhub's own field).
	// +optional
	Rollout RolloutStatus `json:"rollout,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions give the reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BIOSVersionSet upgrades the BIOS of every selected server: one BIOSVersion per server, made
// wave by wave (canaries first, unclaimed servers before claimed ones).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=biosvs
// +kubebuilder:printcolumn:name="BIOSVersion",type=string,JSONPath=`.spec.biosVersionTemplate.version`
// +kubebuilder:printcolumn:name="selectedServers",type=integer,JSONPath=`.status.fullyLabeledServers`
// +kubebuilder:printcolumn:name="AvailableBIOSVersion",type=integer,JSONPath=`.status.availableBIOSVersion`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingBIOSVersion`
// +kubebuilder:printcolumn:name="InProgress",type=integer,JSONPath=`.status.inProgressBIOSVersion`
// +kubebuilder:printcolumn:name="Completed",type=integer,JSONPath=`.status.completedBIOSVersion`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedBIOSVersion`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Wave",type=integer,JSONPath=`.status.rollout.wave`
// +kubebuilder:printcolumn:name="Waves",type=integer,JSONPath=`.status.rollout.waves`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BIOSVersionSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BIOSVersionSetSpec   `json:"spec,omitempty"`
	Status BIOSVersionSetStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BIOSVersionSetList is a list of BIOSVersionSets.
type BIOSVersionSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BIOSVersionSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BIOSVersionSet{}, &BIOSVersionSetList{})
}
