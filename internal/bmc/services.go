package bmc

import (
	"context"
	"os"

	"github.com/metalhub/metalhub/internal/bmc/accounts"
	"github.com/metalhub/metalhub/internal/bmc/bios"
	"github.com/metalhub/metalhub/internal/bmc/certs"
	"github.com/metalhub/metalhub/internal/bmc/console"
	"github.com/metalhub/metalhub/internal/bmc/events"
	"github.com/metalhub/metalhub/internal/bmc/managerattrs"
	"github.com/metalhub/metalhub/internal/bmc/media"
	volumes "github.com/metalhub/metalhub/internal/bmc/storage"
	"github.com/metalhub/metalhub/internal/bmc/telemetry"
	"github.com/metalhub/metalhub/internal/bmc/update"
)

// The per-service work lives in the service packages; these are the BMC methods that hand it
// a view of the connection.

// Account is one BMC user account.
type Account = accounts.Account

// Accounts implements BMC.
func (c *conn) Accounts(ctx context.Context) ([]Account, error) {
	return accounts.Accounts(ctx, c.wire())
}

// SetAccount implements BMC. A BMC's refusal may quote the password it refuses: the error
// returned never carries it.
func (c *conn) SetAccount(ctx context.Context, user, password, role string) error {
	return accounts.SetAccount(ctx, c.wire(), user, password, role)
}

// DeleteAccount implements BMC.
func (c *conn) DeleteAccount(ctx context.Context, user string) error {
	return accounts.DeleteAccount(ctx, c.wire(), user)
}

// Certificate is one HTTPS certificate of a BMC.
type Certificate = certs.Certificate

// CertificateName is a certificate's subject or issuer.
type CertificateName = certs.Name

// CSRRequest is what GenerateCSR asks the BMC for.
type CSRRequest = certs.CSRRequest

// Errors of the certificate calls; see package certs.
var (
	ErrNoCertificateService = certs.ErrNoCertificateService
	ErrCertificateRefused   = certs.ErrCertificateRefused
)

// Certificates implements BMC.
func (c *conn) Certificates(ctx context.Context) ([]Certificate, error) {
	return certs.Certificates(ctx, c.wire())
}

// GenerateCSR implements BMC.
func (c *conn) GenerateCSR(ctx context.Context, req CSRRequest) (string, string, error) {
	return certs.GenerateCSR(ctx, c.wire(), req)
}

// ReplaceCertificate implements BMC.
func (c *conn) ReplaceCertificate(ctx context.Context, certURI, certPEM string) error {
	return certs.ReplaceCertificate(ctx, c.wire(), certURI, certPEM)
}

// Firmware is one component of the FirmwareInventory.
type Firmware = update.Firmware

// UpdateRequest is a SimpleUpdate.
type UpdateRequest = update.UpdateRequest

// TaskStatus is a Redfish task as read.
type TaskStatus = update.TaskStatus

// FirmwareInventory implements BMC.
func (c *conn) FirmwareInventory(ctx context.Context) ([]Firmware, error) {
	return update.FirmwareInventory(ctx, c.wire())
}

// SimpleUpdate implements BMC.
func (c *conn) SimpleUpdate(ctx context.Context, req UpdateRequest) (string, error) {
	return update.SimpleUpdate(ctx, c.wire(), req)
}

// UpdateMethods implements BMC.
func (c *conn) UpdateMethods(ctx context.Context) (simple, push bool, err error) {
	return update.UpdateMethods(ctx, c.wire())
}

// PushUpdate implements BMC.
func (c *conn) PushUpdate(ctx context.Context, req UpdateRequest, image *os.File) (string, error) {
	return update.PushUpdate(ctx, c.wire(), req, image)
}

// Task implements BMC.
func (c *conn) Task(ctx context.Context, uri string) (*TaskStatus, error) {
	return update.Task(ctx, c.wire(), uri)
}

// Tasks implements BMC.
func (c *conn) Tasks(ctx context.Context) ([]TaskStatus, error) { return update.Tasks(ctx, c.wire()) }

// MediaSlot is one virtual media device.
type MediaSlot = media.MediaSlot

// VirtualMedia implements BMC.
func (c *conn) VirtualMedia(ctx context.Context, systemID string) ([]MediaSlot, error) {
	return media.VirtualMedia(ctx, c.wire(), systemID)
}

// InsertMedia implements BMC.
func (c *conn) InsertMedia(ctx context.Context, systemID, image string) error {
	return media.InsertMedia(ctx, c.wire(), systemID, image)
}

// EjectMedia implements BMC.
func (c *conn) EjectMedia(ctx context.Context, systemID, image string) error {
	return media.EjectMedia(ctx, c.wire(), systemID, image)
}

