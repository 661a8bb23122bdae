package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerState is a Server's lifecycle state. The controller keeps it as its own bookkeeping in
// metadata; status.state only mirrors it for kubectl and tools.
// +kubebuilder:validation:Enum=Initial;Discovery;Available;Reserved;Released;Error;Maintenance;Parked;Cleaning
type ServerState string

const (
	ServerStateInitial     ServerState = "Initial"
	ServerStateDiscovery   ServerState = "Discovery"
	ServerStateAvailable   ServerState = "Available"
	ServerStateReserved    ServerState = "Reserved"
	ServerStateReleased    ServerState = "Released"
	ServerStateError       ServerState = "Error"
	ServerStateMaintenance ServerState = "Maintenance"
	ServerStateParked      ServerState = "Parked"
	// ServerStateCleaning: a released server's disks are being sanitized before it is
	// Available again (CleaningPolicy). A metalhub addition.
	ServerStateCleaning ServerState = "Cleaning"
)

// CleaningPolicy says what is erased of a server's disks when its claim is released, before it
// can be claimed again. Each policy erases everything the one before it does.
// +kubebuilder:validation:Enum=None;Metadata;RootDisk;AllDisks
type CleaningPolicy string

const (
	// CleaningPolicyNone erases nothing: a released server is Available at once.
	CleaningPolicyNone CleaningPolicy = "None"
	// CleaningPolicyMetadata zeroes the partition tables and the filesystem, RAID and volume
	// signatures of every disk (both ends of it): the data is still on the disk.
	CleaningPolicyMetadata CleaningPolicy = "Metadata"
	// CleaningPolicyRootDisk sanitizes the root disk (the smallest non-removable disk of at
	// least 4 GiB) and wipes the metadata of every other disk.
	CleaningPolicyRootDisk CleaningPolicy = "RootDisk"
	// CleaningPolicyAllDisks sanitizes every non-removable disk.
	CleaningPolicyAllDisks CleaningPolicy = "AllDisks"
)

// ReclaimPolicy says what happens to a server when its claim goes.
// +kubebuilder:validation:Enum=Recycle;Retain
type ReclaimPolicy string

const (
	// ReclaimPolicyRecycle makes the server Available again.
	ReclaimPolicyRecycle ReclaimPolicy = "Recycle"
	// ReclaimPolicyRetain keeps it Released until its claim ref is removed by hand.
	ReclaimPolicyRetain ReclaimPolicy = "Retain"
)

// IndicatorLED is the state of a server's locator LED.
// +kubebuilder:validation:Enum=Unknown;Lit;Blinking;Off
type IndicatorLED string

const (
	// IndicatorLEDUnknown asks for nothing (the LED is left as it is) and reports an LED the
	// BMC does not describe.
	IndicatorLEDUnknown IndicatorLED = "Unknown"
	// IndicatorLEDLit is a lit locator LED.
	IndicatorLEDLit IndicatorLED = "Lit"
	// IndicatorLEDBlinking is a blinking locator LED.
	IndicatorLEDBlinking IndicatorLED = "Blinking"
	// IndicatorLEDOff is a dark locator LED.
	IndicatorLEDOff IndicatorLED = "Off"
)

// BMCAccess gives a server's BMC inline, for servers registered without a BMC object.
type BMCAccess struct {
	// Protocol to manage the BMC with.
	// +required
	Protocol Protocol `json:"protocol"`
	// Address (IP or host name) of the BMC.
	// +required
	Address string `json:"address"`
	// BMCSecretRef names the BMCSecret with the credentials.
	// +required
	BMCSecretRef corev1.LocalObjectReference `json:"bmcSecretRef"`
}

// BootOrder is one entry of a server's boot order.
type BootOrder struct {
	// Name of the boot device: matched against the boot options' DisplayName when device names
	// no BootOptionReference.
	// +required
	Name string `json:"name"`
	// Priority of the entry; lower boots first.
	// +required
	Priority int `json:"priority"`
	// Device is the boot option: its Redfish BootOptionReference (e.g. Boot0001).
	// +required
	Device string `json:"device"`
}

