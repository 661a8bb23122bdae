package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// rootVolumePlan is what the root volume asked for means on a system's storage: the volume that
// is it already, or the controller and drives to make it from.
type rootVolumePlan struct {
	existingID string
	volumesURI string
	drives     []string // @odata.id
}

// planRootVolume decides, from the system's storage, whether the volume rv asks for exists or
// which drives of which controller make it. The error carries the condition's reason: the BMC
// cannot make it (RootVolumeUnsupported) or the drives are not there or taken (RootVolumeInvalid).
func planRootVolume(layout bmc.StorageLayout, rv metalv1alpha1.RootVolume) (rootVolumePlan, error) {
	raid := cmp.Or(rv.RAIDType, "RAID1")
	unsupported := func(format string, args ...any) (rootVolumePlan, error) {
		return rootVolumePlan{}, lifecycle.WithReason(metalv1alpha1.ReasonRootVolumeUnsupported, fmt.Errorf(format, args...))
	}
	invalid := func(format string, args ...any) (rootVolumePlan, error) {
		return rootVolumePlan{}, lifecycle.WithReason(metalv1alpha1.ReasonRootVolumeInvalid, fmt.Errorf(format, args...))
	}
	if len(layout.Controllers) == 0 {
		return unsupported("a %s root volume is asked for; the BMC shows no Storage controller (SimpleStorage only)", raid)
	}
	for ci := range layout.Controllers {
		c := &layout.Controllers[ci]
		var picked []string
		if len(rv.Drives) > 0 {
			for _, want := range rv.Drives {
				k := slices.IndexFunc(c.Drives, func(d bmc.StorageDrive) bool {
					return strings.EqualFold(d.ID, want) || (d.SerialNumber != "" && strings.EqualFold(d.SerialNumber, want))
				})
				if k < 0 {
					break
				}
				picked = append(picked, c.Drives[k].ODataID)
			}
			if len(picked) != len(rv.Drives) {
				continue
			}
		}
		// A volume of the level over the drives asked for (or, with none named, any) is it.
		for _, v := range c.Volumes {
			if strings.EqualFold(v.RAIDType, raid) && (len(picked) == 0 || sameSet(v.Drives, picked)) {
				return rootVolumePlan{existingID: v.ODataID}, nil
			}
		}
		if len(rv.Drives) > 0 {
			for _, v := range c.Volumes {
				for _, d := range picked {
					if slices.Contains(v.Drives, d) {
						return invalid("drive %s is in volume %s (%s) already; delete it first, or name other drives", d, v.ID, v.RAIDType)
					}
				}
			}
			if !c.Makes(raid) {
				return unsupported("storage controller %s makes no %s volumes through Redfish", c.ID, raid)
			}
			return rootVolumePlan{volumesURI: c.VolumesURI, drives: picked}, nil
		}
	}
	if len(rv.Drives) > 0 {
		return invalid("drives %v are not all on one storage controller of the system", rv.Drives)
	}
	// None named: the first two free drives of one model and size on a controller that makes it.
	made := false
	for _, c := range layout.Controllers {
		if !c.Makes(raid) {
			continue
		}
		made = true
		used := map[string]bool{}
		for _, v := range c.Volumes {
			for _, d := range v.Drives {
				used[d] = true
			}
		}
		drives := slices.Clone(c.Drives)
		slices.SortFunc(drives, func(a, b bmc.StorageDrive) int { return cmp.Compare(a.ID, b.ID) })
		for i, a := range drives {
			if used[a.ODataID] {
				continue
			}
			for _, b := range drives[i+1:] {
				if !used[b.ODataID] && a.Model == b.Model && a.CapacityBytes == b.CapacityBytes {
					return rootVolumePlan{volumesURI: c.VolumesURI, drives: []string{a.ODataID, b.ODataID}}, nil
				}
			}
		}
	}
	if !made {
		return unsupported("no storage controller of the system makes %s volumes through Redfish", raid)
	}
	return invalid("no two free drives of one model and size for a %s root volume", raid)
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// ensureRootVolume makes sure the root volume sbc asks for exists before the box boots it. What
// is there is observed first: an existing volume is taken as it is, and a volume is requested
// only when there is none, after which the pass waits for it to show (RootVolumePending): a
// pass repeated after a lost write finds it and sends nothing. Whatever keeps it from being
// made is the BootMethod condition's, and nothing is booted instead.
func (r *Reconciler) ensureRootVolume(bctx context.Context, p *serverPass, sbc *metalv1alpha1.ServerBootConfiguration) (err error) {
	rv := sbc.Spec.RootVolume
	if rv == nil {
		return nil
	}
	defer func() { p.noteBootProblem(err) }()
	layout, err := p.conn.StorageLayout(bctx, p.sysID)
	if err != nil {
		return fmt.Errorf("reading the storage for the root volume: %w", err)
	}
	plan, err := planRootVolume(layout, *rv)
	if err != nil || plan.existingID != "" {
		return err
	}
	name := cmp.Or(rv.Name, "root")
	raid := cmp.Or(rv.RAIDType, "RAID1")
	if err := p.conn.CreateVolume(bctx, p.sysID, bmc.VolumeRequest{VolumesURI: plan.volumesURI, Name: name, RAIDType: raid, Drives: plan.drives}); err != nil {
		if bmc.ReasonOf(err) == bmc.ReasonUnsupported {
			err = lifecycle.WithReason(metalv1alpha1.ReasonRootVolumeUnsupported, err)
		}
		return fmt.Errorf("creating the %s root volume: %w", raid, err)
	}
	r.Recorder.Eventf(p.Obj, sbc, corev1.EventTypeNormal, "RootVolumeRequested", "Boot",
		"%s volume %q requested over %v for boot configuration %s/%s", raid, name, plan.drives, sbc.Namespace, sbc.Name)
	return lifecycle.WithReason(metalv1alpha1.ReasonRootVolumePending, fmt.Errorf("%s volume %q requested over %v; the server boots once it shows", raid, name, plan.drives))
}
