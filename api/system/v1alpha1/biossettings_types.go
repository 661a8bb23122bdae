package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// BIOSSettingsTemplate is what a BIOSSettings asks for, without its server: the part a
// BIOSSettingsSet stamps out per server.
// +kubebuilder:validation:XValidation:rule="!has(self.variables) || self.variables.all(v, self.variables.filter(w, w.key == v.key).size() == 1)",message="variable keys must be unique"
type BIOSSettingsTemplate struct {
	// Version is the BIOS version the settings are meant for: a server that runs another waits.
	// +required
	Version string `json:"version"`
	// SettingsFlow are the settings in steps, applied in order of priority (lowest first), each
	// with one restart where its settings need one.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	SettingsFlow []SettingsFlowItem `json:"settingsFlow,omitempty"`
	// Variables give values to $(key) in the settings.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Variables []Variable `json:"variables,omitempty"`
	// ServerMaintenancePolicy decides when a claimed server's maintenance starts
	// (OwnerApproval by default).
	// +optional
	ServerMaintenancePolicy metalv1alpha1.ServerMaintenancePolicy `json:"serverMaintenancePolicy,omitempty"`
	// RetryPolicy bounds the attempts of a step whose settings do not take.
	// +optional
	RetryPolicy *RetryPolicy `json:"retryPolicy,omitempty"`
}

// BIOSSettingsSpec asks for one server's BIOS settings.
// +kubebuilder:validation:XValidation:rule="size(self.version) > 0",message="version is required"
type BIOSSettingsSpec struct {
	BIOSSettingsTemplate `json:",inline"`
	// ServerRef names the server.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serverRef is immutable"
	ServerRef *corev1.LocalObjectReference `json:"serverRef"`
	// ServerMaintenanceRef names the maintenance.metal.ironcore.dev ServerMaintenance the
	// restarts run in: one the user made, or the one metalhub creates (and deletes after).
	// +optional
	ServerMaintenanceRef *metalv1alpha1.ObjectReference `json:"serverMaintenanceRef,omitempty"`
}

// FlowStatus reports one step of a settings flow.
type FlowStatus struct {
	// Name of the step.
	// +optional
	Name string `json:"name,omitempty"`
	// Priority of the step.
	// +optional
	Priority int32 `json:"priority,omitempty"`
	// FlowState is Pending, InProgress, Applied or Failed.
	// +optional
	FlowState SettingsState `json:"flowState,omitempty"`
	// LastAppliedTime is when the step's settings were found in effect.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`
	// Conditions give the reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BIOSSettingsStatus reports the settings; metalhub keeps where they stand in the object's
// annotations (lifecycle.metalhub.io/firmware), and this is rebuilt from them.
type BIOSSettingsStatus struct {
	// State is Pending, InProgress, Applied or Failed.
	// +optional
	State SettingsState `json:"state,omitempty"`
	// FlowState reports each step.
	// +optional
	FlowState []FlowStatus `json:"flowState,omitempty"`
	// LastAppliedTime is when the last step was found in effect.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`
	// FailedAttempts counts steps whose settings did not take.
	// +optional
	FailedAttempts int32 `json:"failedAttempts,omitempty"`
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions give the reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BIOSSettings applies BIOS attributes to one server, step by step: through a
// ServerMaintenance where a restart is needed, staged in the Bios settings object (ApplyTime
// OnReset), one restart per step, read back.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bioss
// +kubebuilder:printcolumn:name="BIOSVersion",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="ServerRef",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="ServerMaintenanceRef",type=string,JSONPath=`.spec.serverMaintenanceRef.name`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="AppliedOn",type=date,JSONPath=`.status.lastAppliedTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BIOSSettings struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BIOSSettingsSpec   `json:"spec,omitempty"`
	Status BIOSSettingsStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BIOSSettingsList is a list of BIOSSettings.
type BIOSSettingsList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BIOSSettings `json:"items"`
}

// BIOSSettingsSetSpec selects servers and says what BIOSSettings each gets, and how fast.
// +kubebuilder:validation:XValidation:rule="size(self.biosSettingsTemplate.version) > 0",message="version is required"
type BIOSSettingsSetSpec struct {
	// ServerSelector selects the servers by label.
	// +required
	ServerSelector metav1.LabelSelector `json:"serverSelector"`
	// BIOSSettingsTemplate is each selected server's BIOSSettings.
	// +required
	BIOSSettingsTemplate BIOSSettingsTemplate `json:"biosSettingsTemplate"`
	// Rollout paces the settings in waves (metalhub's own field); without it every selected
	// server starts at once, as in the reference.
	// +optional
	Rollout *RolloutSpec `json:"rollout,omitempty"`
}

// BIOSSettingsSetStatus counts the set's BIOSSettings by state and reports the rollout.
type BIOSSettingsSetStatus struct {
	// FullyLabeledServers is how many servers the selector selects.
	// +optional
	FullyLabeledServers int32 `json:"fullyLabeledServers,omitempty"`
	// AvailableBIOSSettings is how many BIOSSettings the set has made so far.
	// +optional
	AvailableBIOSSettings int32 `json:"availableBIOSSettings,omitempty"`
	// +optional
	PendingBIOSSettings int32 `json:"pendingBIOSSettings,omitempty"`
	// +optional
	InProgressBIOSSettings int32 `json:"inProgressBIOSSettings,omitempty"`
	// +optional
	CompletedBIOSSettings int32 `json:"completedBIOSSettings,omitempty"`
	// +optional
	FailedBIOSSettings int32 `json:"failedBIOSSettings,omitempty"`
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

// BIOSSettingsSet applies BIOS settings to every selected server: one BIOSSettings per server,
// made wave by wave.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=biosss
// +kubebuilder:printcolumn:name="BIOSVersion",type=string,JSONPath=`.spec.biosSettingsTemplate.version`
// +kubebuilder:printcolumn:name="TotalServers",type=integer,JSONPath=`.status.fullyLabeledServers`
// +kubebuilder:printcolumn:name="AvailableBIOSSettings",type=integer,JSONPath=`.status.availableBIOSSettings`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingBIOSSettings`
// +kubebuilder:printcolumn:name="InProgress",type=integer,JSONPath=`.status.inProgressBIOSSettings`
// +kubebuilder:printcolumn:name="Completed",type=integer,JSONPath=`.status.completedBIOSSettings`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedBIOSSettings`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.phase`
// +kubebuilder:printcolumn:name="Wave",type=integer,JSONPath=`.status.rollout.wave`
// +kubebuilder:printcolumn:name="Waves",type=integer,JSONPath=`.status.rollout.waves`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BIOSSettingsSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BIOSSettingsSetSpec   `json:"spec,omitempty"`
	Status BIOSSettingsSetStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BIOSSettingsSetList is a list of BIOSSettingsSets.
type BIOSSettingsSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BIOSSettingsSet `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BIOSSettings{}, &BIOSSettingsList{}, &BIOSSettingsSet{}, &BIOSSettingsSetList{})
}
