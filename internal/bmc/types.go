// Package bmc is the Redfish client controllers use to drive bare-metal
// servers. It is built on gofish and hardened for what real BMCs do: one
// reused session per BMC, a per-BMC cap on concurrent requests, a timeout on
// every request, best-effort inventory and typed errors with stable reasons.
//
// This package is the one type the rest of the code uses (BMC, Pool, Error, Options and the
// data types) and owns the connection (session, cap, breaker, fence). Each Redfish service's
// work lives in a subpackage (logs, update, accounts, events, media, console, telemetry) that works over
// wire.Conn, a view of the connection the facade hands it; package wire holds the typed error
// they share. The subpackages never import this one.
package bmc

import (
	"context"
	"os"
)

// BMC is what controllers use to talk to one BMC. Every method is safe for
// concurrent use; implementations reuse one session across calls.
//
// systemID is the Redfish "Id" of a ComputerSystem (as returned by Systems) or
// its @odata.id path. IDs are not guessable ("1", "System.Embedded.1", a serial
// or UUID): list them with Systems first.
type BMC interface {
	// Systems lists the computer systems this BMC manages.
	Systems(ctx context.Context) ([]SystemSummary, error)
	// System reads the current power state and boot override of one system.
	System(ctx context.Context, systemID string) (*SystemStatus, error)
	// Power asks the BMC to change the power state and returns as soon as the
	// BMC accepted the request. The state changes asynchronously: observe it
	// with System (controllers requeue). A request that matches the observed
	// state (On while On or PoweringOn, Off while Off or PoweringOff) is not sent.
	Power(ctx context.Context, systemID string, action PowerAction, opts ...PowerOption) error
	// PreparePower does what Power does before its request (reads the system, chooses the reset
	// type) and returns the request for Send, nil when none is needed (the system is there). A
	// caller that records its intent before acting does so in between, so that only the request
	// itself lies between the record and the BMC. The request is sent under ctx.
	PreparePower(ctx context.Context, systemID string, action PowerAction, opts ...PowerOption) (*PowerRequest, error)
	// SetBootOnce sets a one-time boot override to target for the next boot. UefiHttp is
	// refused (ReasonUnsupported, nothing sent) where the system does not advertise it; its URI
	// is WithHTTPBootURI.
	SetBootOnce(ctx context.Context, systemID string, target BootTarget, opts ...BootOption) error
	// Bios reads the system's BIOS attributes: in effect and staged for its next reset.
	Bios(ctx context.Context, systemID string) (*BiosState, error)
	// SetBiosAttributes stages attributes in the Bios settings object (ApplyTime OnReset where
	// the system advertises apply times): they take effect at the system's next reset. Only
	// attributes that differ from what is in effect are sent; none, nothing is sent.
	SetBiosAttributes(ctx context.Context, systemID string, attrs map[string]any) error
	// BootEntries lists the system's boot options (BootOptions collection).
	BootEntries(ctx context.Context, systemID string) ([]BootEntry, error)
	// SetBootOrder sets Boot.BootOrder: order (BootOptionReferences) first, then the system's
	// other entries in their present order, since BMCs want every entry named. A reference the
	// system does not have is refused (ReasonInvalidConfig) before anything is sent.
	SetBootOrder(ctx context.Context, systemID string, order []string) error
	// VirtualMedia lists the system's virtual media devices: its own VirtualMedia collection,
	// else its manager's where that manager manages this system alone (a manager's devices
	// shared by several systems belong to none of them). Empty when it has none.
	VirtualMedia(ctx context.Context, systemID string) ([]MediaSlot, error)
	// InsertMedia mounts image in the system's virtual CD/DVD device. Idempotent: a device that
	// already holds image is left alone; one that holds another image is not touched
	// (ReasonRejected). The BMC may refuse an image it cannot reach.
	InsertMedia(ctx context.Context, systemID, image string) error
	// EjectMedia ejects image from the device that holds it (every inserted CD/DVD device when
	// image is ""). Idempotent: nothing inserted, nothing sent.
	EjectMedia(ctx context.Context, systemID, image string) error
	// StorageLayout reads the system's storage controllers with their drives, volumes and the
	// RAID levels they make (empty for a system with SimpleStorage only).
	StorageLayout(ctx context.Context, systemID string) (StorageLayout, error)
	// CreateVolume asks a controller of the system for a volume, made at once.
	CreateVolume(ctx context.Context, systemID string, v VolumeRequest) error
	// SecureEraseDrive starts a drive's SecureErase (target: StorageDrive.SecureEraseTarget)
	// and returns the task that carries it out ("" when the BMC named none).
	SecureEraseDrive(ctx context.Context, systemID, target string) (string, error)
	// InitializeVolume starts a volume's Initialize of initType (Slow, Fast) at target
	// (StorageVolume.InitializeTarget) and returns its task, as SecureEraseDrive does.
	InitializeVolume(ctx context.Context, systemID, target, initType string) (string, error)
	// SetIndicatorLED sets the system's locator LED: Lit, Blinking or Off. Through
	// LocationIndicatorActive where the system has it (IndicatorLED is deprecated there, and
	// some newer BMCs refuse it), unless Blinking, which only IndicatorLED can say.
	SetIndicatorLED(ctx context.Context, systemID string, led string) error
	// Inventory reads the hardware inventory of one system, best effort per
	// section: failed sections are listed in Inventory.FailedSections.
	Inventory(ctx context.Context, systemID string) (*Inventory, error)
	// Telemetry reads the system's chassis telemetry: power draw, power supplies, temperatures,
	// fans and the memory and processor health rollups, from the legacy Power and Thermal or the
	// newer subsystems and Sensors, each part absent where the BMC serves none. A read polled
	// for every server, it is one system read and two to a dozen more.
	Telemetry(ctx context.Context, systemID string) (*Telemetry, error)
	// Manager describes the BMC itself (the manager of the first system, or
	// the first manager of the service).
	Manager(ctx context.Context) (*ManagerInfo, error)
	// Accounts lists the BMC's user accounts (AccountService); slots without a user name, as
	// some BMCs keep, are left out.
	Accounts(ctx context.Context) ([]Account, error)
	// SetAccount makes the account user exist, enabled, with password and (when not "") role:
	// created where missing (POST, or the first free slot on BMCs with fixed slots), its
	// password and role set where it exists. Passwords cannot be read back: the call always
	// sends the password.
	SetAccount(ctx context.Context, user, password, role string) error
	// DeleteAccount removes the account user; one that does not exist is not an error.
	DeleteAccount(ctx context.Context, user string) error
	// Certificates lists the BMC's HTTPS certificates (its manager's NetworkProtocol, else the
	// CertificateService's CertificateLocations), each with the fields of the certificate itself
	// where the BMC shows it. ErrNoCertificateService (ReasonUnsupported) where it shows none.
	Certificates(ctx context.Context) ([]Certificate, error)
	// GenerateCSR asks the BMC for a certificate signing request (CertificateService.GenerateCSR)
	// for req.Collection ("": its HTTPS certificates) and returns the request, PEM, and the
	// collection the signed certificate goes to. The BMC makes and keeps the key, one at a time:
	// a second call replaces the key of the first, whose certificate the BMC then refuses.
	// ErrNoCertificateService (ReasonUnsupported) without a CertificateService.
	GenerateCSR(ctx context.Context, req CSRRequest) (csrPEM, collection string, err error)
	// ReplaceCertificate installs certPEM (a certificate signed for the newest GenerateCSR,
	// possibly followed by its chain) in place of the certificate at certURI ("": the first HTTPS
	// certificate). A certificate that is not PEM is refused before anything is sent
	// (ReasonInvalidConfig); one the BMC refuses is ErrCertificateRefused (ReasonRejected, with
	// the BMC's message). Success is the BMC's word only: some serve the certificate from their
	// next reset (ResetManager), so a caller checks what the BMC serves.
	ReplaceCertificate(ctx context.Context, certURI, certPEM string) error
	// FirmwareInventory lists the firmware components and their versions (UpdateService).
	FirmwareInventory(ctx context.Context) ([]Firmware, error)
	// SimpleUpdate asks the BMC to install an image (UpdateService.SimpleUpdate) and returns
	// the task to follow (Task), "" when the BMC did the work before answering. With
	// req.SystemID, the system is proven first and the image targets it.
	SimpleUpdate(ctx context.Context, req UpdateRequest) (string, error)
	// UpdateMethods says how the BMC takes images: it fetches them (SimpleUpdate), and/or they
	// are pushed to it (MultipartHttpPushUri).
	UpdateMethods(ctx context.Context) (simple, push bool, err error)
	// PushUpdate sends an image to the BMC (multipart, UpdateParameters + UpdateFile) and returns
	// the task to follow. The request is bounded by ctx and WithRequestTimeout, not the usual
	// request timeout: an image takes longer than a read. With req.SystemID the system is
	// proven first and the image targets it.
	PushUpdate(ctx context.Context, req UpdateRequest, image *os.File) (string, error)
	// Task reads a task the BMC is running: its state and progress, one request, never waiting.
	Task(ctx context.Context, uri string) (*TaskStatus, error)
	// Tasks lists the BMC's tasks (TaskService), newest last, at most the last 32: what became
	// of an update whose answer was lost is found among them by its image. ReasonUnsupported
	// when the BMC has no TaskService.
	Tasks(ctx context.Context) ([]TaskStatus, error)
	// ManagerAttributes reads the BMC's own settings (the Attributes resource of its manager, as
	// Dell's iDRAC serves them); ReasonUnsupported where it has none.
	ManagerAttributes(ctx context.Context) (map[string]any, error)
	// SetManagerAttributes sets some of them (applied at once); an attribute the BMC does not
	// have is refused (ReasonInvalidConfig) before anything is sent.
	SetManagerAttributes(ctx context.Context, attrs map[string]any) error
	// ResetManager restarts the BMC itself (GracefulRestart where advertised, else
	// ForceRestart); its systems keep running. Sessions end with it: the pool logs in again.
	ResetManager(ctx context.Context) error
	// SerialConsole says how to reach the system's serial console: the system's own
	// SerialConsole (ComputerSystem v1.13+), else its manager's, over SSH where the manager lists
	// it, at its NetworkProtocol's SSH port (22 when unsaid). Nothing advertised is not an error:
	// SSHEnabled is false.
	SerialConsole(ctx context.Context, systemID string) (SerialConsole, error)
	// LogEntries reads the system's hardware event log (SEL, HPE's IML): the entries newer than
	// the one with Id after ("" for all), at most the newest 64, oldest first, so the last one's
	// ID is the after of the next call. A log cleared since (after gone, every Id lower) is read
	// as new. The log is the system's own log service, else its manager's where that manager
	// manages this system alone (older iDRAC); ReasonUnsupported where there is none. Its place
	// is remembered: a steady-state call is one GET.
	LogEntries(ctx context.Context, systemID, after string) ([]LogEntry, error)
	// LogCursor is the Id of the newest entry of the system's hardware event log ("" when it
	// is empty), for a first read that takes what is logged as history: the collection alone
	// where it can tell, never the bodies of all its entries.
	LogCursor(ctx context.Context, systemID string) (string, error)
	// EventService describes the BMC's EventService; ReasonUnsupported without one.
	EventService(ctx context.Context) (EventServiceInfo, error)
	// Subscribe asks the BMC to POST Redfish events (Alerts) to destination, tagged with
	// context, and returns the subscription's URI. Look for an existing one (Subscriptions)
	// first: BMCs keep subscriptions across restarts of the subscriber, and cap their number.
	Subscribe(ctx context.Context, destination, context string) (string, error)
	// Unsubscribe deletes the subscription at uri; one already gone is not an error.
	Unsubscribe(ctx context.Context, uri string) error
	// Subscriptions lists the BMC's event subscriptions, everyone's.
	Subscriptions(ctx context.Context) ([]Subscription, error)
}

