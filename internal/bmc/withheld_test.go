package bmc

import (
	"context"
	"errors"
	"testing"
)

// Every call that powers, boots or erases is refused before it reaches the BMC: the wrapped
// BMC here is nil, so a call that went through would panic.
func TestWithoutPowerRefusesBeforeSending(t *testing.T) {
	b, ctx := WithoutPower(nil), context.Background()
	calls := map[string]func() error{
		"Power":            func() error { return b.Power(ctx, "s", PowerOn) },
		"PreparePower":     func() error { _, err := b.PreparePower(ctx, "s", PowerForceRestart); return err },
		"SetBootOnce":      func() error { return b.SetBootOnce(ctx, "s", BootPxe) },
		"SetBootOrder":     func() error { return b.SetBootOrder(ctx, "s", []string{"Boot0001"}) },
		"InsertMedia":      func() error { return b.InsertMedia(ctx, "s", "http://x/iso") },
		"EjectMedia":       func() error { return b.EjectMedia(ctx, "s", "") },
		"CreateVolume":     func() error { return b.CreateVolume(ctx, "s", VolumeRequest{}) },
		"SecureEraseDrive": func() error { _, err := b.SecureEraseDrive(ctx, "s", "t"); return err },
		"InitializeVolume": func() error { _, err := b.InitializeVolume(ctx, "s", "t", "Fast"); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, ErrPowerWithheld) || ReasonOf(err) != ReasonRejected || errors.Is(err, ErrNotSent) {
			t.Errorf("%s: %v (reason %s), want ErrPowerWithheld, Rejected, not a retryable not-sent", name, err, ReasonOf(err))
		}
	}
}
