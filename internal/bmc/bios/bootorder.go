package bios

import (
	"context"
	"fmt"
	"slices"

	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// BootEntry is one boot option of a system.
type BootEntry struct {
	// Ref is the BootOptionReference, e.g. Boot0001: what Boot.BootOrder lists.
	Ref  string `json:"ref"`
	Name string `json:"name,omitempty"`
}

// BootEntries does the work of bmc.BMC.BootEntries.
func BootEntries(ctx context.Context, c wire.Conn, systemID string) ([]BootEntry, error) {
	op := "list boot options of " + systemID
	sys, err := c.System(ctx, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	opts, err := sys.BootOptions()
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	out := make([]BootEntry, 0, len(opts))
	for _, o := range opts {
		out = append(out, BootEntry{Ref: o.BootOptionReference, Name: o.DisplayName})
	}
	return out, nil
}

// fullOrder is order followed by the entries of current it does not name, in their order.
func fullOrder(order, current []string) []string {
	out := slices.Clone(order)
	for _, ref := range current {
		if !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out
}

// SetBootOrder does the work of bmc.BMC.SetBootOrder.
func SetBootOrder(ctx context.Context, c wire.Conn, systemID string, order []string) error {
	op := fmt.Sprintf("set boot order %v on %s", order, systemID)
	sys, err := c.System(ctx, systemID)
	if err != nil {
		return wire.Wrap(op, err)
	}
	current := sys.Boot.BootOrder
	for _, ref := range order {
		if !slices.Contains(current, ref) {
			return wire.New(wire.ReasonInvalidConfig, op, "the system has no boot option %q (it has %v)", ref, current)
		}
	}
	body := struct {
		Boot struct{ BootOrder []string }
	}{}
	body.Boot.BootOrder = fullOrder(order, current)
	if err := sys.Patch(sys.ODataID, body); err != nil {
		return wire.Wrap(op, err)
	}
	c.Log().V(1).Info("boot order set", "system", sys.ID, "order", body.Boot.BootOrder)
	return nil
}
