package server

import (
	"fmt"
	"testing"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
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
