package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExpectedNeighbor is a switch port an interface must see over LLDP.
type ExpectedNeighbor struct {
	// SystemName is the neighbour's LLDP system name (the switch's host name).
	// +required
	SystemName string `json:"systemName"`
	// PortID is the neighbour's LLDP port ID (the switch port, e.g. Ethernet1/1).
	// +required
	PortID string `json:"portID"`
}

// ExpectedInterface is how one NIC of the server must be cabled.
type ExpectedInterface struct {
	// MACAddress identifies the NIC among the server's discovered interfaces. Compared without
	// regard to case or separator (aa:bb:..., AA-BB-...).
	// +required
	MACAddress string `json:"macAddress"`
	// CarrierStatus is the link state the NIC must report (up or down); empty: not checked.
	// +optional
	CarrierStatus string `json:"carrierStatus,omitempty"`
	// Neighbors are the LLDP neighbours the NIC must see, all of them and (a metalhub
	// strictness) no other; empty: not checked.
	// +optional
	Neighbors []ExpectedNeighbor `json:"neighbors,omitempty"`
}

// ExpectedNetwork is the cabling a server must show.
type ExpectedNetwork struct {
	// Interfaces are the NICs to check, by MAC address. NICs not listed are not checked.
	// +optional
	Interfaces []ExpectedInterface `json:"interfaces,omitempty"`
}

// ServerWiringSpec names a server and the cabling its discovered NICs must show.
type ServerWiringSpec struct {
	// ServerRef names the (cluster-scoped) Server to check.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.name != ''",message="serverRef.name must not be empty"
	ServerRef corev1.LocalObjectReference `json:"serverRef"`
	// Network is the expected cabling.
	// +optional
	Network ExpectedNetwork `json:"network,omitempty"`
}

// InterfaceMismatch is one way a NIC differs from what the wiring expects.
type InterfaceMismatch struct {
	// MACAddress of the expected interface, as the spec writes it.
	// +required
	MACAddress string `json:"macAddress"`
	// Reason is InterfaceMissing, CarrierDown, CarrierMismatch or NeighborMismatch.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what was expected and what was seen.
	// +required
	Message string `json:"message"`
}

// ServerWiringStatus reports the last comparison of the spec with the Server's discovered NICs.
type ServerWiringStatus struct {
	// Ready is true when every expected interface was found as expected.
	// +kubebuilder:default=false
	Ready bool `json:"ready"`
	// Mismatches lists every difference found, one per interface and kind.
	// +optional
	Mismatches []InterfaceMismatch `json:"mismatches,omitempty"`
	// Conditions: Ready says why the wiring is or is not ready (also when no comparison could
	// be made: ServerNotFound). A metalhub addition.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServerWiring is the cabling a server is expected to show: for each NIC (by MAC address) its
// link state and LLDP neighbours. metalhub compares it with what the discovery probe reported
// in the Server's status.networkInterfaces and sets the Server's NetworkReady condition, which a
// ServerReadinessRule may require before the server can be claimed.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="Ready",type=boolean,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Mismatches",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServerWiring struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerWiringSpec   `json:"spec,omitempty"`
	Status ServerWiringStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServerWiringList is a list of ServerWirings.
type ServerWiringList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServerWiring `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServerWiring{}, &ServerWiringList{})
}
