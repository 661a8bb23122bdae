package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InlineEndpoint gives a BMC's address directly, instead of through an Endpoint object.
type InlineEndpoint struct {
	// MACAddress of the BMC.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$`
	MACAddress string `json:"macAddress,omitempty"`
	// IP (or host name) of the BMC.
	// +optional
	IP string `json:"ip,omitempty"`
}

// ConsoleProtocolName names a serial console protocol.
// +kubebuilder:validation:Enum=IPMI;SSH;SSHLenovo
type ConsoleProtocolName string

// ConsoleProtocol says how to reach a server's serial console through its BMC.
type ConsoleProtocol struct {
	// Name of the console protocol.
	// +required
	Name ConsoleProtocolName `json:"name"`
	// Port of the console.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// BMCSpec says where a BMC is and how to log in.
// +kubebuilder:validation:XValidation:rule="has(self.access) != has(self.endpointRef)",message="exactly one of access or endpointRef must be set"
type BMCSpec struct {
	// Access gives the BMC's address inline. Immutable: register a new BMC to move it.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="access is immutable"
	Access *InlineEndpoint `json:"access,omitempty"`
	// EndpointRef names the Endpoint that holds the BMC's address. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="endpointRef is immutable"
	EndpointRef *corev1.LocalObjectReference `json:"endpointRef,omitempty"`
	// BMCSecretRef names the BMCSecret with the BMC's credentials.
	// +required
	BMCSecretRef corev1.LocalObjectReference `json:"bmcSecretRef"`
	// Protocol to manage the BMC with.
	// +required
	Protocol Protocol `json:"protocol"`
	// ConsoleProtocol to reach the servers' serial consoles.
	// +optional
	ConsoleProtocol *ConsoleProtocol `json:"consoleProtocol,omitempty"`
	// BMCUUID is the BMC's own UUID, if known.
	// +optional
	BMCUUID string `json:"bmcUUID,omitempty"`
	// Hostname of the BMC.
	// +optional
	Hostname *string `json:"hostname,omitempty"`
	// Certificate puts a certificate on the BMC's HTTPS service and renews it (metalhub's own).
	// +optional
	Certificate *BMCCertificate `json:"certificate,omitempty"`
}

// BMCState is the state of a BMC as the controller sees it.
// +kubebuilder:validation:Enum=Enabled;Error;Pending
type BMCState string

const (
	BMCStateEnabled BMCState = "Enabled"
	BMCStateError   BMCState = "Error"
	BMCStatePending BMCState = "Pending"
)

// BMCStatus is what was observed on the BMC.
type BMCStatus struct {
	// MACAddress of the BMC.
	// +optional
	// +kubebuilder:validation:Pattern=`^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$`
	MACAddress string `json:"macAddress,omitempty"`
	// IP of the BMC.
	// +optional
	IP string `json:"ip,omitempty"`
	// Manufacturer of the BMC.
	// +optional
	Manufacturer string `json:"manufacturer,omitempty"`
	// Model of the BMC.
	// +optional
	Model string `json:"model,omitempty"`
	// SKU of the BMC.
	// +optional
	SKU string `json:"sku,omitempty"`
	// SerialNumber of the BMC.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// FirmwareVersion of the BMC.
	// +optional
	FirmwareVersion string `json:"firmwareVersion,omitempty"`
	// State of the BMC.
	// +optional
	// +kubebuilder:default=Pending
	State BMCState `json:"state,omitempty"`
	// PowerState of the BMC itself.
	// +optional
	PowerState PowerState `json:"powerState,omitempty"`
	// LastResetTime is when the BMC was last reset.
	// +optional
	LastResetTime *metav1.Time `json:"lastResetTime,omitempty"`
	// EventsSubscriptionLink is the Redfish event subscription, if any.
	// +optional
	EventsSubscriptionLink string `json:"eventsSubscriptionLink,omitempty"`
	// MetricsReportSubscriptionLink is the Redfish metrics report subscription, if any.
	// +optional
	MetricsReportSubscriptionLink string `json:"metricsReportSubscriptionLink,omitempty"`
	// Certificate reports the certificate metalhub installed (metalhub's own).
	// +optional
	Certificate *BMCCertificateStatus `json:"certificate,omitempty"`
	// Conditions report connectivity (Ready) and its reason.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BMC is a baseboard management controller, reached over Redfish, whose systems become Servers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="MACAddress",type=string,JSONPath=`.status.macAddress`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.ip`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.status.model`
// +kubebuilder:printcolumn:name="SKU",type=string,JSONPath=`.status.sku`,priority=1
// +kubebuilder:printcolumn:name="SerialNumber",type=string,JSONPath=`.status.serialNumber`,priority=1
// +kubebuilder:printcolumn:name="FirmwareVersion",type=string,JSONPath=`.status.firmwareVersion`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="PowerState",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Certificate",type=string,JSONPath=`.status.conditions[?(@.type=="CertificateReady")].reason`,priority=1
// +kubebuilder:printcolumn:name="CertNotAfter",type=string,JSONPath=`.status.certificate.notAfter`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BMC struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BMCSpec   `json:"spec,omitempty"`
	Status BMCStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BMCList is a list of BMCs.
type BMCList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMC `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BMC{}, &BMCList{})
}
