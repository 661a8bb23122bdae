package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// ServerMaintenanceSpec asks for a server to be taken into maintenance. Unlike the older
// metal.ironcore.dev kind it says nothing of power or boot: the server keeps the power it has.
type ServerMaintenanceSpec struct {
	// ServerRef names the server.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.name != ''",message="serverRef.name must not be empty"
	ServerRef *corev1.LocalObjectReference `json:"serverRef"`
	// Policy is OwnerApproval (the claim's owner approves by labelling the ServerClaim
	// metal.ironcore.dev/maintenance-approved) or Enforced.
	// +required
	Policy metalv1alpha1.ServerMaintenancePolicy `json:"policy"`
	// Priority orders several maintenances of one server; higher goes first.
	// +optional
	// +kubebuilder:default=0
	Priority int32 `json:"priority"`
	// LocatorLED is the locator LED while the server is in the maintenance (Lit, Blinking or
	// Off); afterwards it goes back to the Server's spec.indicatorLED, or Off.
	// +optional
	LocatorLED metalv1alpha1.IndicatorLED `json:"locatorLED,omitempty"`
}

// ServerMaintenanceStatus reports the maintenance.
type ServerMaintenanceStatus struct {
	// State is Pending, InMaintenance or Failed.
	// +optional
	State metalv1alpha1.ServerMaintenanceState `json:"state,omitempty"`
	// Conditions give the reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServerMaintenance takes a server out of service for maintenance. metalhub carries it out
// through a metal.ironcore.dev ServerMaintenance of the same namespace and name that it keeps
// for it (owned by this one), and reports that one's state here.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policy`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.metadata.annotations.metal\.ironcore\.dev\/maintenance-reason`
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
