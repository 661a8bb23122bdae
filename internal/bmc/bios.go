package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish/schemas"
)

// biosSettings reads the links gofish keeps to itself: the settings object and its apply times.
type biosSettings struct {
	Settings struct {
		SettingsObject      wire.Link
		SupportedApplyTimes []string
	} `json:"@Redfish.Settings"`
}

func (c *conn) bios(ctx context.Context, systemID string) (*schemas.Bios, biosSettings, error) {
	sys, err := c.getSystem(ctx, systemID)
	if err != nil {
		return nil, biosSettings{}, err
	}
	api, err := c.client(ctx)
	if err != nil {
		return nil, biosSettings{}, err
	}
	var link struct{ Bios wire.Link }
	_ = json.Unmarshal(sys.RawData, &link)
	if link.Bios.ID == "" {
		return nil, biosSettings{}, wire.New(ReasonUnsupported, "read BIOS", "system %s has no Bios resource", systemID)
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

// Bios implements BMC.
func (c *conn) Bios(ctx context.Context, systemID string) (*BiosState, error) {
	op := "read BIOS of " + systemID
	b, set, err := c.bios(ctx, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	st := &BiosState{Attributes: map[string]any(b.Attributes), ApplyTimes: set.Settings.SupportedApplyTimes}
	if uri := set.Settings.SettingsObject.ID; uri != "" {
		api, err := c.client(ctx)
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

// SetBiosAttributes implements BMC.
func (c *conn) SetBiosAttributes(ctx context.Context, systemID string, attrs map[string]any) error {
	op := fmt.Sprintf("set BIOS attributes on %s", systemID)
	b, set, err := c.bios(ctx, systemID)
	if err != nil {
		return wire.Wrap(op, err)
	}
	for k := range attrs {
		if _, ok := b.Attributes[k]; !ok {
			return wire.New(ReasonInvalidConfig, op, "the system has no BIOS attribute %q", k)
		}
	}
	var at schemas.SettingsApplyTime
	if slices.Contains(set.Settings.SupportedApplyTimes, "OnReset") {
		at = "OnReset"
	}
	if err := b.UpdateBiosAttributesApplyAt(schemas.SettingsAttributes(attrs), at); err != nil {
		return wire.Wrap(op, err)
	}
	c.log.V(1).Info("BIOS attributes staged", "system", systemID, "count", len(attrs))
	return nil
}