// ServerSpec is what the controller and users want of a server.
type ServerSpec struct {
	// SystemUUID is the UUID of the Redfish system.
	// +required
	SystemUUID string `json:"systemUUID"`
	// SystemURI is the Redfish path of the system on its BMC.
	// +optional
	SystemURI string `json:"systemURI,omitempty"`
	// Power is ignored. Deprecated: metal-operator stopped acting on it and then removed it; a
	// claim's spec.power, a maintenance's serverPower and the lifecycle decide a server's power.
	// Kept so that existing manifests still apply (kubectl validates fields strictly).
	// +optional
	Power Power `json:"power,omitempty"`
	// IndicatorLED is the desired locator LED state: Lit, Blinking or Off, set through the BMC
	// (LocationIndicatorActive where the system has it) in every state but Parked; empty or
	// Unknown leaves it as it is.
	// +optional
	IndicatorLED IndicatorLED `json:"indicatorLED,omitempty"`
	// ServerClaimRef names the claim that holds this server. Set by the claim controller; it can
	// be removed but not re-pointed.
	// +optional
	ServerClaimRef *ImmutableObjectReference `json:"serverClaimRef,omitempty"`
	// ServerMaintenanceRef names the maintenance that holds this server.
	// +optional
	ServerMaintenanceRef *ObjectReference `json:"serverMaintenanceRef,omitempty"`
	// BMCRef names the BMC the server belongs to.
	// +optional
	BMCRef *corev1.LocalObjectReference `json:"bmcRef,omitempty"`
	// BMC gives the BMC inline, when there is no BMC object.
	// +optional
	BMC *BMCAccess `json:"bmc,omitempty"`
	// BootConfigurationRef names the ServerBootConfiguration the server boots with.
	// +optional
	BootConfigurationRef *ObjectReference `json:"bootConfigurationRef,omitempty"`
	// MaintenanceBootConfigurationRef names the boot configuration used during maintenance.
	// +optional
	MaintenanceBootConfigurationRef *ObjectReference `json:"maintenanceBootConfigurationRef,omitempty"`
	// BootOrder is the desired boot order.
	// +optional
	BootOrder []BootOrder `json:"bootOrder,omitempty"`
	// Taints keep claims that do not tolerate them away.
	// +optional
	Taints []Taint `json:"taints,omitempty"`
	// Unclaimable servers are never bound by a claim.
	// +optional
	// +kubebuilder:default=false
	Unclaimable bool `json:"unclaimable,omitempty"`
	// ReclaimPolicy says what happens when the claim goes.
	// +optional
	// +kubebuilder:default=Recycle
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`
	// CleaningPolicy is what is erased of this server's disks when a claim releases it, in
	// place of the fleet's (--cleaning-policy). A claim may narrow it, never widen it. A
	// metalhub addition.
	// +optional
	CleaningPolicy CleaningPolicy `json:"cleaningPolicy,omitempty"`
}

// Processor is one CPU of a server.
type Processor struct {
	// ID of the processor on the BMC.
	// +required
	ID string `json:"id"`
	// +optional
	Type string `json:"type,omitempty"`
	// +optional
	Architecture string `json:"architecture,omitempty"`
	// +optional
	InstructionSet string `json:"instructionSet,omitempty"`
	// +optional
	Manufacturer string `json:"manufacturer,omitempty"`
	// +optional
	Model string `json:"model,omitempty"`
	// +optional
	MaxSpeedMHz int32 `json:"maxSpeedMHz,omitempty"`
	// +optional
	TotalCores int32 `json:"totalCores,omitempty"`
	// +optional
	TotalThreads int32 `json:"totalThreads,omitempty"`
}

// LLDPNeighbor is a switch port seen on a network interface.
type LLDPNeighbor struct {
	// +optional
	MACAddress string `json:"macAddress,omitempty"`
	// +optional
	PortID string `json:"portID,omitempty"`
	// +optional
	PortDescription string `json:"portDescription,omitempty"`
	// +optional
	SystemName string `json:"systemName,omitempty"`
	// +optional
	SystemDescription string `json:"systemDescription,omitempty"`
}

// NetworkInterface is a NIC of a server.
type NetworkInterface struct {
	// Name of the interface.
	// +required
	Name string `json:"name"`
	// MACAddress of the interface.
	// +required
	MACAddress string `json:"macAddress"`
	// IP is the first address of the interface.
	// +optional
	IP string `json:"ip,omitempty"`
	// IPs are all addresses of the interface.
	// +optional
	// +kubebuilder:validation:items:Format=ip
	IPs []string `json:"ips,omitempty"`
	// CarrierStatus is the link state.
	// +optional
	CarrierStatus string `json:"carrierStatus,omitempty"`
	// Neighbors seen over LLDP.
	// +optional
	Neighbors []LLDPNeighbor `json:"neighbors,omitempty"`
	// Model of the NIC, from the discovery OS's pci.ids. A metalhub addition.
	// +optional
	Model string `json:"model,omitempty"`
	// Vendor of the NIC, from the discovery OS's pci.ids. A metalhub addition.
	// +optional
	Vendor string `json:"vendor,omitempty"`
	// Driver is the kernel driver the discovery OS bound to it. A metalhub addition.
	// +optional
	Driver string `json:"driver,omitempty"`
	// PCIAddress of the NIC (domain:bus:device.function). A metalhub addition.
	// +optional
	PCIAddress string `json:"pciAddress,omitempty"`
	// SpeedMbps is the negotiated link speed at discovery; 0 when the link was down. A metalhub
	// addition.
	// +optional
	SpeedMbps int32 `json:"speedMbps,omitempty"`
}

// GPU is an accelerator on the PCI bus: a 3D controller, a processing accelerator, or a display
// controller of a GPU vendor (the BMC's own VGA is not one). A metalhub addition.
type GPU struct {
	// PCIAddress of the device (domain:bus:device.function).
	// +required
	PCIAddress string `json:"pciAddress"`
	// VendorID and DeviceID are the PCI IDs, lower-case hex.
	// +optional
	VendorID string `json:"vendorID,omitempty"`
	// +optional
	DeviceID string `json:"deviceID,omitempty"`
	// Vendor and Model are pci.ids' names for the IDs, when the discovery OS ships it.
	// +optional
	Vendor string `json:"vendor,omitempty"`
	// +optional
	Model string `json:"model,omitempty"`
	// Driver is the kernel driver the discovery OS bound to it.
	// +optional
	Driver string `json:"driver,omitempty"`
}

// PCIDeviceSummary is one kind of PCI function and how many the server has.
type PCIDeviceSummary struct {
	// Class is the PCI class code (class, subclass, programming interface), lower-case hex.
	// +optional
	Class string `json:"class,omitempty"`
	// VendorID and DeviceID are the PCI IDs, lower-case hex.
	// +required
	VendorID string `json:"vendorID"`
	// +optional
	DeviceID string `json:"deviceID,omitempty"`
	// Vendor and Model are pci.ids' names for the IDs, when the discovery OS ships it.
	// +optional
	Vendor string `json:"vendor,omitempty"`
	// +optional
	Model string `json:"model,omitempty"`
	// Count is how many functions of this kind the server has.
	// +required
	Count int32 `json:"count"`
}

// StorageDrive is a physical drive.
type StorageDrive struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	MediaType string `json:"mediaType,omitempty"`
	// +optional
	Type string `json:"type,omitempty"`
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// +optional
	Vendor string `json:"vendor,omitempty"`
	// +optional
	Model string `json:"model,omitempty"`
	// SerialNumber of the drive. A metalhub addition.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// WWN of the drive as the OS reads it (its wwid). A metalhub addition.
	// +optional
	WWN string `json:"wwn,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
}

