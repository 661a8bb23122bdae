package bmc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/stmcginnis/gofish/schemas"
)

// ReasonIdentityMismatch: the system that answered at a server's address is not that server's
// (another UUID or serial): an address handed to another box, a replaced board, a typo. Nothing
// is sent to it.
const ReasonIdentityMismatch Reason = "IdentityMismatch"

// Identity is what proves a Redfish system is the machine meant: its system UUID and, where
// known, its serial number. Addresses and system paths prove nothing: addresses get reused and
// vendors give every box the same path (/redfish/v1/Systems/1).
type Identity struct {
	UUID         string `json:"uuid,omitempty"`
	SerialNumber string `json:"serialNumber,omitempty"`
}

// String names the identity for messages.
func (id Identity) String() string {
	s := "UUID " + orNone(id.UUID)
	if id.SerialNumber != "" {
		s += " serial " + id.SerialNumber
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// NormalizeUUID is the one form system UUIDs are compared in: BMCs print them in either case,
// some with braces or a urn:uuid: prefix, SMBIOS tools without dashes.
func NormalizeUUID(uuid string) string {
	u := strings.ToLower(strings.TrimSpace(uuid))
	u = strings.TrimPrefix(u, "urn:uuid:")
	u = strings.Trim(u, "{}")
	return strings.ReplaceAll(u, "-", "")
}

// Matches reports whether got is this identity: the UUIDs equal once normalised, and the serial
// numbers too where both are known. An identity with no UUID matches nothing: it proves nothing.
func (id Identity) Matches(got Identity) bool {
	want := NormalizeUUID(id.UUID)
	if want == "" || want != NormalizeUUID(got.UUID) {
		return false
	}
	ws, gs := strings.TrimSpace(id.SerialNumber), strings.TrimSpace(got.SerialNumber)
	return ws == "" || gs == "" || strings.EqualFold(ws, gs)
}

// IdentityError is the failure of a call made for one system that found another.
type IdentityError struct {
	// System is the system path or Id the call was made for.
	System string
	Want   Identity
	Got    Identity
}

func (e *IdentityError) Error() string {
	return fmt.Sprintf("system %s answers as %s, not %s", e.System, e.Got, e.Want)
}

// IdentityOf returns the identity error in err's chain, if any.
func IdentityOf(err error) (*IdentityError, bool) {
	var ie *IdentityError
	ok := errors.As(err, &ie)
	return ie, ok
}

type expectKey struct{}

// Expect returns b bound to one identity: every call on a system (System, Power, PreparePower,
// SetBootOnce, SetIndicatorLED, Bios, SetBiosAttributes, BootEntries, SetBootOrder, SimpleUpdate and PushUpdate for a system, VirtualMedia, InsertMedia, EjectMedia, StorageLayout, CreateVolume, SecureEraseDrive, InitializeVolume, Inventory, SerialConsole, Telemetry) first checks that the system it reads is id, in the same read that
// precedes its request, and fails with ReasonIdentityMismatch before anything is sent when not.
// LogEntries, a read polled for every server, takes a proof read at most proofTTL before (by any
// call on the system through this connection) instead of reading the system again.
// The check lives here, below every caller, so that no path to a box (and none added later) can
// act on whatever answers at an address. Calls on the BMC itself are not a system's and pass.
func Expect(b BMC, id Identity) BMC { return &expecting{BMC: b, id: id} }

type expecting struct {
	BMC
	id Identity
}

func (e *expecting) with(ctx context.Context) context.Context {
	return context.WithValue(ctx, expectKey{}, e.id)
}

func (e *expecting) System(ctx context.Context, systemID string) (*SystemStatus, error) {
	return e.BMC.System(e.with(ctx), systemID)
}

func (e *expecting) Power(ctx context.Context, systemID string, action PowerAction, opts ...PowerOption) error {
	return e.BMC.Power(e.with(ctx), systemID, action, opts...)
}

func (e *expecting) PreparePower(ctx context.Context, systemID string, action PowerAction, opts ...PowerOption) (*PowerRequest, error) {
	return e.BMC.PreparePower(e.with(ctx), systemID, action, opts...)
}

func (e *expecting) SetBootOnce(ctx context.Context, systemID string, target BootTarget, opts ...BootOption) error {
	return e.BMC.SetBootOnce(e.with(ctx), systemID, target, opts...)
}

func (e *expecting) SimpleUpdate(ctx context.Context, req UpdateRequest) (string, error) {
	return e.BMC.SimpleUpdate(e.with(ctx), req)
}

func (e *expecting) PushUpdate(ctx context.Context, req UpdateRequest, image *os.File) (string, error) {
	return e.BMC.PushUpdate(e.with(ctx), req, image)
}

func (e *expecting) Bios(ctx context.Context, systemID string) (*BiosState, error) {
	return e.BMC.Bios(e.with(ctx), systemID)
}

func (e *expecting) SetBiosAttributes(ctx context.Context, systemID string, attrs map[string]any) error {
	return e.BMC.SetBiosAttributes(e.with(ctx), systemID, attrs)
}

func (e *expecting) BootEntries(ctx context.Context, systemID string) ([]BootEntry, error) {
	return e.BMC.BootEntries(e.with(ctx), systemID)
}

func (e *expecting) SetBootOrder(ctx context.Context, systemID string, order []string) error {
	return e.BMC.SetBootOrder(e.with(ctx), systemID, order)
}

func (e *expecting) VirtualMedia(ctx context.Context, systemID string) ([]MediaSlot, error) {
	return e.BMC.VirtualMedia(e.with(ctx), systemID)
}

func (e *expecting) InsertMedia(ctx context.Context, systemID, image string) error {
	return e.BMC.InsertMedia(e.with(ctx), systemID, image)
}

func (e *expecting) EjectMedia(ctx context.Context, systemID, image string) error {
	return e.BMC.EjectMedia(e.with(ctx), systemID, image)
}

func (e *expecting) StorageLayout(ctx context.Context, systemID string) (StorageLayout, error) {
	return e.BMC.StorageLayout(e.with(ctx), systemID)
}

func (e *expecting) CreateVolume(ctx context.Context, systemID string, v VolumeRequest) error {
	return e.BMC.CreateVolume(e.with(ctx), systemID, v)
}

func (e *expecting) SecureEraseDrive(ctx context.Context, systemID, target string) (string, error) {
	return e.BMC.SecureEraseDrive(e.with(ctx), systemID, target)
}

func (e *expecting) InitializeVolume(ctx context.Context, systemID, target, initType string) (string, error) {
	return e.BMC.InitializeVolume(e.with(ctx), systemID, target, initType)
}

func (e *expecting) SetIndicatorLED(ctx context.Context, systemID string, led string) error {
	return e.BMC.SetIndicatorLED(e.with(ctx), systemID, led)
}

// SerialConsole is checked too: a console opened on another machine would show its screen and
// take keystrokes meant for this one.
func (e *expecting) SerialConsole(ctx context.Context, systemID string) (SerialConsole, error) {
	return e.BMC.SerialConsole(e.with(ctx), systemID)
}

func (e *expecting) Inventory(ctx context.Context, systemID string) (*Inventory, error) {
	return e.BMC.Inventory(e.with(ctx), systemID)
}

// LogEntries is checked too: another machine's log would be taken for this one's health.
func (e *expecting) LogEntries(ctx context.Context, systemID, after string) ([]LogEntry, error) {
	return e.BMC.LogEntries(e.with(ctx), systemID, after)
}

// Telemetry is checked too: another machine's readings would be taken for this one's.
func (e *expecting) Telemetry(ctx context.Context, systemID string) (*Telemetry, error) {
	return e.BMC.Telemetry(e.with(ctx), systemID)
}

func (e *expecting) LogCursor(ctx context.Context, systemID string) (string, error) {
	return e.BMC.LogCursor(e.with(ctx), systemID)
}

// checkIdentity fails when ctx carries an expected identity (Expect) that sys is not.
func checkIdentity(ctx context.Context, systemID string, sys *schemas.ComputerSystem) error {
	want, ok := ctx.Value(expectKey{}).(Identity)
	if !ok {
		return nil
	}
	got := Identity{UUID: sys.UUID, SerialNumber: sys.SerialNumber}
	if isSystem(want, got, sys.ID) {
		return nil
	}
	return &Error{Reason: ReasonIdentityMismatch, Op: "verify system " + systemID, NotSent: true,
		Err: &IdentityError{System: systemID, Want: want, Got: got}}
}

// isSystem reports whether a system that answered as got, with Redfish Id id, is want.
func isSystem(want, got Identity, id string) bool {
	if want.Matches(got) {
		return true
	}
	// A system that reports no UUID is registered under its Id (the BMC controller's
	// fallback): the Id is then all there is to go by.
	return strings.TrimSpace(got.UUID) == "" && NormalizeUUID(want.UUID) == NormalizeUUID(id)
}
