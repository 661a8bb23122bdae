package inventory

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

func hw(mutate ...func(*Hardware)) Hardware {
	gib := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<30, resource.BinarySI) }
	h := Hardware{
		Processors:        []metalv1alpha1.Processor{{ID: "CPU0", TotalThreads: 32}, {ID: "CPU1", TotalThreads: 32}},
		TotalSystemMemory: gib(512),
		NetworkInterfaces: []metalv1alpha1.NetworkInterface{{Name: "eno1", MACAddress: "02:00:00:00:00:01"}, {Name: "eno2", MACAddress: "02:00:00:00:00:02"}},
		Storages: []metalv1alpha1.Storage{{Name: "Local", Drives: []metalv1alpha1.StorageDrive{
			{Name: "nvme0n1", Model: "SAMSUNG", SerialNumber: "S1", Capacity: gib(960)},
			{Name: "sda", Capacity: gib(4000)},
		}}},
		BIOSVersion: "2.14.1",
		GPUs: []metalv1alpha1.GPU{
			{PCIAddress: "0000:41:00.0", VendorID: "10de", DeviceID: "20b2", Model: "A100"},
			{PCIAddress: "0000:42:00.0", VendorID: "10de", DeviceID: "20b2", Model: "A100"},
		},
	}
	for _, m := range mutate {
		m(&h)
	}
	return h
}

func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  Hardware
		want []string
	}{
		{"same", hw(), nil},
		{"IPs and link state change nothing", hw(func(h *Hardware) {
			h.NetworkInterfaces[0].IPs, h.NetworkInterfaces[0].CarrierStatus = []string{"10.0.0.1"}, "Down"
		}), nil},
		{"MAC case", hw(func(h *Hardware) { h.NetworkInterfaces[1].MACAddress = "02:00:00:00:00:02" }), nil},
		{"more hardware is no drift", hw(func(h *Hardware) {
			h.GPUs = append(h.GPUs, metalv1alpha1.GPU{PCIAddress: "0000:43:00.0", VendorID: "10de", DeviceID: "20b2"})
			h.TotalSystemMemory = resource.NewQuantity(768<<30, resource.BinarySI)
		}), nil},
		{"memory within the kernel's slack", hw(func(h *Hardware) {
			h.TotalSystemMemory = resource.NewQuantity(512<<30-200<<20, resource.BinarySI)
		}), nil},
		{"a GPU pulled", hw(func(h *Hardware) { h.GPUs = h.GPUs[:1] }), []string{"1 of 2 GPUs missing (0000:42:00.0 A100)"}},
		{"a GPU swapped for another model in its slot", hw(func(h *Hardware) { h.GPUs[1].DeviceID = "2330" }),
			[]string{"1 of 2 GPUs missing (0000:42:00.0 A100)"}},
		{"a NIC gone", hw(func(h *Hardware) { h.NetworkInterfaces = h.NetworkInterfaces[:1] }), []string{"NIC 02:00:00:00:00:02 (eno2) missing"}},
		{"drives by serial, else name and size", hw(func(h *Hardware) {
			h.Storages[0].Drives[0].Name = "nvme1n1" // renamed, same serial: the same drive
			h.Storages[0].Drives = h.Storages[0].Drives[:1]
		}), []string{"drive sda missing"}},
		{"a DIMM gone", hw(func(h *Hardware) { h.TotalSystemMemory = resource.NewQuantity(480<<30, resource.BinarySI) }),
			[]string{"memory 480Gi, was 512Gi"}},
		{"a socket's threads gone", hw(func(h *Hardware) { h.Processors = h.Processors[:1] }), []string{"CPU threads 32, was 64"}},
		{"a report without processors says nothing of threads", hw(func(h *Hardware) { h.Processors = nil }), nil},
		{"firmware changed", hw(func(h *Hardware) { h.BIOSVersion = "2.19.0" }), []string{"BIOS version 2.19.0, was 2.14.1"}},
		{"firmware unread says nothing", hw(func(h *Hardware) { h.BIOSVersion = "" }), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Missing(hw(), tc.now); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Missing = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	first, drift := Next(nil, hw(), "r1")
	if drift != "" || !reflect.DeepEqual(first.Baseline, hw()) || first.Round != "r1" {
		t.Fatalf("first discovery: drift %q, record %+v", drift, first)
	}
	less := hw(func(h *Hardware) { h.GPUs = h.GPUs[:1] })
	second, drift := Next(&first, less, "r2")
	if !strings.Contains(drift, "1 of 2 GPUs missing") {
		t.Fatalf("drift %q", drift)
	}
	if len(second.Baseline.GPUs) != 2 || len(second.Current.GPUs) != 1 {
		t.Fatalf("the baseline must stay while hardware is missing: %+v", second)
	}
	// Still missing on the next discovery: still drift, against the same baseline.
	third, drift := Next(&second, less, "r3")
	if drift == "" || len(third.Baseline.GPUs) != 2 {
		t.Fatalf("drift %q, baseline %d GPUs", drift, len(third.Baseline.GPUs))
	}
	// Accepted: the smaller inventory is the baseline, and the next discovery shows no drift.
	accepted := third.Accept()
	if _, drift := Next(&accepted, less, "r4"); drift != "" {
		t.Fatalf("after accept: drift %q", drift)
	}
	// The card put back: no drift, and the baseline grows with it.
	back, drift := Next(&third, hw(), "r5")
	if drift != "" || len(back.Baseline.GPUs) != 2 {
		t.Fatalf("card back: drift %q, baseline %+v", drift, back.Baseline.GPUs)
	}
}

func TestSummaryIsBounded(t *testing.T) {
	var many []string
	for range 200 {
		many = append(many, "NIC 02:00:00:00:00:02 (eno2) missing")
	}
	if s := Summary(many); len(s) > maxDrift || !strings.HasSuffix(s, "...") {
		t.Fatalf("summary of %d bytes", len(s))
	}
}

func TestRecordRoundTrip(t *testing.T) {
	rec, _ := Next(nil, hw(), "r1")
	cm, err := ConfigMap("metal-discovery", "server-1", rec)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "inventory-server-1" || cm.Labels[ServerLabel] != "server-1" {
		t.Fatalf("config map %s labels %v", cm.Name, cm.Labels)
	}
	got, err := Decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	if Missing(got.Baseline, hw()) != nil || Missing(hw(), got.Current) != nil || got.Round != "r1" {
		t.Fatalf("round trip lost something: %+v", got)
	}
	var st metalv1alpha1.ServerStatus
	got.Current.Restore(&st)
	if len(st.GPUs) != 2 || st.TotalSystemMemory.Cmp(*hw().TotalSystemMemory) != 0 || len(st.Storages[0].Drives) != 2 {
		t.Fatalf("restored status %+v", st)
	}
}

func TestFirmwareExplained(t *testing.T) {
	for _, tc := range []struct {
		dmi   string
		asked []string
		want  bool
	}{
		{"2.19.0", []string{"2.19.0"}, true},
		{"U46", []string{"U46 v2.72 (03/14/2023)"}, true},
		{"1.4.2 ", []string{"1.4.2"}, true},
		{"2.19.0", []string{"2.18.1", ""}, false},
		{"2.19.0", nil, false},
		{"", []string{""}, false},
	} {
		if got := FirmwareExplained(tc.dmi, tc.asked); got != tc.want {
			t.Errorf("FirmwareExplained(%q, %q) = %v, want %v", tc.dmi, tc.asked, got, tc.want)
		}
	}
}
