package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// BMCVersionTemplate is what a BMCVersion asks for, without its BMC: the part a BMCVersionSet
// stamps out per BMC.
type BMCVersionTemplate struct {
	// Version is the firmware version the BMC is to report (its Manager's FirmwareVersion).
	// +required
	Version string `json:"version"`
	// Image installs Version.
	// +required
	Image systemv1alpha1.ImageSpec `json:"image"`
	// UpdatePolicy Force flashes even if the BMC already reports Version.
	// +optional
	UpdatePolicy systemv1alpha1.UpdatePolicy `json:"updatePolicy,omitempty"`
	// ServerMaintenancePolicy, when set, takes every server of the BMC into maintenance for the
	// upgrade (OwnerApproval or Enforced); unset, the hosts keep running: a BMC's restart does
	// not restart them.
	// +optional
	ServerMaintenancePolicy metalv1alpha1.ServerMaintenancePolicy `json:"serverMaintenancePolicy,omitempty"`
	// RetryPolicy bounds the attempts of a failing flash.
	// +optional
	RetryPolicy *systemv1alpha1.RetryPolicy `json:"retryPolicy,omitempty"`
	// UpgradePath lists intermediate versions the vendor requires on the way to Version, in
	// order (metalhub's own field, as on BIOSVersion).
	// +optional
	UpgradePath []systemv1alpha1.VersionStep `json:"upgradePath,omitempty"`
}

// BMCVersionSpec asks for one BMC's firmware to be at a version.
// +kubebuilder:validation:XValidation:rule="size(self.version) > 0",message="version is required"
type BMCVersionSpec struct {
	BMCVersionTemplate `json:",inline"`
	// BMCRef names the BMC.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bmcRef is immutable"
	BMCRef *corev1.LocalObjectReference `json:"bmcRef"`
	// ServerMaintenanceRefs name the maintenance.metal.ironcore.dev ServerMaintenances of the
	// BMC's servers, when ServerMaintenancePolicy asks for them.
	// +optional
	ServerMaintenanceRefs []metalv1alpha1.ObjectReference `json:"serverMaintenanceRefs,omitempty"`
}

// BMCVersion upgrades one BMC's firmware: one SimpleUpdate per step, the Redfish task followed
// without waiting through the BMC's restart, the version read back.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bmcv
// +kubebuilder:printcolumn:name="BMCVersion",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="UpdatePolicy",type=string,JSONPath=`.spec.updatePolicy`
// +kubebuilder:printcolumn:name="BMCRef",type=string,JSONPath=`.spec.bmcRef.name`
// +kubebuilder:printcolumn:name="TaskProgress",type=integer,JSONPath=`.status.upgradeTask.percentageComplete`
// +kubebuilder:printcolumn:name="TaskState",type=string,JSONPath=`.status.upgradeTask.state`
// +kubebuilder:printcolumn:name="TaskStatus",type=string,JSONPath=`.status.upgradeTask.status`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`,priority=1
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.currentVersion`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCVersion struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BMCVersionSpec                   `json:"spec,omitempty"`
	Status systemv1alpha1.BIOSVersionStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BMCVersionList is a list of BMCVersions.
type BMCVersionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCVersion `json:"items"`
}

// BMCVersionSetSpec selects BMCs and says what BMCVersion each gets, and how fast.
// +kubebuilder:validation:XValidation:rule="size(self.bmcVersionTemplate.version) > 0",message="version is required"
type BMCVersionSetSpec struct {
	// BMCSelector selects the BMCs by label.
	// +required
	BMCSelector metav1.LabelSelector `json:"bmcSelector"`
	// BMCVersionTemplate is each selected BMC's BMCVersion.
	// +required
	BMCVersionTemplate BMCVersionTemplate `json:"bmcVersionTemplate"`
	// Rollout paces the upgrade in waves (metalhub's own field); without it every selected BMC
	// starts at once, as in the reference.
	// +optional
	Rollout *systemv1alpha1.RolloutSpec `json:"rollout,omitempty"`
}

// BMCVersionSetStatus counts the set's BMCVersions by state and reports the rollout.
type BMCVersionSetStatus struct {
	// FullyLabeledBMCs is how many BMCs the selector selects.
	// +optional
	FullyLabeledBMCs int32 `json:"fullyLabeledBMCs,omitempty"`
	// AvailableBMCVersion is how many BMCVersions the set has made so far.
	// +optional
	AvailableBMCVersion int32 `json:"availableBMCVersion,omitempty"`
	// +optional
	PendingBMCVersion int32 `json:"pendingBMCVersion,omitempty"`
	// +optional
	InProgressBMCVersion int32 `json:"inProgressBMCVersion,omitempty"`
	// +optional
	CompletedBMCVersion int32 `json:"completedBMCVersion,omitempty"`
	// +optional
	FailedBMCVersion int32 `json:"failedBMCVersion,omitempty"`
	// Rollout reports the waves (metalhub's own field).
	// +optional
	Rollout systemv1alpha1.RolloutStatus `json:"rollout,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions give the reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BMCVersionSet upgrades the firmware of every selected BMC: one BMCVersion per BMC, made wave by
// wave.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bmcvs
// +kubebuilder:printcolumn:name="BMCVersion",type=string,JSONPath=`.spec.bmcVersionTemplate.version`
// +kubebuilder:printcolumn:name="selectedBMCs",type=integer,JSONPath=`.status.fullyLabeledBMCs`
// +kubebuilder:printcolumn:name="AvailableBMCVersion",type=integer,JSONPath=`.status.availableBMCVersion`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingBMCVersion`
// +kubebuilder:printcolumn:name="InProgress",type=integer,JSONPath=`.status.inProgressBMCVersion`
// +kubebuilder:printcolumn:name="Completed",type=integer,JSONPath=`.status.completedBMCVersion`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedBMCVersion`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Wave",type=integer,JSONPath=`.status.rollout.wave`
// +kubebuilder:printcolumn:name="Waves",type=integer,JSONPath=`.status.rollout.waves`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCVersionSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BMCVersionSetSpec   `json:"spec,omitempty"`
	Status BMCVersionSetStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BMCVersionSetList is a list of BMCVersionSets.
type BMCVersionSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCVersionSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BMCVersion{}, &BMCVersionList{}, &BMCVersionSet{}, &BMCVersionSetList{})
}
