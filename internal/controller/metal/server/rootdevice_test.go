package server

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func drive(name, model, serial, wwn, media string, gib int64) metalv1alpha1.StorageDrive {
	return metalv1alpha1.StorageDrive{Name: name, Model: model, SerialNumber: serial, WWN: wwn, MediaType: media,
		Capacity: resource.NewQuantity(gib<<30, resource.BinarySI)}
}

var hintDrives = []metalv1alpha1.StorageDrive{
	drive("sda", "ST4000NM0035-1V4", "ZC1A", "naa.5000c500a1b2c3d4", "HDD", 3726),
	drive("nvme1n1", "SAMSUNG MZQL21T9HCJR", "S64B", "eui.0025388b11c2d3e4", "SSD", 1788),
	drive("nvme0n1", "SAMSUNG MZQL2960HCJR", "S64A", "eui.0025388b11c2d3e3", "SSD", 894),
	drive("sdb", "ST4000NM0035-1V4", "ZC1B", "", "HDD", 3726),
}

// Every hint given must hold; of several disks that match, the smallest is the root device.
func TestMatchRootDevice(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name  string
		hints metalv1alpha1.RootDeviceHints
		want  string // "" for none
	}{
		{"by name, /dev/ ignored", metalv1alpha1.RootDeviceHints{DeviceName: "/dev/nvme1n1"}, "nvme1n1"},
		{"by serial, any case", metalv1alpha1.RootDeviceHints{SerialNumber: "zc1b"}, "sdb"},
		{"by WWN without its authority", metalv1alpha1.RootDeviceHints{WWN: "5000C500A1B2C3D4"}, "sda"},
		{"by WWN with another authority", metalv1alpha1.RootDeviceHints{WWN: "naa.0025388b11c2d3e3"}, "nvme0n1"},
		{"model part picks the smallest", metalv1alpha1.RootDeviceHints{Model: "samsung"}, "nvme0n1"},
		{"size bound", metalv1alpha1.RootDeviceHints{Model: "SAMSUNG", MinSizeGigabytes: 1000}, "nvme1n1"},
		{"rotational, ties by name", metalv1alpha1.RootDeviceHints{Rotational: &yes}, "sda"},
		{"solid state", metalv1alpha1.RootDeviceHints{Rotational: &no, MinSizeGigabytes: 1000}, "nvme1n1"},
		{"all must hold", metalv1alpha1.RootDeviceHints{Model: "ST4000", Rotational: &no}, ""},
		{"a WWN the disk does not report", metalv1alpha1.RootDeviceHints{WWN: "naa.5000c500ffffffff"}, ""},
		{"too big for any", metalv1alpha1.RootDeviceHints{MinSizeGigabytes: 8000}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := matchRootDevice(hintDrives, tc.hints)
			if got := map[bool]string{true: d.Name}[ok]; got != tc.want {
				t.Fatalf("picked %q (found %v), want %q", d.Name, ok, tc.want)
			}
		})
	}
}

// The hints resolve against the inventory record (a wiped status loses nothing), the disk is
// reported in the boot configuration's status once, and hints no disk matches are the
// BootMethod condition's RootDeviceNotFound with the disks named.
func TestEnsureRootDevice(t *testing.T) {
	s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "rd-1"}}
	rec := inventory.Record{Current: inventory.Hardware{Storages: []metalv1alpha1.Storage{{Name: "Local", Drives: hintDrives}}}}
	cm, err := inventory.ConfigMap(testOpts.DiscoveryNamespace, s.Name, rec)
	if err != nil {
		t.Fatal(err)
	}
	sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c1"},
		Spec:   metalv1alpha1.ServerBootConfigurationSpec{RootDeviceHints: &metalv1alpha1.RootDeviceHints{SerialNumber: "S64B"}},
		Status: metalv1alpha1.ServerBootConfigurationStatus{State: metalv1alpha1.ServerBootConfigurationStateReady}}
	c := metaltest.FakeClient(s, cm, sbc)
	r := &Reconciler{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(10), Options: testOpts, Now: time.Now}
	pass := func() (*serverPass, *metalv1alpha1.ServerBootConfiguration, error) {
		got := &metalv1alpha1.ServerBootConfiguration{}
		if err := c.Get(ctx(), client.ObjectKeyFromObject(sbc), got); err != nil {
			t.Fatal(err)
		}
		p := &serverPass{Pass: &lifecycle.Pass[*metalv1alpha1.Server]{Obj: s.DeepCopy()}}
		err := r.ensureRootDevice(ctx(), p, got)
		if err := c.Get(ctx(), client.ObjectKeyFromObject(sbc), got); err != nil {
			t.Fatal(err)
		}
		return p, got, err
	}
	p, got, err := pass()
	if err != nil || p.bootProblem != nil {
		t.Fatalf("error %v, problem %+v", err, p.bootProblem)
	}
	if rd := got.Status.RootDevice; rd == nil || rd.Name != "nvme1n1" || rd.WWN != "eui.0025388b11c2d3e4" || rd.SizeBytes != 1788<<30 ||
		got.Status.State != metalv1alpha1.ServerBootConfigurationStateReady {
		t.Fatalf("status %+v", got.Status)
	}
	rv := got.ResourceVersion
	if _, again, err := pass(); err != nil || again.ResourceVersion != rv {
		t.Fatalf("a second pass wrote (rv %s -> %s) or failed: %v", rv, again.ResourceVersion, err)
	}

	got.Spec.RootDeviceHints = &metalv1alpha1.RootDeviceHints{Model: "PM1733"}
	if err := c.Update(ctx(), got); err != nil {
		t.Fatal(err)
	}
	p, _, err = pass()
	if reason, _ := lifecycle.ReasonOf(err); reason != metalv1alpha1.ReasonRootDeviceNotFound || p.bootProblem == nil ||
		p.bootProblem.reason != metalv1alpha1.ReasonRootDeviceNotFound {
		t.Fatalf("error %v, problem %+v", err, p.bootProblem)
	}
	if want := "no disk of the server (sda, nvme1n1, nvme0n1, sdb) matches"; len(p.bootProblem.message) < len(want) || p.bootProblem.message[:len(want)] != want {
		t.Fatalf("message %q", p.bootProblem.message)
	}
}
