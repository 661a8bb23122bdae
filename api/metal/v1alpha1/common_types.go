package v1alpha1

// Power is a desired power state.
// +kubebuilder:validation:Enum=On;Off
type Power string

const (
	PowerOn  Power = "On"
	PowerOff Power = "Off"
)

// PowerState is a power state observed on the hardware.
type PowerState string

const (
	PowerStateOn          PowerState = "On"
	PowerStateOff         PowerState = "Off"
	PowerStatePaused      PowerState = "Paused"
	PowerStatePoweringOn  PowerState = "PoweringOn"
	PowerStatePoweringOff PowerState = "PoweringOff"
	PowerStateUnknown     PowerState = "Unknown"
)

// ObjectReference points at a namespaced object by name.
type ObjectReference struct {
	// Name of the referenced object.
	// +required
	Name string `json:"name"`
	// Namespace of the referenced object.
	// +required
	Namespace string `json:"namespace"`
}

// ImmutableObjectReference is an ObjectReference that cannot be re-pointed once set: it may
// only be removed as a whole. Used for claim bindings, where re-pointing would silently hand a
// server from one claim to another.
type ImmutableObjectReference struct {
	// Name of the referenced object.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="name is immutable; remove the reference instead"
	Name string `json:"name"`
	// Namespace of the referenced object.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="namespace is immutable; remove the reference instead"
	Namespace string `json:"namespace"`
}

// ProtocolScheme is the URL scheme used to reach a BMC.
// +kubebuilder:validation:Enum=http;https
type ProtocolScheme string

const (
	HTTPScheme  ProtocolScheme = "http"
	HTTPSScheme ProtocolScheme = "https"
)

// ProtocolName names a management protocol. Not an enum: the reference also accepts local test
// protocols such as RedfishLocal.
type ProtocolName string

const (
	ProtocolRedfish      ProtocolName = "Redfish"
	ProtocolRedfishLocal ProtocolName = "RedfishLocal"
	ProtocolIPMI         ProtocolName = "IPMI"
	ProtocolSSH          ProtocolName = "SSH"
)

// Protocol says how to talk to a BMC.
type Protocol struct {
	// Name of the protocol, e.g. Redfish.
	// +required
	Name ProtocolName `json:"name"`
	// Port the BMC listens on.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Scheme is http or https.
	// +optional
	Scheme ProtocolScheme `json:"scheme,omitempty"`
}

// TaintEffect says what a taint keeps away.
// +kubebuilder:validation:Enum=NoBind;Evict
type TaintEffect string

const (
	// TaintEffectNoBind keeps claims that do not tolerate the taint from binding the server.
	TaintEffectNoBind TaintEffect = "NoBind"
	// TaintEffectEvict also evicts claims already bound that do not tolerate it.
	TaintEffectEvict TaintEffect = "Evict"
)

// Taint marks a server so that only tolerating claims bind it.
type Taint struct {
	// Key of the taint.
	// +required
	Key string `json:"key"`
	// Value of the taint.
	// +optional
	Value string `json:"value,omitempty"`
	// Effect of the taint.
	// +optional
	// +kubebuilder:default=NoBind
	Effect TaintEffect `json:"effect,omitempty"`
}

// TolerationOperator compares a toleration with a taint.
// +kubebuilder:validation:Enum=Equal;Exists
type TolerationOperator string

const (
	TolerationOpEqual  TolerationOperator = "Equal"
	TolerationOpExists TolerationOperator = "Exists"
)

// Toleration lets a claim bind a server that carries a matching taint.
type Toleration struct {
	// Key of the taint tolerated.
	// +required
	Key string `json:"key"`
	// Operator is Equal (default) or Exists.
	// +optional
	Operator TolerationOperator `json:"operator,omitempty"`
	// Value compared with Equal.
	// +optional
	Value string `json:"value,omitempty"`
	// Effect tolerated; empty tolerates every effect.
	// +optional
	Effect TaintEffect `json:"effect,omitempty"`
}

