package metal

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func TestDesiredBootOrder(t *testing.T) {
	options := []bmc.BootEntry{{Ref: "Boot0000", Name: "PXE"}, {Ref: "Boot0001", Name: "Disk"}, {Ref: "Boot0002", Name: "CD"}}
	current := []string{"Boot0000", "Boot0001", "Boot0002"}
	for _, tc := range []struct {
		name    string
		entries []metalv1alpha1.BootOrder
		want    string
		missing string
	}{
		{"by device", []metalv1alpha1.BootOrder{{Name: "x", Priority: 1, Device: "Boot0002"}}, "[Boot0002 Boot0000 Boot0001]", "[]"},
		{"by priority, not by place", []metalv1alpha1.BootOrder{{Device: "Boot0000", Priority: 5}, {Device: "Boot0001", Priority: 1}}, "[Boot0001 Boot0000 Boot0002]", "[]"},
		{"by name when the device is none", []metalv1alpha1.BootOrder{{Name: "disk", Priority: 1, Device: "sda"}}, "[Boot0001 Boot0000 Boot0002]", "[]"},
		{"unknown entry left out", []metalv1alpha1.BootOrder{{Name: "usb", Priority: 1, Device: "Boot0009"}, {Device: "Boot0002", Priority: 2}}, "[Boot0002 Boot0000 Boot0001]", "[Boot0009]"},
		{"twice the same option", []metalv1alpha1.BootOrder{{Device: "Boot0001", Priority: 1}, {Name: "Disk", Priority: 2}}, "[Boot0001 Boot0000 Boot0002]", "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, missing := desiredBootOrder(tc.entries, options, current)
			if fmt.Sprint(got) != tc.want || fmt.Sprint(missing) != tc.missing {
				t.Fatalf("got %v missing %v, want %s missing %s", got, missing, tc.want, tc.missing)
			}
		})
	}
}

// spec.bootOrder reaches the BMC once and status reports the order the BMC has.
func TestBootOrderApplied(t *testing.T) {
	b := takeBMC(t)
	name := registerBMC(t, b, "bootorder")
	waitState(t, name, metalv1alpha1.ServerStateAvailable, 30*time.Second)
	start := time.Now()
	editServer(t, name, func(s *metalv1alpha1.Server) {
		s.Spec.BootOrder = []metalv1alpha1.BootOrder{{Name: "cd", Priority: 1, Device: "Boot0002"}, {Name: "Hard Disk: Internal RAID", Priority: 2}}
	})
	want := []string{"Boot0002", "Boot0001", "Boot0000", "Boot0003"}
	eventually(t, 15*time.Second, "boot order reported", func() (bool, string) {
		s := getServer(t, name)
		return slices.Equal(s.Status.BootOrder, want), fmt.Sprint(s.Status.BootOrder)
	})
	if got := systemOf(b).BootOrder(); !slices.Equal(got, want) {
		t.Fatalf("BMC order %v", got)
	}
	annotate(t, name, "touch", "1") // another pass sends nothing
	eventually(t, 5*time.Second, "pass seen", func() (bool, string) {
		return getServer(t, name).Annotations["touch"] == "1", ""
	})
	var writes int
	for _, r := range since(records(b), start) {
		if r.Action == redfish.ActionBootOrder {
			writes++
		}
	}
	if writes != 1 {
		t.Errorf("%d boot order writes, want 1", writes)
	}
}
