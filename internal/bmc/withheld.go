package bmc

import (
	"context"
	"errors"
	"fmt"

	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// ErrPowerWithheld is what a BMC from WithoutPower answers a call that would power, boot or
// erase a system: nothing is sent.
var ErrPowerWithheld = errors.New("power and boot of this system belong to its owner")

// WithoutPower wraps b for a system whose power and boot another system owns (a settings-only
// server): every call that would power it, change what or how it boots, or erase its disks is
// refused before anything is sent (ReasonRejected, ErrPowerWithheld). Reads, BIOS attributes,
// firmware, accounts, certificates and the locator LED pass. The controllers do not make those
// calls for such a server; this is the belt under them, so a path they missed fails loudly
// instead of resetting someone else's box.
func WithoutPower(b BMC) BMC { return &withheld{BMC: b} }

type withheld struct{ BMC }

func refuse(op string) error {
	return &wire.Error{Reason: ReasonRejected, Op: op, Err: fmt.Errorf("%w: not sent", ErrPowerWithheld)}
}

func (w *withheld) Power(_ context.Context, systemID string, action PowerAction, _ ...PowerOption) error {
	return refuse(fmt.Sprintf("power %s %s", action, systemID))
}

func (w *withheld) PreparePower(_ context.Context, systemID string, action PowerAction, _ ...PowerOption) (*PowerRequest, error) {
	return nil, refuse(fmt.Sprintf("power %s %s", action, systemID))
}

func (w *withheld) SetBootOnce(_ context.Context, systemID string, target BootTarget, _ ...BootOption) error {
	return refuse(fmt.Sprintf("boot override %s on %s", target, systemID))
}

func (w *withheld) SetBootOrder(_ context.Context, systemID string, _ []string) error {
	return refuse("boot order of " + systemID)
}

func (w *withheld) InsertMedia(_ context.Context, systemID, _ string) error {
	return refuse("insert virtual media on " + systemID)
}

func (w *withheld) EjectMedia(_ context.Context, systemID, _ string) error {
	return refuse("eject virtual media on " + systemID)
}

func (w *withheld) CreateVolume(_ context.Context, systemID string, _ VolumeRequest) error {
	return refuse("create a volume on " + systemID)
}

func (w *withheld) SecureEraseDrive(_ context.Context, systemID, _ string) (string, error) {
	return "", refuse("secure erase on " + systemID)
}

func (w *withheld) InitializeVolume(_ context.Context, systemID, _, _ string) (string, error) {
	return "", refuse("initialize a volume on " + systemID)
}