// Well-known metadata keys shared with the reference operator and its tools.
const (
	// OperationAnnotation asks for a one-off operation on a Server or BMC.
	OperationAnnotation = "metal.ironcore.dev/operation"
	// ParkedAnnotation is the durable marker of a parked server.
	ParkedAnnotation = "metal.ironcore.dev/parked"

	// Values of OperationAnnotation.
	OperationIgnore                = "ignore"
	OperationPark                  = "park"
	OperationUnpark                = "unpark"
	OperationRotateCredentials     = "rotate-credentials"
	OperationRetry                 = "retry"
	OperationGracefulRestartServer = "graceful-restart-server"
	OperationHardRestartServer     = "hard-restart-server"
	OperationPowerCycleServer      = "power-cycle-server"
	OperationForceOffServer        = "force-off-server"
	OperationForceOnServer         = "force-on-server"
	OperationGracefulRestartBMC    = "graceful-restart-bmc"
	// OperationRediscover runs discovery again on an Available server (metalhub addition):
	// it goes back to Initial, boots the discovery image and compares what it finds with its
	// inventory baseline.
	OperationRediscover = "rediscover"
	// OperationAcceptInventory makes the inventory of the last discovery the server's baseline
	// and ends its InventoryDrift (metalhub addition): the hardware was removed on purpose.
	OperationAcceptInventory = "accept-inventory"
	// OperationClearHardwareFault ends a server's HardwareFault after the repair (metalhub
	// addition): the fault, and the taint the fault policy set, go.
	OperationClearHardwareFault = "clear-hardware-fault"

	// ServerMaintenance labels and annotation.
	MaintenanceNeededLabel      = "metal.ironcore.dev/maintenance-needed"
	MaintenanceApprovedLabel    = "metal.ironcore.dev/maintenance-approved"
	MaintenanceRequestedLabel   = "metal.ironcore.dev/maintenance-requested"
	MaintenanceReasonAnnotation = "metal.ironcore.dev/maintenance-reason"

	// SecretTypeUserData is the Secret type of ServerClaim.spec.userDataRef.
	SecretTypeUserData = "metal.ironcore.dev/user-data"

	// Labels the discovery registry derives from a server's hardware, so that a ServerClaim's
	// serverSelector can ask for it (docs/servers.md). Values are label-safe: lower case, other
	// characters as '-'. A metalhub addition.
	//
	// GPUCountLabel is the number of GPUs ("0" when none).
	GPUCountLabel = "inventory.metalhub.io/gpu-count"
	// GPUModelLabel is their model from pci.ids (e.g. "ga100-a100-sxm4-80gb"), "mixed" when they
	// differ; absent without GPUs or without names.
	GPUModelLabel = "inventory.metalhub.io/gpu-model"
	// GPUIDLabel is their PCI vendor and device ID ("10de-20b2"), which needs no pci.ids;
	// "mixed" when they differ.
	GPUIDLabel = "inventory.metalhub.io/gpu-id"
	// GPUVendorLabel is their vendor from pci.ids (e.g. "nvidia-corporation").
	GPUVendorLabel = "inventory.metalhub.io/gpu-vendor"

	// InventoryDriftAnnotation is the registry's durable record that the server's last
	// discovery found less hardware than its baseline: what is missing, for people. The
	// InventoryDrift condition is rebuilt from it. A metalhub addition.
	InventoryDriftAnnotation = "inventory.metalhub.io/drift"

	// HardwareFaultAnnotation is the server controller's durable record of the critical events
	// the server's BMC logged (JSON, the most recent few); the HardwareFault condition is rebuilt
	// from it. A metalhub addition.
	HardwareFaultAnnotation = "health.metalhub.io/fault"
	// HardwareFaultTaintKey is the taint (effect NoBind) the fault policy puts on a faulty
	// server so that new claims avoid it.
	HardwareFaultTaintKey = "health.metalhub.io/hardware-fault"

	// MetadataFlavorHeader and its value mark requests to the metaldata service.
	MetadataFlavorHeader = "Metadata-Flavor"
	MetadataFlavorValue  = "IronCore Metal"
	// MetadataKeyPrefix prefixes labels and annotations exposed through metaldata.
	MetadataKeyPrefix = "metadata.metal.ironcore.dev/"
)
