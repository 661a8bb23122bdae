package registry

import (
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/inventory"
	"github.com/metalhub/metalhub/internal/probe"
)

func withGPUs(r *probe.Report, n int) *probe.Report {
	for k := range n {
		r.PCIDevices = append(r.PCIDevices, probe.PCIDevice{Address: "0000:4" + string(rune('1'+k)) + ":00.0",
			Vendor: "10de", Device: "20b2", Class: "030200", DeviceName: "GA100 [A100 SXM4 80GB]", VendorName: "NVIDIA Corporation"})
	}
	return r
}

func record(t *testing.T, server string) *inventory.Record {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: inventory.ObjectName(server)}, cm); err != nil {
		t.Fatal(err)
	}
	rec, err := inventory.Decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// A discovery that finds less hardware than the one before raises the drift annotation (the
// InventoryDrift condition's source) with a Warning event; the baseline stays until the
// hardware is back, which clears the drift with a Normal event.
func TestInventoryDrift(t *testing.T) {
	r := startRegistry(t, nil)
	const uuid = "d71f0000-0000-0000-0000-000000000001"
	rd := newServerInDiscovery(t, r, "drift", uuid)
	report := func(rd *round, rep *probe.Report) *metalv1alpha1.Server {
		t.Helper()
		if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, rep)); code != http.StatusOK {
			t.Fatalf("report: %d %s", code, body)
		}
		return get(t, "drift")
	}
	srv := report(rd, withGPUs(sampleReport(uuid), 2))
	if d, ok := srv.Annotations[metalv1alpha1.InventoryDriftAnnotation]; ok {
		t.Fatalf("first discovery reported drift %q", d)
	}
	rec := record(t, "drift")
	if len(rec.Baseline.GPUs) != 2 || rec.Round != rd.id {
		t.Fatalf("record after the first discovery: %+v", rec)
	}

	// A GPU and a NIC pulled.
	rd2 := startNewRound(t, rd)
	less := withGPUs(sampleReport(uuid), 1)
	less.NICs = less.NICs[:1]
	srv = report(rd2, less)
	drift := srv.Annotations[metalv1alpha1.InventoryDriftAnnotation]
	if !strings.Contains(drift, "1 of 2 GPUs missing (0000:42:00.0 GA100 [A100 SXM4 80GB])") || !strings.Contains(drift, "NIC b0:26:28:00:00:02 (eno2) missing") {
		t.Fatalf("drift annotation %q", drift)
	}
	if len(srv.Status.GPUs) != 1 || srv.Labels[metalv1alpha1.GPUCountLabel] != "1" {
		t.Fatalf("status and labels show what is there now: %d GPUs, label %q", len(srv.Status.GPUs), srv.Labels[metalv1alpha1.GPUCountLabel])
	}
	waitEventOfType(t, corev1.EventTypeWarning, "drift", metalv1alpha1.ReasonHardwareMissing, func(note string) bool { return strings.Contains(note, "1 of 2 GPUs missing") })
	if rec := record(t, "drift"); len(rec.Baseline.GPUs) != 2 || len(rec.Current.GPUs) != 1 {
		t.Fatalf("the baseline must stay while hardware is missing: %+v", rec)
	}

	// Put back: the drift ends.
	rd3 := startNewRound(t, rd2)
	srv = report(rd3, withGPUs(sampleReport(uuid), 2))
	if d, ok := srv.Annotations[metalv1alpha1.InventoryDriftAnnotation]; ok {
		t.Fatalf("hardware back, drift still %q", d)
	}
	waitEventOfType(t, corev1.EventTypeNormal, "drift", metalv1alpha1.ReasonInventoryRestored, func(string) bool { return true })
}

