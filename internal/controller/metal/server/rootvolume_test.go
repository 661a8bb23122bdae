package server

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func TestPlanRootVolume(t *testing.T) {
	drive := func(id, model string, size int64) bmc.StorageDrive {
		return bmc.StorageDrive{ID: id, ODataID: "/s/" + id, SerialNumber: "SN" + id, Model: model, CapacityBytes: size}
	}
	ctl := func(raid []string, vols []bmc.StorageVolume, drives ...bmc.StorageDrive) bmc.StorageController {
		return bmc.StorageController{ID: "RAID.1", VolumesURI: "/s/Volumes", RAIDTypes: raid, Drives: drives, Volumes: vols}
	}
	raid := []string{"RAID0", "RAID1"}
	four := []bmc.StorageDrive{drive("d0", "A", 100), drive("d1", "A", 100), drive("d2", "B", 200), drive("d3", "B", 200)}
	os := bmc.StorageVolume{ID: "Volume0", ODataID: "/s/Volumes/0", RAIDType: "RAID1", Drives: []string{"/s/d0", "/s/d1"}}
	for _, tc := range []struct {
		name     string
		layout   bmc.StorageLayout
		drives   []string
		existing string
		make     []string
		reason   string
	}{
		{name: "named, made", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(raid, nil, four...)}}, drives: []string{"d2", "SNd3"}, make: []string{"/s/d2", "/s/d3"}},
		{name: "named, there already", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(raid, []bmc.StorageVolume{os}, four...)}}, drives: []string{"d1", "d0"}, existing: "/s/Volumes/0"},
		{name: "named, taken", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(raid, []bmc.StorageVolume{os}, four...)}}, drives: []string{"d1", "d2"}, reason: metalv1alpha1.ReasonRootVolumeInvalid},
		{name: "named, missing", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(raid, nil, four...)}}, drives: []string{"d1", "d9"}, reason: metalv1alpha1.ReasonRootVolumeInvalid},
		{name: "any, there already", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(raid, []bmc.StorageVolume{os}, four...)}}, existing: "/s/Volumes/0"},
		{name: "any, first free pair of one model", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(raid, nil, drive("d0", "A", 100), drive("d1", "B", 200), drive("d2", "A", 100))}}, make: []string{"/s/d0", "/s/d2"}},
		{name: "any, no pair", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(raid, nil, drive("d0", "A", 100), drive("d1", "B", 200))}}, reason: metalv1alpha1.ReasonRootVolumeInvalid},
		{name: "controller makes no volumes", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(nil, nil, four...)}}, drives: []string{"d2", "d3"}, reason: metalv1alpha1.ReasonRootVolumeUnsupported},
		{name: "any, controller makes no volumes", layout: bmc.StorageLayout{Controllers: []bmc.StorageController{ctl(nil, nil, four...)}}, reason: metalv1alpha1.ReasonRootVolumeUnsupported},
		{name: "SimpleStorage only", layout: bmc.StorageLayout{}, reason: metalv1alpha1.ReasonRootVolumeUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := planRootVolume(tc.layout, metalv1alpha1.RootVolume{RAIDType: "RAID1", Drives: tc.drives})
			if tc.reason != "" {
				if reason, _ := lifecycle.ReasonOf(err); reason != tc.reason {
					t.Fatalf("err %v (reason %q), want reason %s", err, reason, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if plan.existingID != tc.existing || strings.Join(plan.drives, ",") != strings.Join(tc.make, ",") {
				t.Fatalf("plan %+v, want existing %q, make %v", plan, tc.existing, tc.make)
			}
		})
	}
}

// A claim asking a RAID1 root volume: the first pass requests it and powers nothing; the next,
// finding it, boots and powers on, so the volume is there before the power-on. A controller
// without volume support gets the condition and no action at all.
func TestRootVolumeBeforePowerOn(t *testing.T) {
	var b *redfish.BMC
	for b == nil {
		c := fleet.Take(t)
		if c.Vendor() != "hpe" && len(c.Systems()[0].Volumes()) == 1 && len(c.Systems()[0].Disks()) >= 4 {
			b = c
		}
	}
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOff)
	name := "rootvol"
	claim := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rv-claim"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "os:1"}}
	sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rv-claim", UID: "sbc-uid"},
		Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: name}, Image: "os:1",
			// Drives 0 and 1 carry the machine's own OS volume: the other two are named.
			RootVolume: &metalv1alpha1.RootVolume{RAIDType: "RAID1", Drives: []string{sys.Disks()[2].ID, sys.Disks()[3].Serial}}},
		Status: metalv1alpha1.ServerBootConfigurationStatus{State: metalv1alpha1.ServerBootConfigurationStateReady}}
	s := cleaningServer(name, sys.UUID(), map[string]string{lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateReserved)})
	s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Namespace: "default", Name: "rv-claim"}
	s.Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Namespace: "default", Name: "rv-claim"}
	c := metaltest.FakeClient(s, claim, sbc)
	run := func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
		res, err := r.reserved(bctx, ctx, p)
		if reason, ok := lifecycle.ReasonOf(err); ok {
			// What stateStep makes of a reasoned failure: a calm look again.
			return lifecycle.RequeueAfter(time.Second, reason), nil
		}
		return res, err
	}

	b.SetFaults(redfish.Faults{NoVolumes: true})
	_, acts := onePass(t, b, c, testOpts, name, metalv1alpha1.ServerStateReserved, run)
	if len(acts) != 0 || len(sys.Volumes()) != 1 {
		t.Fatalf("a controller without volume support: actions %v, volumes %d", acts, len(sys.Volumes()))
	}
	b.ClearFaults()

	_, acts = onePass(t, b, c, testOpts, name, metalv1alpha1.ServerStateReserved, run)
	vols := sys.Volumes()
	if len(acts) != 0 || len(vols) != 2 || vols[1].RAIDType != "RAID1" || len(vols[1].Drives) != 2 {
		t.Fatalf("first pass: actions %v (want none before the volume shows), volumes %+v", acts, vols)
	}
	start := time.Now()
	_, acts = onePass(t, b, c, testOpts, name, metalv1alpha1.ServerStateReserved, run)
	if strings.Join(acts, ",") != "Boot:Pxe/Once,On" || len(sys.Volumes()) != 2 {
		t.Fatalf("second pass: actions %v, volumes %d", acts, len(sys.Volumes()))
	}
	if !vols[1].Created.Before(start) {
		t.Fatal("the volume was made after the power-on")
	}
}
