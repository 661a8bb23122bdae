package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// BMCSettingsTemplate is what a BMCSettings asks for, without its BMC: the part a BMCSettingsSet
// stamps out per BMC.
// +kubebuilder:validation:XValidation:rule="!has(self.variables) || self.variables.all(v, self.variables.filter(w, w.key == v.key).size() == 1)",message="variable keys must be unique"
type BMCSettingsTemplate struct {
	// Version is the BMC firmware version the settings are meant for: a BMC that runs another
	// waits.
	// +required
	Version string `json:"version"`
	// SettingsFlow are the BMC's attributes in steps, applied in order of priority (lowest
	// first).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	SettingsFlow []systemv1alpha1.SettingsFlowItem `json:"settingsFlow,omitempty"`
	// Settings are attributes applied as one step before the flow (metalhub's own field: the
	// reference's samples write it).
	// +optional
	Settings map[string]string `json:"settings,omitempty"`
	// Variables give values to $(key) in the settings.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Variables []systemv1alpha1.Variable `json:"variables,omitempty"`
	// ServerMaintenancePolicy, when set, takes every server of the BMC into maintenance while
	// the settings are applied (OwnerApproval or Enforced); unset, the hosts keep running.
	// +optional
	ServerMaintenancePolicy metalv1alpha1.ServerMaintenancePolicy `json:"serverMaintenancePolicy,omitempty"`
	// RetryPolicy bounds the attempts of a step whose settings do not take.
	// +optional
	RetryPolicy *systemv1alpha1.RetryPolicy `json:"retryPolicy,omitempty"`
}

// ServerMaintenanceRefItem names one ServerMaintenance, as the reference nests it.
type ServerMaintenanceRefItem struct {
	// +optional
	ServerMaintenanceRef *metalv1alpha1.ObjectReference `json:"serverMaintenanceRef,omitempty"`
}

// BMCSettingsSpec asks for one BMC's own settings.
// +kubebuilder:validation:XValidation:rule="size(self.version) > 0",message="version is required"
type BMCSettingsSpec struct {
	BMCSettingsTemplate `json:",inline"`
	// BMCRef names the BMC.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bmcRef is immutable"
	BMCRef *corev1.LocalObjectReference `json:"bmcRef"`
	// ServerMaintenanceRefs name the ServerMaintenances of the BMC's servers, when
	// ServerMaintenancePolicy asks for them.
	// +optional
	ServerMaintenanceRefs []ServerMaintenanceRefItem `json:"serverMaintenanceRefs,omitempty"`
}

// BMCSettings applies a BMC's own attributes step by step, read back after each.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="BMCVersion",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="BMCRef",type=string,JSONPath=`.spec.bmcRef.name`
// +kubebuilder:printcolumn:name="AppliedOn",type=date,JSONPath=`.status.lastAppliedTime`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCSettings struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BMCSettingsSpec   `json:"spec,omitempty"`
	Status BMCSettingsStatus `json:"status,omitempty"`
}

// BMCSettingsStatus reports the settings as a BIOSSettings' status does.
type BMCSettingsStatus struct {
	systemv1alpha1.BIOSSettingsStatus `json:",inline"`
	// AppliedETags is the reference operator's bookkeeping, kept as found on objects it wrote;
	// metalhub keeps its own in the object's annotations and does not write this.
	// +optional
	AppliedETags map[string]runtime.RawExtension `json:"appliedETags,omitempty"`
}

// +kubebuilder:object:root=true

// BMCSettingsList is a list of BMCSettings.
type BMCSettingsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCSettings `json:"items"`
}

// BMCSettingsSetSpec selects BMCs and says what BMCSettings each gets, and how fast.
// +kubebuilder:validation:XValidation:rule="size(self.bmcSettingsTemplate.version) > 0",message="version is required"
type BMCSettingsSetSpec struct {
	// BMCSelector selects the BMCs by label.
	// +required
	BMCSelector metav1.LabelSelector `json:"bmcSelector"`
	// BMCSettingsTemplate is each selected BMC's BMCSettings.
	// +required
	BMCSettingsTemplate BMCSettingsTemplate `json:"bmcSettingsTemplate"`
	// Rollout paces the settings in waves (metalhub's own field).
	// +optional
	Rollout *systemv1alpha1.RolloutSpec `json:"rollout,omitempty"`
}

// BMCSettingsSetStatus counts the set's BMCSettings by state and reports the rollout.
type BMCSettingsSetStatus struct {
	// +optional
	FullyLabeledBMCs int32 `json:"fullyLabeledBMCs,omitempty"`
	// +optional
	AvailableBMCSettings int32 `json:"availableBMCSettings,omitempty"`
	// +optional
	PendingBMCSettings int32 `json:"pendingBMCSettings,omitempty"`
	// +optional
	InProgressBMCSettings int32 `json:"inProgressBMCSettings,omitempty"`
	// +optional
	CompletedBMCSettings int32 `json:"completedBMCSettings,omitempty"`
	// +optional
	FailedBMCSettings int32 `json:"failedBMCSettings,omitempty"`
	// Rollout reports the waves (metalhub's own field).
	// +optional
	Rollout systemv1alpha1.RolloutStatus `json:"rollout,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BMCSettingsSet applies BMC settings to every selected BMC, wave by wave.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="BMCVersion",type=string,JSONPath=`.spec.bmcSettingsTemplate.version`
// +kubebuilder:printcolumn:name="TotalBMCs",type=integer,JSONPath=`.status.fullyLabeledBMCs`
// +kubebuilder:printcolumn:name="AvailableBMCSettings",type=integer,JSONPath=`.status.availableBMCSettings`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingBMCSettings`
// +kubebuilder:printcolumn:name="InProgress",type=integer,JSONPath=`.status.inProgressBMCSettings`
// +kubebuilder:printcolumn:name="Completed",type=integer,JSONPath=`.status.completedBMCSettings`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedBMCSettings`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMCSettingsSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BMCSettingsSetSpec   `json:"spec,omitempty"`
	Status BMCSettingsSetStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BMCSettingsSetList is a list of BMCSettingsSets.
type BMCSettingsSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMCSettingsSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BMCSettings{}, &BMCSettingsList{}, &BMCSettingsSet{}, &BMCSettingsSetList{})
}
