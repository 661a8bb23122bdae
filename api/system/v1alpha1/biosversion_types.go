package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// BIOSVersionTemplate is what a BIOSVersion asks for, without its server: the part a
// BIOSVersionSet stamps out per server.
type BIOSVersionTemplate struct {
	// Version is the BIOS version the server is to report (its ComputerSystem.BiosVersion).
	// +required
	Version string `json:"version"`
	// Image installs Version.
	// +required
	Image ImageSpec `json:"image"`
	// UpdatePolicy Force flashes even if the server already reports Version.
	// +optional
	UpdatePolicy UpdatePolicy `json:"updatePolicy,omitempty"`
	// ServerMaintenancePolicy decides when a claimed server's maintenance starts
	// (OwnerApproval by default).
	// +optional
	ServerMaintenancePolicy metalv1alpha1.ServerMaintenancePolicy `json:"serverMaintenancePolicy,omitempty"`
	// RetryPolicy bounds the attempts of a failing flash.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`
	// UpgradePath lists intermediate versions the vendor requires on the way to Version, in
	// order: a server flashes each one after the version it reports (all of them when it
	// reports none of them), each with its reboot, then Version. metalhub's own field.
	// +optional
	UpgradePath []VersionStep `json:"upgradePath,omitempty"`
}

// BIOSVersionSpec asks for one server's BIOS to be at a version.
// +kubebuilder:validation:XValidation:rule="size(self.version) > 0",message="version is required"
type BIOSVersionSpec struct {
	BIOSVersionTemplate `json:",inline"`
	// ServerRef names the server.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serverRef is immutable"
	ServerRef *corev1.LocalObjectReference `json:"serverRef"`
	// ServerMaintenanceRef names the maintenance.metal.ironcore.dev ServerMaintenance the
	// upgrade runs in: one the user made, or the one metalhub creates (and deletes after).
	// +optional
	ServerMaintenanceRef *metalv1alpha1.ObjectReference `json:"serverMaintenanceRef,omitempty"`
}

// BIOSVersionStatus reports the upgrade; metalhub keeps where it stands in the object's
// annotations (lifecycle.metalhub.io/firmware), and this is rebuilt from them.
type BIOSVersionStatus struct {
	// State is Pending, InProgress, Completed or Failed.
	// +optional
	State VersionState `json:"state,omitempty"`
	// UpgradeTask is the Redfish task of the flash under way or last run.
	// +optional
	UpgradeTask *TaskStatus `json:"upgradeTask,omitempty"`
	// FailedAttempts counts flashes that failed.
	// +optional
	FailedAttempts int32 `json:"failedAttempts,omitempty"`
	// CurrentVersion is the version the server last reported (metalhub's own field).
	// +optional
	CurrentVersion string `json:"currentVersion,omitempty"`
	// Step is the upgrade step under way, "<n>/<of> <version>" (metalhub's own field).
	// +optional
	Step string `json:"step,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions give the reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BIOSVersion upgrades one server's BIOS: through a ServerMaintenance (the claim's owner
// approves with OwnerApproval), one SimpleUpdate per step, the Redfish task followed, one reboot,
// the version read back.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=biosv
// +kubebuilder:printcolumn:name="BIOSVersion",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="UpdatePolicy",type=string,JSONPath=`.spec.updatePolicy`
// +kubebuilder:printcolumn:name="ServerRef",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="ServerMaintenanceRef",type=string,JSONPath=`.spec.serverMaintenanceRef.name`
// +kubebuilder:printcolumn:name="TaskState",type=string,JSONPath=`.status.upgradeTask.state`
// +kubebuilder:printcolumn:name="TaskStatus",type=string,JSONPath=`.status.upgradeTask.status`
// +kubebuilder:printcolumn:name="TaskProgress",type=integer,JSONPath=`.status.upgradeTask.percentageComplete`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Step",type=string,JSONPath=`.status.step`,priority=1
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.currentVersion`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BIOSVersion struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BIOSVersionSpec   `json:"spec,omitempty"`
	Status BIOSVersionStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BIOSVersionList is a list of BIOSVersions.
type BIOSVersionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BIOSVersion `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BIOSVersion{}, &BIOSVersionList{})
}
