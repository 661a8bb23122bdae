package media

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish/schemas"
)

// mediaDevices reads the system (proving it is the one meant, like every call on a system) and
// its virtual media devices: the system's own collection (newer firmware) or, where it has none,
// the collection of the manager that manages it, only when that manager manages no other
// system. Sorted by Id, so every caller picks the same device.
func mediaDevices(ctx context.Context, c wire.Conn, systemID string) ([]*schemas.VirtualMedia, bool, error) {
	sys, err := c.System(ctx, systemID)
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

// VirtualMedia does the work of bmc.BMC.VirtualMedia.
func VirtualMedia(ctx context.Context, c wire.Conn, systemID string) ([]MediaSlot, error) {
	op := "list virtual media of " + systemID
	devs, onManager, err := mediaDevices(ctx, c, systemID)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	out := make([]MediaSlot, 0, len(devs))
	for _, d := range devs {
		out = append(out, slotOf(d, onManager))
	}
	return out, nil
}

// InsertMedia does the work of bmc.BMC.InsertMedia.
func InsertMedia(ctx context.Context, c wire.Conn, systemID, image string) error {
	op := fmt.Sprintf("insert virtual media %s on %s", image, systemID)
	if image == "" {
		return wire.New(wire.ReasonInvalidConfig, op, "no image")
	}
	devs, onManager, err := mediaDevices(ctx, c, systemID)
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
			return wire.New(wire.ReasonUnsupported, op, "system has no virtual media")
		}
		return wire.New(wire.ReasonRejected, op, "no free virtual CD/DVD device: eject what is inserted first")
	}
	yes := true
	if _, err := free.InsertMedia(&schemas.VirtualMediaInsertMediaParameters{Image: image, Inserted: &yes, WriteProtected: &yes}); err != nil {
		return wire.Wrap(op, err)
	}
	c.Log().V(1).Info("virtual media inserted", "system", systemID, "device", free.ID, "onManager", onManager)
	return nil
}

// EjectMedia does the work of bmc.BMC.EjectMedia.
func EjectMedia(ctx context.Context, c wire.Conn, systemID, image string) error {
	op := fmt.Sprintf("eject virtual media %s on %s", image, systemID)
	devs, onManager, err := mediaDevices(ctx, c, systemID)
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
		c.Log().V(1).Info("virtual media ejected", "system", systemID, "device", d.ID, "onManager", onManager)
	}
	return nil
}

// MediaSlot is one virtual media device.
type MediaSlot struct {
	ID      string `json:"id"`
	ODataID string `json:"odataId"`
	// MediaTypes are what the device takes: CD, DVD, USBStick, Floppy.
	MediaTypes []string `json:"mediaTypes,omitempty"`
	Inserted   bool     `json:"inserted"`
	Image      string   `json:"image,omitempty"`
	// ConnectedVia is URI, Applet, Oem or NotConnected.
	ConnectedVia string `json:"connectedVia,omitempty"`
	// OnManager says the device is the manager's, not the system's own.
	OnManager bool `json:"onManager,omitempty"`
}

// TakesCD reports whether the device mounts an ISO (CD or DVD).
func (m MediaSlot) TakesCD() bool {
	return slices.Contains(m.MediaTypes, "CD") || slices.Contains(m.MediaTypes, "DVD")
}