// PowerState mirrors Redfish PowerState.
type PowerState string

const (
	PowerStateOn          PowerState = "On"
	PowerStateOff         PowerState = "Off"
	PowerStatePoweringOn  PowerState = "PoweringOn"
	PowerStatePoweringOff PowerState = "PoweringOff"
	PowerStatePaused      PowerState = "Paused"
	PowerStateUnknown     PowerState = ""
)

// PowerAction is what the caller wants; the client maps it to a ResetType the
// system advertises.
type PowerAction string

const (
	// PowerOn powers the system on (On, else ForceOn, else PushPowerButton when off).
	PowerOn PowerAction = "On"
	// PowerOff cuts power immediately (ForceOff).
	PowerOff PowerAction = "Off"
	// PowerGracefulOff asks the OS to shut down (GracefulShutdown). Some
	// machines ignore it: escalating to PowerOff after a timeout is the caller's
	// decision.
	PowerGracefulOff PowerAction = "GracefulOff"
	// PowerRestart restarts gracefully (GracefulRestart).
	PowerRestart PowerAction = "Restart"
	// PowerForceRestart restarts immediately (ForceRestart, else PowerCycle).
	PowerForceRestart PowerAction = "ForceRestart"
)

// PowerActions lists all actions, for CLIs and validation.
var PowerActions = []PowerAction{PowerOn, PowerOff, PowerGracefulOff, PowerRestart, PowerForceRestart}

