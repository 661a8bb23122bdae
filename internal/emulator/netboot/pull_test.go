package netboot

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPulledApply(t *testing.T) {
	var uuid string
	var h Hardware
	// A machine with GPUs, several NICs and disks (the fleet is generated from the UUID).
	for i := 0; ; i++ {
		uuid = "00000000-0000-0000-0000-" + strings.Repeat("0", 11) + string(rune('a'+i%26))
		if i >= 26 {
			t.Fatal("no generated machine with GPUs, 2+ NICs and 2+ disks")
		}
		if h = HardwareFor(uuid, "", nil); len(h.GPUs) > 1 && len(h.NICs) > 1 && len(h.Disks) > 1 {
			break
		}
	}
	for _, tc := range []struct {
		name              string
		p                 Pulled
		gpus, nics, disks int
	}{
		{"nothing", Pulled{}, len(h.GPUs), len(h.NICs), len(h.Disks)},
		{"one GPU", Pulled{GPUs: 1}, len(h.GPUs) - 1, len(h.NICs), len(h.Disks)},
		{"more than there are", Pulled{GPUs: 99, NICs: 99, Disks: 99}, 0, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.apply(h)
			if len(got.GPUs) != tc.gpus || len(got.NICs) != tc.nics || len(got.Disks) != tc.disks {
				t.Fatalf("%d GPUs, %d NICs, %d disks; want %d, %d, %d", len(got.GPUs), len(got.NICs), len(got.Disks), tc.gpus, tc.nics, tc.disks)
			}
			if len(got.NICs) > 0 && got.NICs[0].MAC != h.NICs[0].MAC {
				t.Fatal("the PXE NIC was pulled")
			}
		})
	}
	n := &Netboot{}
	srv := httptest.NewServer(n.ControlHandler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/emulator/machines/"+strings.ToUpper(uuid)+"/pulled", strings.NewReader(`{"gpus":1}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %s", resp.Status)
	}
	if got := n.hardware(uuid, "", nil); len(got.GPUs) != len(h.GPUs)-1 {
		t.Fatalf("after PUT: %d GPUs, want %d", len(got.GPUs), len(h.GPUs)-1)
	}
	req, _ = http.NewRequest(http.MethodPut, srv.URL+"/emulator/machines/"+uuid+"/pulled", strings.NewReader(`{"gpu":1}`))
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown field: %s", resp.Status)
	}
}
