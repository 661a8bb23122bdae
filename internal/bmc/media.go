package bmc

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish/schemas"
)

// mediaDevices reads the system (proving it is the one meant, like every call on a system) and
// its virtual media devices: the system's own collection (newer firmware) or, where it has none,
// the collection of the manager that manages it, only when that manager manages no other
// system. Sorted by Id, so every caller picks the same device.
func (c *conn) mediaDevices(ctx context.Context, systemID string) ([]*schemas.VirtualMedia, bool, error) {
	sys, err := c.getSystem(ctx, systemID)
	if err != nil {
		return nil, false, err
	}
	devs, err := sys.VirtualMedia()
	if err != nil {
		return nil, false, err
	}
	onManager := false
	if len(devs) == 0 && !hasLink(sys.RawData, "VirtualMedia") {
		mgrs, err := sys.ManagedBy()
		if err != nil || len(mgrs) != 1 || serversManaged(mgrs[0].RawData) != 1 {
			return nil, false, err
		}
		if devs, err = mgrs[0].VirtualMedia(); err != nil {
			return nil, false, err
		}
		onManager = true
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].ID < devs[j].ID })
	return devs, onManager, nil
}

func hasLink(raw []byte, name string) bool {
	var v map[string]json.RawMessage
	_ = json.Unmarshal(raw, &v)
	_, ok := v[name]
	return ok
}

func serversManaged(raw []byte) int {
	var v struct {
		Links struct{ ManagerForServers []json.RawMessage }
	}
	_ = json.Unmarshal(raw, &v)
	return len(v.Links.ManagerForServers)
}

func slotOf(d *schemas.VirtualMedia, onManager bool) MediaSlot {
	m := MediaSlot{ID: d.ID, ODataID: d.ODataID, Image: d.Image, ConnectedVia: string(d.ConnectedVia), OnManager: onManager}
	m.Inserted = d.Inserted != nil && *d.Inserted
	for _, t := range d.MediaTypes {
		m.MediaTypes = append(m.MediaTypes, string(t))
	}
	return m
}

// VirtualMedia implements BMC.
func (c *conn) VirtualMedia(ctx context.Context, systemID string) ([]MediaSlot, error) {
	op := "list virtual media of " + systemID
	devs, onManager, err := c.mediaDevices(ctx, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	out := make([]MediaSlot, 0, len(devs))
	for _, d := range devs {
		out = append(out, slotOf(d, onManager))
	}
	return out, nil
}

// InsertMedia implements BMC.
func (c *conn) InsertMedia(ctx context.Context, systemID, image string) error {
	op := fmt.Sprintf("insert virtual media %s on %s", image, systemID)
	if image == "" {
		return wire.New(ReasonInvalidConfig, op, "no image")
	}
	devs, onManager, err := c.mediaDevices(ctx, systemID)
	if err != nil {
		return wire.Wrap(op, err)
	}
	var free *schemas.VirtualMedia
	for _, d := range devs {
		slot := slotOf(d, onManager)
		if !slot.TakesCD() {
			continue
		}
		if slot.Inserted && slot.Image == image {
			return nil // already there: a pass that lost its write finds it
		}
		if free == nil && !slot.Inserted {
			free = d
		}
	}
	if free == nil {
		if len(devs) == 0 {
			return wire.New(ReasonUnsupported, op, "system has no virtual media")
		}
		return wire.New(ReasonRejected, op, "no free virtual CD/DVD device: eject what is inserted first")
	}
	yes := true
	if _, err := free.InsertMedia(&schemas.VirtualMediaInsertMediaParameters{Image: image, Inserted: &yes, WriteProtected: &yes}); err != nil {
		return wire.Wrap(op, err)
	}
	c.log.V(1).Info("virtual media inserted", "system", systemID, "device", free.ID, "onManager", onManager)
	return nil
}

// EjectMedia implements BMC.
func (c *conn) EjectMedia(ctx context.Context, systemID, image string) error {
	op := fmt.Sprintf("eject virtual media %s on %s", image, systemID)
	devs, onManager, err := c.mediaDevices(ctx, systemID)
	if err != nil {
		return wire.Wrap(op, err)
	}
	for _, d := range devs {
		slot := slotOf(d, onManager)
		if !slot.TakesCD() || !slot.Inserted || (image != "" && slot.Image != image) {
			continue
		}
		if _, err := d.EjectMedia(); err != nil {
			return wire.Wrap(op, err)
		}
		c.log.V(1).Info("virtual media ejected", "system", systemID, "device", d.ID, "onManager", onManager)
	}
	return nil
}