// PowerOption tunes Power.
type PowerOption func(*powerOptions)

type powerOptions struct{ forceFallback bool }

// WithForceFallback lets a graceful action (GracefulOff, Restart) use the
// forced reset type when the system does not advertise the graceful one.
// Without it such a request fails with ReasonUnsupported.
func WithForceFallback() PowerOption { return func(o *powerOptions) { o.forceFallback = true } }

// BootTarget mirrors Redfish BootSourceOverrideTarget.
type BootTarget string

const (
	BootPxe       BootTarget = "Pxe"
	BootHdd       BootTarget = "Hdd"
	BootCd        BootTarget = "Cd"
	BootBiosSetup BootTarget = "BiosSetup"
	// BootUefiHttp is a UEFI HTTP boot, from the URI WithHTTPBootURI gives (else the one DHCP
	// offers).
	BootUefiHttp BootTarget = "UefiHttp"
)

// BootOption tunes SetBootOnce.
type BootOption func(*bootOptions)

type bootOptions struct{ httpURI string }

// WithHTTPBootURI sets Boot.HttpBootUri with a UefiHttp override.
func WithHTTPBootURI(uri string) BootOption { return func(o *bootOptions) { o.httpURI = uri } }

// SystemSummary is one member of the Systems collection.
type SystemSummary struct {
	ID           string     `json:"id"`
	ODataID      string     `json:"odataId"`
	Name         string     `json:"name,omitempty"`
	UUID         string     `json:"uuid,omitempty"`
	Manufacturer string     `json:"manufacturer,omitempty"`
	Model        string     `json:"model,omitempty"`
	SerialNumber string     `json:"serialNumber,omitempty"`
	PowerState   PowerState `json:"powerState,omitempty"`
}

