package server

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/cleaning"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// The BMC erases a system when every drive is covered: by its own SecureErase, else by the
// Slow Initialize of the volume it is in (once per volume); one drive it cannot erase, or no
// drives at all, leaves the cleaning to the agent.
func TestPlanBMCErase(t *testing.T) {
	d := func(id string, erases bool) bmc.StorageDrive {
		dr := bmc.StorageDrive{ID: id, ODataID: "/S/1/Drives/" + id}
		if erases {
			dr.SecureEraseTarget = dr.ODataID + "/Actions/Drive.SecureErase"
		}
		return dr
	}
	vol := func(id string, types []string, drives ...string) bmc.StorageVolume {
		v := bmc.StorageVolume{ID: id, ODataID: "/S/1/Volumes/" + id, InitializeTarget: "/S/1/Volumes/" + id + "/Actions/Volume.Initialize", InitializeTypes: types}
		for _, x := range drives {
			v.Drives = append(v.Drives, "/S/1/Drives/"+x)
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		ctl    bmc.StorageController
		want   string // steps as method:what, or the reason's start
		refuse bool
	}{
		{"every drive erases itself", bmc.StorageController{ID: "1", Drives: []bmc.StorageDrive{d("0", true), d("1", true)}},
			"RedfishSecureErase:drive 0 RedfishSecureErase:drive 1", false},
		{"a mirror initialized once for both its drives", bmc.StorageController{ID: "1", Drives: []bmc.StorageDrive{d("0", false), d("1", false), d("2", true)},
			Volumes: []bmc.StorageVolume{vol("V0", []string{"Fast", "Slow"}, "0", "1")}},
			"RedfishVolumeInitialize:volume V0 RedfishSecureErase:drive 2", false},
		{"a volume that only initializes Fast does not erase", bmc.StorageController{ID: "1", Drives: []bmc.StorageDrive{d("0", false)},
			Volumes: []bmc.StorageVolume{vol("V0", []string{"Fast"}, "0")}}, "drive 0 of storage controller 1 has no SecureErase", true},
		{"a loose drive without SecureErase", bmc.StorageController{ID: "1", Drives: []bmc.StorageDrive{d("0", true), d("1", false)}},
			"drive 1 of storage controller 1", true},
		{"no drives", bmc.StorageController{ID: "1"}, "the BMC shows no drives", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, why := planBMCErase(bmc.StorageLayout{Controllers: []bmc.StorageController{tc.ctl}})
			if tc.refuse {
				if why == "" || !strings.HasPrefix(why, tc.want) || steps != nil {
					t.Fatalf("steps %v, why %q; want refused with %q", steps, why, tc.want)
				}
				return
			}
			var got []string
			n := 0
			for _, st := range steps {
				got = append(got, st.method+":"+st.what)
				n += len(st.drives)
				if st.method == cleaning.MethodBMCVolumeInitialize && st.initType != "Slow" {
					t.Errorf("%s initialized %q", st.what, st.initType)
				}
			}
			if why != "" || strings.Join(got, " ") != tc.want || n != len(tc.ctl.Drives) {
				t.Fatalf("steps %v covering %d of %d drives (why %q), want %s", got, n, len(tc.ctl.Drives), why, tc.want)
			}
		})
	}
}

// takeWhere reserves the next emulated BMC ok accepts.
func takeWhere(t *testing.T, ok func(*redfish.BMC) bool) *redfish.BMC {
	t.Helper()
	for {
		if b := fleet.Take(t); ok(b) {
			return b
		}
	}
}

// cleanByBMC runs Cleaning passes with --cleaning-bmc-erase until the server leaves Cleaning
// (or 200 passes), and returns it and the box's actions.
func cleanByBMC(t *testing.T, b *redfish.BMC, name string) (*metalv1alpha1.Server, []string, client.Client) {
	t.Helper()
	sys := b.Systems()[0]
	c := metaltest.FakeClient(cleaningServer(name, sys.UUID(), map[string]string{serverstate.CleaningAnnotation: "AllDisks",
		lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateCleaning)}))
	opts := cleaningOpts(metalv1alpha1.CleaningPolicyAllDisks)
	opts.CleaningBMCErase = true
	var acts []string
	for range 200 {
		s, a := onePass(t, b, c, opts, name, metalv1alpha1.ServerStateCleaning, runCleaning)
		acts = append(acts, a...)
		if s.Annotations[lifecycle.StateAnnotation] != string(metalv1alpha1.ServerStateCleaning) || s.Annotations[discovery.RoundAnnotation] != "" {
			return s, acts, c
		}
	}
	t.Fatal("still Cleaning after 200 passes")
	return nil, nil, nil
}

