package registry

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/probe"
)

func TestPrimaryIP(t *testing.T) {
	tests := []struct {
		ips  []string
		want string
	}{
		{nil, ""},
		{[]string{"fe80::1", "10.0.0.5"}, "10.0.0.5"},
		{[]string{"fe80::1", "2001:db8::5", "192.168.1.1"}, "192.168.1.1"},
		{[]string{"fe80::1", "2001:db8::5"}, "2001:db8::5"},
		{[]string{"fe80::1"}, "fe80::1"},
	}
	for _, tc := range tests {
		if got := primaryIP(tc.ips); got != tc.want {
			t.Errorf("primaryIP(%v) = %q, want %q", tc.ips, got, tc.want)
		}
	}
}

func TestRedfishArchitecture(t *testing.T) {
	tests := map[string][2]string{
		"x86_64": {"x86", "x86-64"}, "aarch64": {"ARM", "ARM-A64"}, "ppc64le": {"Power", "PowerISA"},
		"riscv64": {"RISC-V", "RV64"}, "s390x": {"s390x", ""}, "": {"", ""},
	}
	for in, want := range tests {
		if a, i := redfishArchitecture(in); a != want[0] || i != want[1] {
			t.Errorf("%q: %q %q, want %q", in, a, i, want)
		}
	}
}

// A section the agent could not read keeps what is there: the BMC may have filled it.
func TestApplyReportKeepsUnreadSections(t *testing.T) {
	mem := resource.MustParse("64Gi")
	st := metalv1alpha1.ServerStatus{
		TotalSystemMemory: &mem,
		Processors:        []metalv1alpha1.Processor{{ID: "CPU.Socket.1"}},
		Storages:          []metalv1alpha1.Storage{{Name: "RAID.Integrated.1-1"}},
		PowerState:        metalv1alpha1.PowerState("On"),
	}
	applyReport(&st, &probe.Report{NICs: []probe.NIC{{Name: "eth0", MAC: "52:54:00:00:00:01"}}})
	if st.TotalSystemMemory.Cmp(mem) != 0 || st.Processors[0].ID != "CPU.Socket.1" || st.Storages[0].Name != "RAID.Integrated.1-1" {
		t.Fatalf("unread sections overwritten: %+v", st)
	}
	if len(st.NetworkInterfaces) != 1 || st.PowerState != "On" {
		t.Fatalf("status %+v", st)
	}
}