// SystemStatus is the observed, mutable state of a system.
type SystemStatus struct {
	ID           string     `json:"id"`
	UUID         string     `json:"uuid,omitempty"`
	SerialNumber string     `json:"serialNumber,omitempty"`
	PowerState   PowerState `json:"powerState"`
	Health       string     `json:"health,omitempty"`
	// Boot is the boot override as read back. Some BMCs report Continuous
	// after Once was set, so do not compare it strictly.
	Boot BootOverride `json:"boot"`
	// ResetTypes are the reset types the system advertises (empty when it
	// does not say).
	ResetTypes []string `json:"resetTypes,omitempty"`
	// LastResetTime is the system's LastResetTime, as the BMC wrote it ("" when it does not
	// say): it moves when the system comes out of a reset (a restart, a power-on).
	LastResetTime string `json:"lastResetTime,omitempty"`
	// BiosVersion is the system's BiosVersion, the BIOS in effect.
	BiosVersion string `json:"biosVersion,omitempty"`
	// IndicatorLED is the locator LED: Lit, Blinking or Off (from LocationIndicatorActive when
	// the system reports only that), "" when the system says nothing of it.
	IndicatorLED string `json:"indicatorLED,omitempty"`
	// BootTargets are the advertised override targets (empty when the system does not say).
	BootTargets []string `json:"bootTargets,omitempty"`
	// BootOrder is Boot.BootOrder: BootOptionReferences, first boots first.
	BootOrder []string `json:"bootOrder,omitempty"`
	// HTTPBoot says the system can boot UefiHttp: advertised as a target, or (where targets are
	// not listed) the Boot object has HttpBootUri.
	HTTPBoot bool `json:"httpBoot,omitempty"`
}

// BootOverride is the Boot.BootSourceOverride* triple.
type BootOverride struct {
	Enabled string `json:"enabled,omitempty"`
	Target  string `json:"target,omitempty"`
	Mode    string `json:"mode,omitempty"`
	// HTTPBootURI is Boot.HttpBootUri.
	HTTPBootURI string `json:"httpBootURI,omitempty"`
}

// Inventory is the hardware description of one system.
type Inventory struct {
	System     SystemInfo   `json:"system"`
	Processors []Processor  `json:"processors,omitempty"`
	Memory     MemoryInfo   `json:"memory"`
	NICs       []NIC        `json:"nics,omitempty"`
	Storage    StorageInfo  `json:"storage"`
	Manager    *ManagerInfo `json:"manager,omitempty"`
	// FailedSections lists the sections that could not be read (fully or in
	// part); the rest of the inventory is still valid.
	FailedSections []SectionError `json:"failedSections,omitempty"`
}

