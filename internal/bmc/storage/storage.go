// Package storage reads a system's storage controllers, drives and volumes as volume and erase
// work needs them (which RAID levels a controller makes, which drives each volume spans, which
// drives and volumes the BMC erases itself), makes a RAID volume through a controller's Volumes
// collection, and starts a drive's SecureErase or a volume's Initialize.
//
// It works over a wire.Conn the bmc facade passes; it must not import package bmc, and it makes
// or erases nothing but what it is asked for.
package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/metalhub/metalhub/internal/bmc/wire"
)

// Layout is a system's storage as volume work sees it.
type Layout struct {
	Controllers []Controller `json:"controllers"`
}

// Controller is one Storage resource: its drives, its volumes, what RAID it makes.
type Controller struct {
	ID      string `json:"id"`
	ODataID string `json:"odataId"`
	// RAIDTypes are the StorageControllers' SupportedRAIDTypes (none: it makes no volumes).
	RAIDTypes []string `json:"raidTypes,omitempty"`
	// VolumesURI is its Volumes collection ("" when it has none).
	VolumesURI string   `json:"volumesUri,omitempty"`
	Drives     []Drive  `json:"drives"`
	Volumes    []Volume `json:"volumes,omitempty"`
}

// Drive is one physical drive of a controller.
type Drive struct {
	ID            string `json:"id"`
	ODataID       string `json:"odataId"`
	SerialNumber  string `json:"serialNumber,omitempty"`
	Model         string `json:"model,omitempty"`
	CapacityBytes int64  `json:"capacityBytes,omitempty"`
	MediaType     string `json:"mediaType,omitempty"`
	// SecureEraseTarget is the drive's #Drive.SecureErase action target ("": not advertised).
	SecureEraseTarget string `json:"secureEraseTarget,omitempty"`
}

// Volume is one volume of a controller.
type Volume struct {
	ID       string `json:"id"`
	ODataID  string `json:"odataId"`
	Name     string `json:"name,omitempty"`
	RAIDType string `json:"raidType,omitempty"`
	// Drives are the @odata.id of the drives it spans.
	Drives []string `json:"drives,omitempty"`
	// InitializeTarget is the volume's #Volume.Initialize action target ("": not advertised),
	// and InitializeTypes the InitializeType values it allows (none listed: any).
	InitializeTarget string   `json:"initializeTarget,omitempty"`
	InitializeTypes  []string `json:"initializeTypes,omitempty"`
}

// Makes reports whether the controller advertises raidType.
func (c Controller) Makes(raidType string) bool {
	return c.VolumesURI != "" && slices.ContainsFunc(c.RAIDTypes, func(t string) bool { return strings.EqualFold(t, raidType) })
}

type link struct {
	ID string `json:"@odata.id"`
	// Target is an action's target, where the link is an action.
	Target string `json:"target"`
}

type collection struct {
	Members []link `json:"Members"`
}

// Read reads the system's Storage: every controller with its drives and volumes. A system
// without a Storage collection (SimpleStorage only) has an empty layout.
func Read(ctx context.Context, c wire.Conn, systemID string) (Layout, error) {
	op := "read storage of " + systemID
	sys, err := c.System(ctx, systemID)
	if err != nil {
		return Layout{}, wire.Wrap(op, err)
	}
	api, err := c.Client(ctx)
	if err != nil {
		return Layout{}, wire.Wrap(op, err)
	}
	var s struct {
		Storage link `json:"Storage"`
	}
	if err := jsonOf(sys.RawData, &s); err != nil || s.Storage.ID == "" {
		return Layout{}, nil
	}
	var coll collection
	if err := wire.GetJSON(api, s.Storage.ID, &coll); err != nil {
		return Layout{}, wire.Wrap(op, err)
	}
	var out Layout
	for _, m := range coll.Members {
		var st struct {
			ID                 string `json:"Id"`
			StorageControllers []struct {
				SupportedRAIDTypes []string `json:"SupportedRAIDTypes"`
			} `json:"StorageControllers"`
			Drives  []link `json:"Drives"`
			Volumes link   `json:"Volumes"`
		}
		if err := wire.GetJSON(api, m.ID, &st); err != nil {
			return Layout{}, wire.Wrap(op, err)
		}
		ctl := Controller{ID: st.ID, ODataID: m.ID, VolumesURI: st.Volumes.ID}
		for _, sc := range st.StorageControllers {
			ctl.RAIDTypes = append(ctl.RAIDTypes, sc.SupportedRAIDTypes...)
		}
		for _, d := range st.Drives {
			var dr struct {
				ID            string `json:"Id"`
				SerialNumber  string `json:"SerialNumber"`
				Model         string `json:"Model"`
				CapacityBytes int64  `json:"CapacityBytes"`
				MediaType     string `json:"MediaType"`
				Actions       struct {
					SecureErase link `json:"#Drive.SecureErase"`
				} `json:"Actions"`
			}
			if err := wire.GetJSON(api, d.ID, &dr); err != nil {
				return Layout{}, wire.Wrap(op, err)
			}
			ctl.Drives = append(ctl.Drives, Drive{ID: dr.ID, ODataID: d.ID, SerialNumber: strings.TrimSpace(dr.SerialNumber),
				Model: strings.TrimSpace(dr.Model), CapacityBytes: dr.CapacityBytes, MediaType: dr.MediaType,
				SecureEraseTarget: dr.Actions.SecureErase.Target})
		}
		if ctl.VolumesURI != "" {
			var vc collection
			if err := wire.GetJSON(api, ctl.VolumesURI, &vc); err != nil {
				return Layout{}, wire.Wrap(op, err)
			}
			for _, vm := range vc.Members {
				var v struct {
					ID       string `json:"Id"`
					Name     string `json:"Name"`
					RAIDType string `json:"RAIDType"`
					Links    struct {
						Drives []link `json:"Drives"`
					} `json:"Links"`
					Actions struct {
						Initialize struct {
							Target string   `json:"target"`
							Types  []string `json:"InitializeType@Redfish.AllowableValues"`
						} `json:"#Volume.Initialize"`
					} `json:"Actions"`
				}
				if err := wire.GetJSON(api, vm.ID, &v); err != nil {
					return Layout{}, wire.Wrap(op, err)
				}
				vol := Volume{ID: v.ID, ODataID: vm.ID, Name: v.Name, RAIDType: v.RAIDType,
					InitializeTarget: v.Actions.Initialize.Target, InitializeTypes: v.Actions.Initialize.Types}
				for _, d := range v.Links.Drives {
					vol.Drives = append(vol.Drives, d.ID)
				}
				ctl.Volumes = append(ctl.Volumes, vol)
			}
		}
		out.Controllers = append(out.Controllers, ctl)
	}
	return out, nil
}

