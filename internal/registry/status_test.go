package registry

import (
	"reflect"
	"strings"
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

func TestAccelerators(t *testing.T) {
	for _, tc := range []struct {
		d    probe.PCIDevice
		want bool
	}{
		{probe.PCIDevice{Vendor: "10de", Class: "030200"}, true},  // NVIDIA 3D controller (A100, H100)
		{probe.PCIDevice{Vendor: "10de", Class: "030000"}, true},  // NVIDIA VGA (workstation cards)
		{probe.PCIDevice{Vendor: "1002", Class: "038000"}, true},  // AMD Instinct
		{probe.PCIDevice{Vendor: "8086", Class: "120000"}, true},  // processing accelerator (Gaudi)
		{probe.PCIDevice{Vendor: "1a03", Class: "030000"}, false}, // ASPEED BMC VGA
		{probe.PCIDevice{Vendor: "102b", Class: "030000"}, false}, // Matrox (iLO, iDRAC)
		{probe.PCIDevice{Vendor: "15b3", Class: "020000"}, false}, // a NIC
	} {
		if got := accelerator(tc.d); got != tc.want {
			t.Errorf("%+v: accelerator %v, want %v", tc.d, got, tc.want)
		}
	}
}

func TestInventoryLabels(t *testing.T) {
	a100 := probe.PCIDevice{Address: "0000:81:00.0", Vendor: "10de", Device: "20b2", Class: "030200", VendorName: "NVIDIA Corporation", DeviceName: "GA100 [A100 SXM4 80GB]"}
	h100 := probe.PCIDevice{Address: "0000:82:00.0", Vendor: "10de", Device: "2330", Class: "030200", VendorName: "NVIDIA Corporation", DeviceName: "GH100 [H100 SXM5 80GB]"}
	vga := probe.PCIDevice{Address: "0000:02:00.0", Vendor: "1a03", Device: "2000", Class: "030000"}
	unnamed := probe.PCIDevice{Address: "0000:83:00.0", Vendor: "10de", Device: "20b2", Class: "030200"}
	for _, tc := range []struct {
		name string
		pci  []probe.PCIDevice
		want map[string]string
	}{
		{"none", []probe.PCIDevice{vga}, map[string]string{metalv1alpha1.GPUCountLabel: "0", metalv1alpha1.GPUModelLabel: "", metalv1alpha1.GPUIDLabel: "", metalv1alpha1.GPUVendorLabel: ""}},
		{"two alike", []probe.PCIDevice{vga, a100, a100}, map[string]string{metalv1alpha1.GPUCountLabel: "2",
			metalv1alpha1.GPUModelLabel: "ga100-a100-sxm4-80gb", metalv1alpha1.GPUIDLabel: "10de-20b2", metalv1alpha1.GPUVendorLabel: "nvidia-corporation"}},
		{"mixed", []probe.PCIDevice{a100, h100}, map[string]string{metalv1alpha1.GPUCountLabel: "2",
			metalv1alpha1.GPUModelLabel: "mixed", metalv1alpha1.GPUIDLabel: "mixed", metalv1alpha1.GPUVendorLabel: "nvidia-corporation"}},
		{"no pci.ids", []probe.PCIDevice{unnamed}, map[string]string{metalv1alpha1.GPUCountLabel: "1",
			metalv1alpha1.GPUModelLabel: "", metalv1alpha1.GPUIDLabel: "10de-20b2", metalv1alpha1.GPUVendorLabel: ""}},
	} {
		got := inventoryLabels(&probe.Report{PCIDevices: tc.pci})
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if v := labelValue(strings.Repeat("Very Long Model Name ", 5)); len(v) > 63 || strings.HasSuffix(v, "-") {
		t.Errorf("labelValue: %q", v)
	}
}

func TestPCISummary(t *testing.T) {
	r := &probe.Report{PCIDevices: []probe.PCIDevice{
		{Address: "0000:81:00.0", Vendor: "10de", Device: "20b2", Class: "030200", VendorName: "NVIDIA Corporation", DeviceName: "GA100 [A100 SXM4 80GB]"},
		{Address: "0000:3b:00.0", Vendor: "15b3", Device: "101d", Class: "020000"},
		{Address: "0000:82:00.0", Vendor: "10de", Device: "20b2", Class: "030200", VendorName: "NVIDIA Corporation", DeviceName: "GA100 [A100 SXM4 80GB]"},
		{Address: "0000:3b:00.1", Vendor: "15b3", Device: "101d", Class: "020000"},
		{Address: "0000:00:00.0"}, // unreadable IDs: left out
	}}
	want := []metalv1alpha1.PCIDeviceSummary{
		{Class: "020000", VendorID: "15b3", DeviceID: "101d", Count: 2},
		{Class: "030200", VendorID: "10de", DeviceID: "20b2", Vendor: "NVIDIA Corporation", Model: "GA100 [A100 SXM4 80GB]", Count: 2},
	}
	if got := pciSummary(r); !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// A report without PCI functions (an old agent) leaves what status has.
	st := metalv1alpha1.ServerStatus{PCIDevices: want}
	applyReport(&st, &probe.Report{})
	if !reflect.DeepEqual(st.PCIDevices, want) {
		t.Fatalf("an empty section erased the summary: %+v", st.PCIDevices)
	}
}