// Inventory section names used in SectionError.Section.
const (
	SectionProcessors = "processors"
	SectionMemory     = "memory"
	SectionNICs       = "nics"
	SectionStorage    = "storage"
	SectionManager    = "manager"
)

// SectionError records why one inventory section is missing or partial.
type SectionError struct {
	Section string `json:"section"`
	Reason  Reason `json:"reason"`
	Message string `json:"message"`
}

// SystemInfo is the ComputerSystem identity.
type SystemInfo struct {
	ID           string     `json:"id"`
	ODataID      string     `json:"odataId"`
	Name         string     `json:"name,omitempty"`
	UUID         string     `json:"uuid,omitempty"`
	Manufacturer string     `json:"manufacturer,omitempty"`
	Model        string     `json:"model,omitempty"`
	SerialNumber string     `json:"serialNumber,omitempty"`
	SKU          string     `json:"sku,omitempty"`
	PartNumber   string     `json:"partNumber,omitempty"`
	BIOSVersion  string     `json:"biosVersion,omitempty"`
	PowerState   PowerState `json:"powerState,omitempty"`
	IndicatorLED string     `json:"indicatorLED,omitempty"`
	Health       string     `json:"health,omitempty"`
	// ProcessorCount and ProcessorModel come from ProcessorSummary and stay
	// valid when the Processors collection is broken.
	ProcessorCount int    `json:"processorCount,omitempty"`
	ProcessorModel string `json:"processorModel,omitempty"`
}

// Processor is one CPU socket.
type Processor struct {
	ID           string `json:"id"`
	Socket       string `json:"socket,omitempty"`
	Manufacturer string `json:"manufacturer,omitempty"`
	Model        string `json:"model,omitempty"`
	Architecture string `json:"architecture,omitempty"`
	Cores        int    `json:"cores,omitempty"`
	Threads      int    `json:"threads,omitempty"`
	MaxSpeedMHz  int    `json:"maxSpeedMHz,omitempty"`
}

// MemoryInfo totals the installed memory.
type MemoryInfo struct {
	TotalMiB int64 `json:"totalMiB"`
	// Modules is the number of populated DIMMs (0 when unknown).
	Modules int `json:"modules,omitempty"`
}

// NIC is one host EthernetInterface.
type NIC struct {
	ID         string   `json:"id"`
	Name       string   `json:"name,omitempty"`
	MACAddress string   `json:"macAddress,omitempty"`
	LinkStatus string   `json:"linkStatus,omitempty"`
	Carrier    bool     `json:"carrier"`
	SpeedMbps  int      `json:"speedMbps,omitempty"`
	IPv4       []string `json:"ipv4,omitempty"`
	IPv6       []string `json:"ipv6,omitempty"`
}

// StorageInfo lists controllers, drives and volumes.
type StorageInfo struct {
	// Source is "Storage" or "SimpleStorage" (the latter when the BMC has no
	// Storage collection).
	Source      string   `json:"source,omitempty"`
	Controllers []string `json:"controllers,omitempty"`
	Drives      []Drive  `json:"drives,omitempty"`
	Volumes     []Volume `json:"volumes,omitempty"`
}

// Drive is one physical disk.
type Drive struct {
	ID            string `json:"id,omitempty"`
	Name          string `json:"name,omitempty"`
	Model         string `json:"model,omitempty"`
	Manufacturer  string `json:"manufacturer,omitempty"`
	SerialNumber  string `json:"serialNumber,omitempty"`
	CapacityBytes int64  `json:"capacityBytes,omitempty"`
	MediaType     string `json:"mediaType,omitempty"`
	Protocol      string `json:"protocol,omitempty"`
}

// Volume is one logical disk.
type Volume struct {
	ID            string `json:"id"`
	Name          string `json:"name,omitempty"`
	CapacityBytes int64  `json:"capacityBytes,omitempty"`
	RAIDType      string `json:"raidType,omitempty"`
}

// ManagerInfo describes the BMC.
type ManagerInfo struct {
	ID              string `json:"id"`
	Manufacturer    string `json:"manufacturer,omitempty"`
	Model           string `json:"model,omitempty"`
	FirmwareVersion string `json:"firmwareVersion,omitempty"`
	UUID            string `json:"uuid,omitempty"`
	MACAddress      string `json:"macAddress,omitempty"`
	// LastResetTime is the manager's own LastResetTime, as the BMC wrote it ("" when it does
	// not say): it moves when the BMC comes back from a reset.
	LastResetTime string `json:"lastResetTime,omitempty"`
}
