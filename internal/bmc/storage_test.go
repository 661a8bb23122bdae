package bmc_test

import (
	"context"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// A RAID1 volume over two free drives is made at once and read back with its drives; the
// controller says it makes RAID1; a drive already in a volume, or a controller that makes no
// volumes, is refused and nothing is made.
func TestCreateVolume(t *testing.T) {
	e := fleet(t, redfish.Options{BMCs: 40})
	p := pool(t, bmc.Options{})
	ctx := context.Background()
	for _, b := range e.BMCs() {
		if b.Vendor() == "hpe" || len(b.Systems()[0].Volumes()) != 1 {
			continue // HPE's profile has SimpleStorage only; the others come with an OS volume on drives 0 and 1
		}
		c := get(t, p, endpoint(b))
		id := b.SystemIDs()[0]
		layout, err := c.StorageLayout(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(layout.Controllers) != 1 || len(layout.Controllers[0].Drives) < 4 {
			continue
		}
		ctl := layout.Controllers[0]
		if !ctl.Makes("RAID1") || ctl.Makes("RAID6") {
			t.Fatalf("controller %+v", ctl)
		}
		if len(ctl.Volumes) != 1 || len(ctl.Volumes[0].Drives) != 2 {
			t.Fatalf("the machine's own volume: %+v", ctl.Volumes)
		}
		d0, d1 := ctl.Drives[2].ODataID, ctl.Drives[3].ODataID
		if err := c.CreateVolume(ctx, id, bmc.VolumeRequest{VolumesURI: ctl.VolumesURI, Name: "root", RAIDType: "RAID1", Drives: []string{d0, d1}}); err != nil {
			t.Fatal(err)
		}
		layout, err = c.StorageLayout(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		vols := layout.Controllers[0].Volumes[1:]
		if len(vols) != 1 || vols[0].Name != "root" || vols[0].RAIDType != "RAID1" || len(vols[0].Drives) != 2 || vols[0].Drives[0] != d0 {
			t.Fatalf("volumes %+v", vols)
		}
		if err := c.CreateVolume(ctx, id, bmc.VolumeRequest{VolumesURI: ctl.VolumesURI, Name: "again", RAIDType: "RAID1", Drives: []string{d0, d1}}); err == nil {
			t.Fatal("a volume over drives already in one was made")
		}
		b.SetFaults(redfish.Faults{NoVolumes: true})
		layout, err = c.StorageLayout(ctx, id)
		if err != nil || layout.Controllers[0].Makes("RAID1") {
			t.Fatalf("a controller without volume support says it makes RAID1: %+v %v", layout, err)
		}
		if err := c.CreateVolume(ctx, id, bmc.VolumeRequest{VolumesURI: ctl.VolumesURI, Name: "x", RAIDType: "RAID0", Drives: []string{d0}}); err == nil {
			t.Fatal("a controller without volume support made a volume")
		}
		if n := len(b.Systems()[0].Volumes()); n != 2 {
			t.Fatalf("%d volumes", n)
		}
		return
	}
	t.Fatal("no emulated BMC with a controller of four drives")
}
