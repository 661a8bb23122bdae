package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerBootConfigurationSpec is what a server boots: an image and its ignition.
// +kubebuilder:validation:XValidation:rule="!has(self.bootMethod) || self.bootMethod != 'VirtualMedia' || (has(self.bootURI) && size(self.bootURI) > 0)",message="bootMethod VirtualMedia needs bootURI: the ISO the BMC mounts"
// +kubebuilder:validation:XValidation:rule="!has(self.rootVolume) || !has(self.rootDeviceHints)",message="rootVolume and rootDeviceHints exclude each other: the root volume is the root device"
type ServerBootConfigurationSpec struct {
	// ServerRef names the server that boots this configuration.
	// +required
	ServerRef corev1.LocalObjectReference `json:"serverRef"`
	// Image is the OS image to boot.
	// +optional
	Image string `json:"image,omitempty"`
	// IgnitionSecretRef names the Secret with the ignition.
	// +optional
	IgnitionSecretRef *corev1.LocalObjectReference `json:"ignitionSecretRef,omitempty"`
	// NetworkBoot says which power-ons of the claimed server boot from the network (a one-time
	// override set before the power-on): EveryPowerOn (the default, as metal-operator does) or
	// FirstPowerOn (only the first under this configuration; later ones boot the disk). A
	// metalhub addition; the claim's own field is copied here.
	// +optional
	NetworkBoot NetworkBoot `json:"networkBoot,omitempty"`
	// BootMethod is how the server gets to the boot provider's image: PXE (the default, as
	// metal-operator does: a one-time Pxe override), HTTP (UEFI HTTP boot: a one-time UefiHttp
	// override, from bootURI when set, else from what DHCP offers) or VirtualMedia (the ISO at
	// bootURI inserted into the BMC's virtual CD, then a one-time Cd boot; ejected when the
	// configuration no longer applies). A method the BMC does not advertise is reported on the
	// Server (condition BootMethod) and nothing is booted. A metalhub addition.
	// +optional
	BootMethod BootMethod `json:"bootMethod,omitempty"`
	// BootURI is the image the BMC boots: the ISO for VirtualMedia (http, https, nfs or cifs),
	// the EFI binary or ISO for HTTP (http or https). A metalhub addition.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|nfs|cifs)://[^\s]+$`
	BootURI string `json:"bootURI,omitempty"`
	// RootVolume is the RAID volume made before the server boots this configuration (see
	// ServerClaim). A metalhub addition.
	// +optional
	RootVolume *RootVolume `json:"rootVolume,omitempty"`
	// RootDeviceHints pick the disk the OS is installed on (see ServerClaim); the disk they
	// resolve to is reported in status.rootDevice before the server boots this configuration.
	// A metalhub addition.
	// +optional
	RootDeviceHints *RootDeviceHints `json:"rootDeviceHints,omitempty"`
	// MetadataTokenSecretRef names the Secret (key "token", same namespace) with the token the
	// booted OS presents to metalhub's metadata service (header Metadata-Token or query
	// parameter token) for its metadata and user data. A boot provider hands it to the machine,
	// e.g. as kernel argument metalhub.token=<token> or in the metadata URL it writes. Set by
	// the claim controller for a claim's boot configuration, one random token per claim. A
	// metalhub addition.
	// +optional
	MetadataTokenSecretRef *corev1.LocalObjectReference `json:"metadataTokenSecretRef,omitempty"`
}

// BootMethod is how a server boots its configuration's image.
// +kubebuilder:validation:Enum=PXE;HTTP;VirtualMedia
type BootMethod string

const (
	// BootMethodPXE: a one-time PXE boot (DHCP and TFTP or iPXE from the boot provider).
	BootMethodPXE BootMethod = "PXE"
	// BootMethodHTTP: a one-time UEFI HTTP boot (Redfish BootSourceOverrideTarget UefiHttp).
	BootMethodHTTP BootMethod = "HTTP"
	// BootMethodVirtualMedia: an ISO in the BMC's virtual CD and a one-time Cd boot.
	BootMethodVirtualMedia BootMethod = "VirtualMedia"
)

// NetworkBoot says which power-ons of a claimed server boot its configuration from the network.
// +kubebuilder:validation:Enum=EveryPowerOn;FirstPowerOn
type NetworkBoot string

const (
	// NetworkBootEveryPowerOn: a one-time network boot before every power-on of the claim.
	NetworkBootEveryPowerOn NetworkBoot = "EveryPowerOn"
	// NetworkBootFirstPowerOn: only the first power-on under the configuration boots from the
	// network; the installed system boots from its disk after that.
	NetworkBootFirstPowerOn NetworkBoot = "FirstPowerOn"
)

// ServerBootConfigurationState is set by a boot provider.
// +kubebuilder:validation:Enum=Pending;Ready;Error
type ServerBootConfigurationState string

const (
	ServerBootConfigurationStatePending ServerBootConfigurationState = "Pending"
	ServerBootConfigurationStateReady   ServerBootConfigurationState = "Ready"
	ServerBootConfigurationStateError   ServerBootConfigurationState = "Error"
)

// ServerBootConfigurationStatus reports whether the boot provider can serve the configuration.
type ServerBootConfigurationStatus struct {
	// State is Pending until a boot provider marks it Ready or Error.
	// +optional
	State ServerBootConfigurationState `json:"state,omitempty"`
	// Conditions give the boot provider's reasons.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// RootDevice is the disk spec.rootDeviceHints resolve to on the server, from its
	// discovered inventory; written by metalhub before the server boots the configuration, for
	// the installer the boot provider serves. A metalhub addition.
	// +optional
	RootDevice *RootDevice `json:"rootDevice,omitempty"`
}

// RootDevice is one disk of a server, as discovery found it.
type RootDevice struct {
	// Name is the kernel's name of the disk when discovery ran (sda, nvme0n1).
	Name string `json:"name"`
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// +optional
	WWN string `json:"wwn,omitempty"`
	// +optional
	Model string `json:"model,omitempty"`
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
}

// ServerBootConfiguration tells a boot provider what a server should network-boot.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbc
// +kubebuilder:printcolumn:name="ServerRef",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="IgnitionRef",type=string,JSONPath=`.spec.ignitionSecretRef.name`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="BootMethod",type=string,JSONPath=`.spec.bootMethod`,priority=1
// +kubebuilder:printcolumn:name="RootDevice",type=string,JSONPath=`.status.rootDevice.name`,priority=1
type ServerBootConfiguration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerBootConfigurationSpec   `json:"spec,omitempty"`
	Status ServerBootConfigurationStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServerBootConfigurationList is a list of ServerBootConfigurations.
type ServerBootConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServerBootConfiguration `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServerBootConfiguration{}, &ServerBootConfigurationList{})
}
