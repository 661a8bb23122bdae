package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerClaimSpec asks for a server, the image it boots and its power.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serverRef) || has(self.serverRef)",message="serverRef cannot be removed once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serverSelector) || has(self.serverSelector)",message="serverSelector cannot be removed once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.serverRef) || !has(oldSelf.serverSelector) || self.serverSelector == oldSelf.serverSelector",message="serverSelector is immutable once the claim is bound"
// +kubebuilder:validation:XValidation:rule="!has(self.bootMethod) || self.bootMethod != 'VirtualMedia' || (has(self.bootURI) && size(self.bootURI) > 0)",message="bootMethod VirtualMedia needs bootURI: the ISO the BMC mounts"
// +kubebuilder:validation:XValidation:rule="!has(self.rootVolume) || !has(self.rootDeviceHints)",message="rootVolume and rootDeviceHints exclude each other: the root volume is the root device"
type ServerClaimSpec struct {
	// Power is the desired power state of the claimed server.
	// +required
	Power Power `json:"power"`
	// ServerRef names the server to claim. Set by the controller when binding by selector;
	// immutable once set.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serverRef is immutable"
	ServerRef *corev1.LocalObjectReference `json:"serverRef,omitempty"`
	// ServerSelector picks a server by its labels. It can be corrected (an invalid selector, say)
	// until the claim is bound; from then on it is immutable.
	// +optional
	ServerSelector *metav1.LabelSelector `json:"serverSelector,omitempty"`
	// IgnitionSecretRef names the Secret with the ignition the server boots with.
	// +optional
	IgnitionSecretRef *corev1.LocalObjectReference `json:"ignitionSecretRef,omitempty"`
	// Image is the OS image to boot.
	// +required
	Image string `json:"image"`
	// Tolerations let the claim bind tainted servers.
	// +optional
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// UserDataRef names a Secret of type metal.ironcore.dev/user-data.
	// +optional
	UserDataRef *corev1.LocalObjectReference `json:"userDataRef,omitempty"`
	// NetworkBoot says which power-ons of the claimed server boot the claim's image from the
	// network: EveryPowerOn (the default, as metal-operator does) or FirstPowerOn (then its
	// disk). Copied to the claim's ServerBootConfiguration. A metalhub addition.
	// +optional
	NetworkBoot NetworkBoot `json:"networkBoot,omitempty"`
	// BootMethod is how the server boots the claim's image: PXE (default), HTTP or
	// VirtualMedia (see ServerBootConfiguration). Copied to the claim's ServerBootConfiguration.
	// A metalhub addition.
	// +optional
	BootMethod BootMethod `json:"bootMethod,omitempty"`
	// BootURI is the image the BMC boots for HTTP or VirtualMedia (required for VirtualMedia).
	// Copied to the claim's ServerBootConfiguration. A metalhub addition.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|nfs|cifs)://[^\s]+$`
	BootURI string `json:"bootURI,omitempty"`
	// CleaningPolicy narrows what is erased of the server's disks when this claim releases it
	// (a claim that keeps no data on its disks may ask for less than the server's policy); it
	// never widens it. Recorded when the claim binds. A metalhub addition.
	// +optional
	CleaningPolicy CleaningPolicy `json:"cleaningPolicy,omitempty"`
	// RootVolume asks for the RAID volume the claim's OS is installed on, made through the
	// server's BMC before its first power-on for the claim. Copied to the claim's
	// ServerBootConfiguration. A metalhub addition.
	// +optional
	RootVolume *RootVolume `json:"rootVolume,omitempty"`
	// RootDeviceHints pick the disk the claim's OS is installed on from the disks discovery
	// found (as metal3's root device hints do): every hint given must hold. Before the first
	// power-on for the claim the disk is resolved and reported in the boot configuration's
	// status.rootDevice; with no disk matching, nothing is powered and the Server's BootMethod
	// condition says RootDeviceNotFound. Copied to the claim's ServerBootConfiguration. A
	// metalhub addition.
	// +optional
	RootDeviceHints *RootDeviceHints `json:"rootDeviceHints,omitempty"`
}

// RootDeviceHints select one disk of a server. Names follow metal3's root device hints.
// +kubebuilder:validation:MinProperties=1
type RootDeviceHints struct {
	// DeviceName is the kernel's name of the disk as discovery saw it (sda, nvme0n1; a /dev/
	// prefix is ignored). Kernel names can change between boots; serialNumber or wwn do not.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	DeviceName string `json:"deviceName,omitempty"`
	// Model is contained in the disk's model (case-insensitive).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model,omitempty"`
	// Vendor is contained in the disk's vendor (case-insensitive).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Vendor string `json:"vendor,omitempty"`
	// SerialNumber is the disk's serial number (exact, case-insensitive).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	SerialNumber string `json:"serialNumber,omitempty"`
	// WWN is the disk's World Wide Name as the kernel reports it (wwid: naa.…, eui.…, t10.…;
	// the prefix may be left out; case-insensitive).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	WWN string `json:"wwn,omitempty"`
	// MinSizeGigabytes is the smallest size the disk may have, in GiB.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinSizeGigabytes int32 `json:"minSizeGigabytes,omitempty"`
	// Rotational: true for spinning disks, false for solid state ones.
	// +optional
	Rotational *bool `json:"rotational,omitempty"`
}

// RootVolume is a RAID volume made through the BMC's storage controller before the server
// boots its claim's image.
type RootVolume struct {
	// RAIDType of the volume; RAID1 mirrors two drives.
	// +kubebuilder:validation:Enum=RAID1
	// +kubebuilder:default=RAID1
	RAIDType string `json:"raidType,omitempty"`
	// Drives names the two drives, by their Redfish Id or serial number. Empty: the first two
	// drives of one model and size on one controller that are in no volume. A RAID1 volume
	// over the named (or such) drives that exists already is taken as it is.
	// +optional
	// +kubebuilder:validation:MaxItems=2
	Drives []string `json:"drives,omitempty"`
	// Name of the volume (default "root").
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name,omitempty"`
}

// Phase is whether a claim holds a server.
// +kubebuilder:validation:Enum=Bound;Unbound
type Phase string

const (
	PhaseBound   Phase = "Bound"
	PhaseUnbound Phase = "Unbound"
)

// ServerClaimStatus reports the binding.
type ServerClaimStatus struct {
	// Phase is Bound or Unbound.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// ServerPowerState is the bound server's power as last observed (its status.powerState), so
	// that the claim tells whether spec.power has been carried out.
	// +optional
	ServerPowerState PowerState `json:"serverPowerState,omitempty"`
	// Conditions say why a claim is unbound or not ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServerClaim claims one server for a user.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=scl
// +kubebuilder:printcolumn:name="Server",type=string,JSONPath=`.spec.serverRef.name`
// +kubebuilder:printcolumn:name="Ignition",type=string,JSONPath=`.spec.ignitionSecretRef.name`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.spec.power`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="ServerPower",type=string,JSONPath=`.status.serverPowerState`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServerClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerClaimSpec   `json:"spec,omitempty"`
	Status ServerClaimStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServerClaimList is a list of ServerClaims.
type ServerClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServerClaim `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ServerClaim{}, &ServerClaimList{})
}
