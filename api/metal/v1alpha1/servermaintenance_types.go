package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerMaintenancePolicy says who decides when maintenance starts.
// +kubebuilder:validation:Enum=OwnerApproval;Enforced
type ServerMaintenancePolicy string

const (
	// ServerMaintenancePolicyOwnerApproval waits for the claim owner's approval.
	ServerMaintenancePolicyOwnerApproval ServerMaintenancePolicy = "OwnerApproval"
	// ServerMaintenancePolicyEnforced starts at once.
	ServerMaintenancePolicyEnforced ServerMaintenancePolicy = "Enforced"
)

// ServerBootConfigurationTemplate is the boot configuration a server uses during maintenance.
type ServerBootConfigurationTemplate struct {
	// Name of the boot configuration to create.
	// +required
	Name string `json:"name"`
	// Spec of the boot configuration.
	// +required
	Spec ServerBootConfigurationSpec `json:"spec"`
}

// ServerMaintenanceSpec asks for a server to be taken into maintenance.
type ServerMaintenanceSpec struct {
	// ServerRef names the server.
	// +required
	ServerRef *corev1.LocalObjectReference `json:"serverRef"`
	// Policy is OwnerApproval or Enforced.
	// +optional
	Policy ServerMaintenancePolicy `json:"policy,omitempty"`
	// Priority orders several maintenances of one server; higher goes first.
	// +optional
	// +kubebuilder:default=0
	Priority int32 `json:"priority"`
	// ServerPower is the power state during maintenance.
	// +optional
	ServerPower Power `json:"serverPower,omitempty"`
	// ServerBootConfigurationTemplate is what the server boots during maintenance.
	// +optional
	ServerBootConfigurationTemplate *ServerBootConfigurationTemplate `json:"serverBootConfigurationTemplate,omitempty"`
	// LocatorLED is the locator LED while the server is in the maintenance (Lit, Blinking or
	// Off); afterwards it goes back to the Server's spec.indicatorLED, or Off.
	// +optional
	LocatorLED IndicatorLED `json:"locatorLED,omitempty"`
}

// ServerMaintenanceState is where a maintenance stands.
// +kubebuilder:validation:Enum=Pending;InMaintenance;Failed
type ServerMaintenanceState string

const (
	ServerMaintenanceStatePending       ServerMaintenanceState = "Pending"
	ServerMaintenanceStateInMaintenance ServerMaintenanceState = "InMaintenance"
	ServerMaintenanceStateFailed        ServerMaintenanceState = "Failed"
)

// ServerMaintenanceStatus reports the maintenance.
type ServerMaintenanceStatus struct {
	// State is Pending, InMaintenance or Failed.
	// +optional
	State ServerMaintenanceState `json:"state,omitempty"`
	// Conditions give the reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServerMaintenance takes a server out of service for maintenance.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sm
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policy`
// +kubebuilder:printcolumn:name="BootConfiguration",type=string,JSONPath=`.spec.serverBootConfigurationTemplate.name`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.metadata.annotations.metal\.ironcore\.dev\/reason`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServerMaintenance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerMaintenanceSpec   `json:"spec,omitempty"`
	Status ServerMaintenanceStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServerMaintenanceList is a list of ServerMaintenances.
type ServerMaintenanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServerMaintenance `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServerMaintenance{}, &ServerMaintenanceList{})
}