// StorageVolume is a logical volume.
type StorageVolume struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	RAIDType string `json:"raidType,omitempty"`
	// +optional
	VolumeUsage string `json:"volumeUsage,omitempty"`
}

// Storage is a storage subsystem with its drives and volumes.
type Storage struct {
	// +optional
	Name string `json:"name,omitempty"`
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	Volumes []StorageVolume `json:"volumes,omitempty"`
	// +optional
	Drives []StorageDrive `json:"drives,omitempty"`
}

// ServerStatus is observation and report: rebuildable at any time, never read back to decide the
// lifecycle.
type ServerStatus struct {
	// State mirrors the lifecycle state the controller keeps in metadata.
	// +optional
	State ServerState `json:"state,omitempty"`
	// PowerState as reported by the BMC.
	// +optional
	PowerState PowerState `json:"powerState,omitempty"`
	// IndicatorLED as reported by the BMC.
	// +optional
	IndicatorLED IndicatorLED `json:"indicatorLED,omitempty"`
	// BootOrder is the system's boot order as the BMC reports it (BootOptionReferences, first
	// boots first). A metalhub addition.
	// +optional
	BootOrder []string `json:"bootOrder,omitempty"`
	// +optional
	Manufacturer string `json:"manufacturer,omitempty"`
	// +optional
	Model string `json:"model,omitempty"`
	// +optional
	SKU string `json:"sku,omitempty"`
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// +optional
	BIOSVersion string `json:"biosVersion,omitempty"`
	// TotalSystemMemory of the server.
	// +optional
	TotalSystemMemory *resource.Quantity `json:"totalSystemMemory,omitempty"`
	// +optional
	Processors []Processor `json:"processors,omitempty"`
	// +optional
	NetworkInterfaces []NetworkInterface `json:"networkInterfaces,omitempty"`
	// +optional
	Storages []Storage `json:"storages,omitempty"`
	// GPUs found by the discovery probe. A metalhub addition.
	// +optional
	GPUs []GPU `json:"gpus,omitempty"`
	// PCIDevices summarises the PCI functions the discovery probe found: one entry per kind
	// (class, vendor and device ID) with how many. A metalhub addition.
	// +optional
	PCIDevices []PCIDeviceSummary `json:"pciDevices,omitempty"`
	// Conditions report what the controller saw and why it is waiting.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Server is a bare-metal machine managed through its BMC.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=srv
// +kubebuilder:printcolumn:name="SystemUUID",type=string,JSONPath=`.spec.systemUUID`
// +kubebuilder:printcolumn:name="Manufacturer",type=string,JSONPath=`.status.manufacturer`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.status.model`,priority=1
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.status.totalSystemMemory`,priority=1
// +kubebuilder:printcolumn:name="SKU",type=string,JSONPath=`.status.sku`,priority=1
// +kubebuilder:printcolumn:name="SerialNumber",type=string,JSONPath=`.status.serialNumber`,priority=1
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Claim",type=string,JSONPath=`.spec.serverClaimRef.name`
// +kubebuilder:printcolumn:name="IndicatorLED",type=string,JSONPath=`.status.indicatorLED`,priority=1
// +kubebuilder:printcolumn:name="Unclaimable",type=boolean,JSONPath=`.spec.unclaimable`,priority=1
// +kubebuilder:printcolumn:name="Cleaned",type=string,JSONPath=`.status.conditions[?(@.type=="Cleaned")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Server struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServerSpec   `json:"spec,omitempty"`
	Status ServerStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ServerList is a list of Servers.
type ServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Server `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Server{}, &ServerList{})
}