// StorageLayout is a system's storage as volume work sees it.
type StorageLayout = volumes.Layout

// StorageController is one storage controller with its drives and volumes.
type StorageController = volumes.Controller

// StorageVolume is a volume of a storage controller.
type StorageVolume = volumes.Volume

// StorageDrive is a drive of a storage controller.
type StorageDrive = volumes.Drive

// VolumeRequest is a volume to make.
type VolumeRequest = volumes.VolumeRequest

// StorageLayout implements BMC.
func (c *conn) StorageLayout(ctx context.Context, systemID string) (StorageLayout, error) {
	return volumes.Read(ctx, c.wire(), systemID)
}

// CreateVolume implements BMC.
func (c *conn) CreateVolume(ctx context.Context, systemID string, v VolumeRequest) error {
	return volumes.CreateVolume(ctx, c.wire(), systemID, v)
}

// SecureEraseDrive implements BMC.
func (c *conn) SecureEraseDrive(ctx context.Context, systemID, target string) (string, error) {
	return volumes.SecureErase(ctx, c.wire(), systemID, target)
}

// InitializeVolume implements BMC.
func (c *conn) InitializeVolume(ctx context.Context, systemID, target, initType string) (string, error) {
	return volumes.InitializeVolume(ctx, c.wire(), systemID, target, initType)
}

// SerialConsole is how a system's serial console is reached through its BMC.
type SerialConsole = console.Access

// SerialConsole implements BMC.
func (c *conn) SerialConsole(ctx context.Context, systemID string) (SerialConsole, error) {
	return console.Read(ctx, c.wire(), systemID)
}

// EventServiceInfo describes a BMC's EventService.
type EventServiceInfo = events.EventServiceInfo

// Subscription is one event subscription (EventDestination) of a BMC.
type Subscription = events.Subscription

// Event is a Redfish event POSTed by a BMC to a subscription's destination.
type Event = events.Event

// EventRecord is one event of an Event.
type EventRecord = events.EventRecord

// ParseEvent decodes a Redfish event body (see events.ParseEvent).
func ParseEvent(body []byte) (*Event, error) { return events.ParseEvent(body) }

// EventService implements BMC.
func (c *conn) EventService(ctx context.Context) (EventServiceInfo, error) {
	return events.EventService(ctx, c.wire())
}

// Subscribe implements BMC.
func (c *conn) Subscribe(ctx context.Context, destination, evContext string) (string, error) {
	return events.Subscribe(ctx, c.wire(), destination, evContext)
}

// Unsubscribe implements BMC.
func (c *conn) Unsubscribe(ctx context.Context, uri string) error {
	return events.Unsubscribe(ctx, c.wire(), uri)
}

// Subscriptions implements BMC.
func (c *conn) Subscriptions(ctx context.Context) ([]Subscription, error) {
	return events.Subscriptions(ctx, c.wire())
}

// BiosState is a system's BIOS attributes.
type BiosState = bios.State

// Bios implements BMC.
func (c *conn) Bios(ctx context.Context, systemID string) (*BiosState, error) {
	return bios.Bios(ctx, c.wire(), systemID)
}

// SetBiosAttributes implements BMC.
func (c *conn) SetBiosAttributes(ctx context.Context, systemID string, attrs map[string]any) error {
	return bios.SetAttributes(ctx, c.wire(), systemID, attrs)
}

// BootEntry is one boot option of a system.
type BootEntry = bios.BootEntry

// BootEntries implements BMC.
func (c *conn) BootEntries(ctx context.Context, systemID string) ([]BootEntry, error) {
	return bios.BootEntries(ctx, c.wire(), systemID)
}

// SetBootOrder implements BMC.
func (c *conn) SetBootOrder(ctx context.Context, systemID string, order []string) error {
	return bios.SetBootOrder(ctx, c.wire(), systemID, order)
}

// ManagerAttributes implements BMC.
func (c *conn) ManagerAttributes(ctx context.Context) (map[string]any, error) {
	return managerattrs.Read(ctx, c.wire())
}

// SetManagerAttributes implements BMC.
func (c *conn) SetManagerAttributes(ctx context.Context, attrs map[string]any) error {
	return managerattrs.Set(ctx, c.wire(), attrs)
}

// Telemetry is one system's chassis readings (see package telemetry).
type Telemetry = telemetry.Telemetry

// TelemetryPowerSupply, TelemetryTemperature and TelemetryFan are its parts.
type (
	TelemetryPowerSupply = telemetry.PowerSupply
	TelemetryTemperature = telemetry.Temperature
	TelemetryFan         = telemetry.Fan
)

// Telemetry implements BMC.
func (c *conn) Telemetry(ctx context.Context, systemID string) (*Telemetry, error) {
	return telemetry.Read(ctx, c.wire(), systemID)
}