// A BMC that erases every drive itself cleans without the agent: the box powered off, one
// SecureErase per drive, each once, the record's entry written by the controller with every
// drive, and Available with a summary that says the proof is the BMC's word.
func TestCleaningThroughTheBMC(t *testing.T) {
	b := takeWhere(t, func(b *redfish.BMC) bool { return b.Vendor() != "hpe" && len(b.Systems()[0].Volumes()) == 1 })
	b.SetFaults(redfish.Faults{EraseDuration: redfish.Duration(20 * time.Millisecond)})
	t.Cleanup(b.ClearFaults)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOn)
	s, acts, c := cleanByBMC(t, b, "bmc-clean")
	if st := s.Annotations[lifecycle.StateAnnotation]; st != string(metalv1alpha1.ServerStateAvailable) {
		t.Fatalf("state %s (failure %q)", st, s.Annotations[serverstate.CleaningFailedAnnotation])
	}
	want := []string{"ForceOff"}
	for _, d := range sys.Disks() {
		want = append(want, "SecureErase:")
		if n := sys.Erasures()[d.ID]; n != 1 {
			t.Errorf("drive %s erased %d times", d.ID, n)
		}
	}
	if strings.Join(acts, ",") != strings.Join(want, ",") {
		t.Errorf("BMC actions %v, want %v", acts, want)
	}
	if !strings.Contains(s.Annotations[serverstate.LastCleaningAnnotation], "erased by the BMC") {
		t.Errorf("summary %q", s.Annotations[serverstate.LastCleaningAnnotation])
	}
	for _, k := range []string{serverstate.CleaningAnnotation, serverstate.CleaningRoundAnnotation, serverstate.CleaningTasksAnnotation} {
		if _, ok := s.Annotations[k]; ok {
			t.Errorf("%s left: %v", k, s.Annotations)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx(), client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: cleaning.ObjectName("bmc-clean")}, cm); err != nil {
		t.Fatal(err)
	}
	rec, err := cleaning.Decode(cm)
	if err != nil || len(rec.Cleanings) != 1 || len(rec.Cleanings[0].Disks) != len(sys.Disks()) {
		t.Fatalf("record %+v, %v", rec, err)
	}
	for _, d := range rec.Cleanings[0].Disks {
		if d.Proof == nil || string(d.Proof.Method) != cleaning.MethodBMCSecureErase || d.Proof.Samples != 0 {
			t.Errorf("disk %s proof %+v", d.Name, d.Proof)
		}
	}
}

// Drives without SecureErase in a mirror the BMC initializes Slow are erased by that; an erase
// task that ends in an exception puts the server in Error naming what failed; a BMC that
// cannot erase every drive leaves the cleaning to the agent, which is booted.
func TestCleaningThroughTheBMCFallsBackOrFails(t *testing.T) {
	t.Run("initialize", func(t *testing.T) {
		b := takeWhere(t, func(b *redfish.BMC) bool {
			return b.Vendor() != "hpe" && len(b.Systems()[0].Volumes()) == 1 && len(b.Systems()[0].Disks()) == 2
		})
		b.SetFaults(redfish.Faults{NoSecureErase: true, EraseDuration: redfish.Duration(20 * time.Millisecond)})
		t.Cleanup(b.ClearFaults)
		b.Systems()[0].SetPowerState(redfish.PowerOff)
		s, acts, _ := cleanByBMC(t, b, "bmc-init")
		if st := s.Annotations[lifecycle.StateAnnotation]; st != string(metalv1alpha1.ServerStateAvailable) || strings.Join(acts, ",") != "InitializeVolume:" {
			t.Fatalf("state %s, actions %v", st, acts)
		}
		if n := b.Systems()[0].Initializations()["Volume0"]; n != 1 {
			t.Fatalf("Volume0 initialized %d times", n)
		}
	})
	t.Run("fails", func(t *testing.T) {
		b := takeWhere(t, func(b *redfish.BMC) bool { return b.Vendor() != "hpe" && len(b.Systems()[0].Volumes()) == 1 })
		b.SetFaults(redfish.Faults{EraseFails: true, EraseDuration: redfish.Duration(20 * time.Millisecond)})
		t.Cleanup(b.ClearFaults)
		b.Systems()[0].SetPowerState(redfish.PowerOff)
		s, _, _ := cleanByBMC(t, b, "bmc-fail")
		why := s.Annotations[serverstate.CleaningFailedAnnotation]
		if st := s.Annotations[lifecycle.StateAnnotation]; st != string(metalv1alpha1.ServerStateError) || !strings.Contains(why, "RedfishSecureErase of drive ") {
			t.Fatalf("state %s, failure %q", st, why)
		}
		if s.Annotations[serverstate.CleaningAnnotation] != "AllDisks" {
			t.Fatalf("the mark went: %v", s.Annotations)
		}
	})
	t.Run("agent", func(t *testing.T) {
		b := takeWhere(t, func(b *redfish.BMC) bool { return b.Vendor() != "hpe" && len(b.Systems()[0].Disks()) >= 3 })
		b.SetFaults(redfish.Faults{NoSecureErase: true})
		t.Cleanup(b.ClearFaults)
		b.Systems()[0].SetPowerState(redfish.PowerOff)
		s, acts, _ := cleanByBMC(t, b, "bmc-agent")
		round, ok := parseCleaningRound(s.Annotations[serverstate.CleaningRoundAnnotation])
		if !ok || isBMCRound(round) || strings.Join(acts, ",") != "Boot:Pxe/Once,On" {
			t.Fatalf("round %q, actions %v: want the agent booted", s.Annotations[serverstate.CleaningRoundAnnotation], acts)
		}
	})
}
