package bmc_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
)

// mockup serves testdata/dmtf_mockup.json: DMTF mockup shapes (several
// systems, ActionInfo reset types, Storage vs SimpleStorage, a 307 to a UUID
// address, broken collections) that the emulator does not produce itself.
type mockup struct {
	mu        sync.Mutex
	resources map[string]json.RawMessage
	posts     []string // "path body"
	patches   []string
}

func serveMockup(t *testing.T) (*mockup, *httptest.Server) {
	t.Helper()
	raw, err := os.ReadFile("testdata/dmtf_mockup.json")
	if err != nil {
		t.Fatal(err)
	}
	m := &mockup{}
	if err := json.Unmarshal(raw, &m.resources); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

func (m *mockup) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path != "/redfish/v1/" {
		path = strings.TrimRight(path, "/")
	}
	body, _ := io.ReadAll(r.Body)
	if path == "/redfish/v1/SessionService/Sessions" && r.Method == http.MethodPost {
		w.Header().Set("X-Auth-Token", "mockup-token")
		w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
		w.WriteHeader(http.StatusCreated)
		return
	}
	if path != "/redfish/v1/" && r.Header.Get("X-Auth-Token") != "mockup-token" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		m.posts = append(m.posts, path+" "+string(body))
		w.WriteHeader(http.StatusNoContent)
		return
	case http.MethodPatch:
		m.patches = append(m.patches, path+" "+string(body))
		w.WriteHeader(http.StatusNoContent)
		return
	case http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
		return
	}
	res, ok := m.resources[path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	var meta struct {
		Redirect string `json:"@redirect"`
		Status   int    `json:"@status"`
	}
	_ = json.Unmarshal(res, &meta)
	switch {
	case meta.Redirect != "":
		http.Redirect(w, r, meta.Redirect, http.StatusTemporaryRedirect)
	case meta.Status != 0:
		w.WriteHeader(meta.Status)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(res)
	}
}

func TestDMTFMockupInventory(t *testing.T) {
	_, srv := serveMockup(t)
	p := pool(t, bmc.Options{})
	c := get(t, p, bmc.Endpoint{Address: srv.URL, Username: "root", Password: "secret"})
	ctx := context.Background()

	systems, err := c.Systems(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(systems) != 2 || systems[0].ID != "437XR1138R2" || systems[1].ID != "529QB9450R6" {
		t.Fatalf("systems %+v", systems)
	}

	inv, err := c.Inventory(ctx, "437XR1138R2")
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.FailedSections) != 0 {
		t.Fatalf("failed sections %+v", inv.FailedSections)
	}
	if inv.System.SKU != "8675309" || inv.System.BIOSVersion == "" || inv.System.UUID != "38947555-7742-3448-3784-823347823834" {
		t.Fatalf("system %+v", inv.System)
	}
	if len(inv.Processors) != 2 || inv.Processors[0].Cores != 8 || inv.Processors[0].Threads != 16 {
		t.Fatalf("processors (FPGA must be left out) %+v", inv.Processors)
	}
	if inv.Memory.TotalMiB != 3*32768 || inv.Memory.Modules != 3 {
		t.Fatalf("memory (absent DIMM must not count) %+v", inv.Memory)
	}
	if len(inv.NICs) != 2 || inv.NICs[0].MACAddress != "12:44:6a:3b:04:11" || !inv.NICs[0].Carrier ||
		inv.NICs[0].SpeedMbps != 1000 || inv.NICs[0].IPv4[0] != "192.0.2.10" || inv.NICs[1].Carrier || inv.NICs[1].MACAddress != "12:44:6a:3b:88:90" {
		t.Fatalf("nics %+v", inv.NICs)
	}
	if inv.Storage.Source != "Storage" || len(inv.Storage.Drives) != 2 || len(inv.Storage.Volumes) != 1 || inv.Storage.Volumes[0].RAIDType != "RAID1" {
		t.Fatalf("storage %+v", inv.Storage)
	}
	if inv.Manager == nil || inv.Manager.FirmwareVersion != "4.4.6521" || inv.Manager.MACAddress != "23:11:8a:33:cf:ea" {
		t.Fatalf("manager %+v", inv.Manager)
	}

	// Second system: reached through a 307, SimpleStorage only, Memory linked
	// but 404, Processors 501.
	inv, err = c.Inventory(ctx, "529QB9450R6")
	if err != nil {
		t.Fatal(err)
	}
	if inv.System.SerialNumber != "529QB9450R6" || inv.Storage.Source != "SimpleStorage" || len(inv.Storage.Drives) != 2 {
		t.Fatalf("inventory %+v", inv)
	}
	reasons := map[string]bmc.Reason{}
	for _, f := range inv.FailedSections {
		reasons[f.Section] = f.Reason
	}
	if reasons[bmc.SectionMemory] != bmc.ReasonNotFound || reasons[bmc.SectionProcessors] != bmc.ReasonUnsupported || len(reasons) != 2 {
		t.Fatalf("failed sections %+v", inv.FailedSections)
	}
	if inv.Memory.TotalMiB != 16*1024 || inv.System.ProcessorCount != 1 {
		t.Fatalf("summary fallbacks %+v %+v", inv.Memory, inv.System)
	}
}

func TestDMTFMockupActions(t *testing.T) {
	m, srv := serveMockup(t)
	p := pool(t, bmc.Options{})
	c := get(t, p, bmc.Endpoint{Address: srv.URL, Username: "root", Password: "secret"})
	ctx := context.Background()

	// ActionInfo allows GracefulRestart.
	if err := c.Power(ctx, "437XR1138R2", bmc.PowerRestart); err != nil {
		t.Fatal(err)
	}
	// Inline AllowableValues lack it: unsupported unless the caller allows force.
	if err := c.Power(ctx, "529QB9450R6", bmc.PowerRestart); !errors.Is(err, bmc.ErrUnsupported) {
		t.Fatalf("got %v, want Unsupported", err)
	}
	if err := c.Power(ctx, "529QB9450R6", bmc.PowerRestart, bmc.WithForceFallback()); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOnce(ctx, "437XR1138R2", bmc.BootPxe); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOnce(ctx, "529QB9450R6", bmc.BootPxe); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	want := []string{
		`/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset {"ResetType":"GracefulRestart"}`,
		`/redfish/v1/Systems/d4a4b7c2-1f0e-4c4e-9f39-3a1e0b8a5c77/Actions/ComputerSystem.Reset {"ResetType":"ForceRestart"}`,
	}
	if strings.Join(m.posts, "\n") != strings.Join(want, "\n") {
		t.Fatalf("posts:\n%s\nwant:\n%s", strings.Join(m.posts, "\n"), strings.Join(want, "\n"))
	}
	if len(m.patches) != 2 || !strings.Contains(m.patches[0], `"BootSourceOverrideMode":"UEFI"`) ||
		strings.Contains(m.patches[1], "BootSourceOverrideMode") || !strings.Contains(m.patches[1], `"BootSourceOverrideTarget":"Pxe"`) {
		t.Fatalf("patches %v", m.patches)
	}
}
