package bios

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish/schemas"
)

// State is a system's BIOS attributes.
type State struct {
	Attributes map[string]any `json:"attributes"`
	// Pending are the attributes staged for the next reset (the settings object's).
	Pending map[string]any `json:"pending,omitempty"`
	// ApplyTimes are the settings object's SupportedApplyTimes.
	ApplyTimes []string `json:"applyTimes,omitempty"`
}

// biosSettings reads the links gofish keeps to itself: the settings object and its apply times.
type biosSettings struct {
	Settings struct {
		SettingsObject      wire.Link
		SupportedApplyTimes []string
	} `json:"@Redfish.Settings"`
}

func read(ctx context.Context, c wire.Conn, systemID string) (*schemas.Bios, biosSettings, error) {
	sys, err := c.System(ctx, systemID)
	if err != nil {
		return nil, biosSettings{}, err
	}
	api, err := c.Client(ctx)
	if err != nil {
		return nil, biosSettings{}, err
	}
	var link struct{ Bios wire.Link }
	_ = json.Unmarshal(sys.RawData, &link)
	if link.Bios.ID == "" {
		return nil, biosSettings{}, wire.New(wire.ReasonUnsupported, "read BIOS", "system %s has no Bios resource", systemID)
	}
	var raw json.RawMessage
	if err := wire.GetJSON(api, link.Bios.ID, &raw); err != nil {
		return nil, biosSettings{}, err
	}
	var set biosSettings
	_ = json.Unmarshal(raw, &set)
	b, err := sys.Bios()
	return b, set, err
}

// Bios does the work of bmc.BMC.Bios.
func Bios(ctx context.Context, c wire.Conn, systemID string) (*State, error) {
	op := "read BIOS of " + systemID
	b, set, err := read(ctx, c, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	st := &State{Attributes: map[string]any(b.Attributes), ApplyTimes: set.Settings.SupportedApplyTimes}
	if uri := set.Settings.SettingsObject.ID; uri != "" {
		api, err := c.Client(ctx)
		if err != nil {
			return nil, wire.Wrap(op, err)
		}
		var pending struct{ Attributes map[string]any }
		if err := wire.GetJSON(api, uri, &pending); err != nil {
			return nil, wire.Wrap(op, err)
		}
		st.Pending = pending.Attributes
	}
	return st, nil
}

// SetAttributes does the work of bmc.BMC.SetBiosAttributes.
func SetAttributes(ctx context.Context, c wire.Conn, systemID string, attrs map[string]any) error {
	op := fmt.Sprintf("set BIOS attributes on %s", systemID)
	b, set, err := read(ctx, c, systemID)
	if err != nil {
		return wire.Wrap(op, err)
	}
	for k := range attrs {
		if _, ok := b.Attributes[k]; !ok {
			return wire.New(wire.ReasonInvalidConfig, op, "the system has no BIOS attribute %q", k)
		}
	}
	var at schemas.SettingsApplyTime
	if slices.Contains(set.Settings.SupportedApplyTimes, "OnReset") {
		at = "OnReset"
	}
	if err := b.UpdateBiosAttributesApplyAt(schemas.SettingsAttributes(attrs), at); err != nil {
		return wire.Wrap(op, err)
	}
	c.Log().V(1).Info("BIOS attributes staged", "system", systemID, "count", len(attrs))
	return nil
}