// VolumeRequest is a volume to make on a controller.
type VolumeRequest struct {
	// VolumesURI is the controller's Volumes collection.
	VolumesURI string
	Name       string
	RAIDType   string
	// Drives are the @odata.id of the drives it spans.
	Drives []string
}

// CreateVolume asks the controller for the volume, to be made at once (OperationApplyTime
// Immediate): a controller that would make it only at the next reset refuses, and nothing is
// left pending.
func CreateVolume(ctx context.Context, c wire.Conn, systemID string, v VolumeRequest) error {
	op := fmt.Sprintf("create %s volume %q on %s", v.RAIDType, v.Name, systemID)
	if _, err := c.System(ctx, systemID); err != nil {
		return wire.Wrap(op, err)
	}
	api, err := c.Client(ctx)
	if err != nil {
		return wire.Wrap(op, err)
	}
	drives := make([]link, len(v.Drives))
	for i, d := range v.Drives {
		drives[i] = link{ID: d}
	}
	body := map[string]any{
		"Name": v.Name, "RAIDType": v.RAIDType, "Links": map[string]any{"Drives": drives},
		"@Redfish.OperationApplyTime": "Immediate",
	}
	resp, err := api.Post(v.VolumesURI, body)
	if err != nil {
		return wire.Wrap(op, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.Log().V(1).Info("volume requested", "system", systemID, "name", v.Name, "raidType", v.RAIDType, "drives", v.Drives)
	return nil
}

// SecureErase starts the drive's #Drive.SecureErase at target (from Drive.SecureEraseTarget)
// and returns the task that carries it out ("" when the BMC answered without one: done).
func SecureErase(ctx context.Context, c wire.Conn, systemID, target string) (string, error) {
	return startAction(ctx, c, "secure erase "+target+" on "+systemID, systemID, target, map[string]any{})
}

// InitializeVolume starts the volume's #Volume.Initialize at target with initType (Slow writes
// every block; Fast may only clear metadata) and returns its task, as SecureErase does.
func InitializeVolume(ctx context.Context, c wire.Conn, systemID, target, initType string) (string, error) {
	return startAction(ctx, c, "initialize ("+initType+") "+target+" on "+systemID, systemID, target, map[string]any{"InitializeType": initType})
}

// startAction POSTs an action that runs as a task and returns the task's URI: the Location of
// the answer, else a Task as its body.
func startAction(ctx context.Context, c wire.Conn, op, systemID, target string, body map[string]any) (string, error) {
	if target == "" {
		return "", wire.New(wire.ReasonUnsupported, op, "the BMC advertises no such action")
	}
	if _, err := c.System(ctx, systemID); err != nil {
		return "", wire.Wrap(op, err)
	}
	api, err := c.Client(ctx)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	resp, err := api.Post(target, body)
	if err != nil {
		return "", wire.Wrap(op, err)
	}
	defer resp.Body.Close()
	task := resp.Header.Get("Location")
	if task == "" {
		var t struct {
			ODataID string `json:"@odata.id"`
		}
		if json.NewDecoder(resp.Body).Decode(&t) == nil && strings.Contains(t.ODataID, "/Task") {
			task = t.ODataID
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	c.Log().V(1).Info("action accepted", "system", systemID, "target", target, "task", task, "status", resp.StatusCode)
	return task, nil
}

func jsonOf(raw []byte, v any) error { return json.Unmarshal(raw, v) }