// A record left by an earlier Server of the same name (its garbage collection not done yet) is
// not the new server's baseline.
func TestInventoryRecordOfFormerServer(t *testing.T) {
	r := startRegistry(t, nil)
	const uuid = "d71f0000-0000-0000-0000-000000000002"
	old, err := inventory.ConfigMap(namespace, "reborn", inventory.Record{Round: "old",
		Baseline: inventory.Hardware{GPUs: []metalv1alpha1.GPU{{PCIAddress: "0000:99:00.0", VendorID: "10de", DeviceID: "20b2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	old.OwnerReferences = []metav1.OwnerReference{{APIVersion: "metal.ironcore.dev/v1alpha1", Kind: "Server", Name: "reborn", UID: types.UID("11111111-former")}}
	if err := env.Client.Create(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	rd := newServerInDiscovery(t, r, "reborn", uuid)
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, sampleReport(uuid))); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
	srv := get(t, "reborn")
	if d, ok := srv.Annotations[metalv1alpha1.InventoryDriftAnnotation]; ok {
		t.Fatalf("drift %q against a former server's record", d)
	}
	rec := record(t, "reborn")
	if rec.Round != rd.id || len(rec.Baseline.GPUs) != 0 {
		t.Fatalf("record %+v", rec)
	}
}

// A server's first report creates its record without reading one (a bring-up's servers have
// none); a later discovery reads the record it compares with.
func TestFirstRecordReadsNothing(t *testing.T) {
	reads := &countingReader{reads: map[string]int{}}
	r := startRegistryReading(t, nil, func(rd client.Reader) client.Reader { reads.Reader = rd; return reads })
	const uuid = "d71f0000-0000-0000-0000-000000000004"
	rd := newServerInDiscovery(t, r, "first-record", uuid)
	if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, withGPUs(sampleReport(uuid), 2))); code != http.StatusOK {
		t.Fatalf("report: %d %s", code, body)
	}
	if n := reads.count(&corev1.ConfigMap{}); n != 0 {
		t.Errorf("%d live reads of the inventory record on the first report, want none", n)
	}
	if rec := record(t, "first-record"); rec.Round != rd.id || len(rec.Baseline.GPUs) != 2 {
		t.Fatalf("record after the first discovery: %+v", rec)
	}
	rd2 := startNewRound(t, rd)
	if code, body := post(t, r.url, "Bearer "+rd2.token, encode(t, withGPUs(sampleReport(uuid), 1))); code != http.StatusOK {
		t.Fatalf("second report: %d %s", code, body)
	}
	if n := reads.count(&corev1.ConfigMap{}); n != 1 {
		t.Errorf("%d live reads of the inventory record by the second discovery, want one", n)
	}
	if d := get(t, "first-record").Annotations[metalv1alpha1.InventoryDriftAnnotation]; !strings.Contains(d, "1 of 2 GPUs missing") {
		t.Errorf("the second discovery compared with no baseline: drift %q", d)
	}
}

// A BIOS version changed behind our back is drift; one a BIOSVersion of ours asked for is not.
func TestInventoryFirmwareDrift(t *testing.T) {
	r := startRegistry(t, nil)
	const uuid = "d71f0000-0000-0000-0000-000000000003"
	rd := newServerInDiscovery(t, r, "fwdrift", uuid)
	withBIOS := func(v string) *probe.Report {
		rep := sampleReport(uuid)
		rep.System.BIOSVersion = v
		return rep
	}
	report := func(rd *round, rep *probe.Report) string {
		t.Helper()
		if code, body := post(t, r.url, "Bearer "+rd.token, encode(t, rep)); code != http.StatusOK {
			t.Fatalf("report: %d %s", code, body)
		}
		return get(t, "fwdrift").Annotations[metalv1alpha1.InventoryDriftAnnotation]
	}
	if d := report(rd, withBIOS("2.14.1")); d != "" {
		t.Fatalf("first discovery: drift %q", d)
	}
	rd = startNewRound(t, rd)
	if d := report(rd, withBIOS("2.19.0")); d != "BIOS version 2.19.0, was 2.14.1" {
		t.Fatalf("firmware changed behind our back: drift %q", d)
	}
	// An upgrade of ours to 2.19.0 explains it: the next discovery finds no drift.
	v := &systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: "fwdrift-bios"},
		Spec: systemv1alpha1.BIOSVersionSpec{BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: "2.19.0",
			Image: systemv1alpha1.ImageSpec{URI: "http://images.example/bios-2.19.0.exe"}},
			ServerRef: &corev1.LocalObjectReference{Name: "fwdrift"}}}
	if err := env.Client.Create(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), v) })
	rd = startNewRound(t, rd)
	if d := report(rd, withBIOS("2.19.0")); d != "" {
		t.Fatalf("an upgrade of ours: drift %q", d)
	}
}
