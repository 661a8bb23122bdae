package netboot

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/probe"
)

func TestHardwareIsDeterministicAndDistinct(t *testing.T) {
	a1 := HardwareFor("4C4C4544-0000-0000-0000-000000000001", "S1", nil)
	a2 := HardwareFor("4c4c4544-0000-0000-0000-000000000001", "S1", nil)
	if !reflect.DeepEqual(a1, a2) {
		t.Fatal("same UUID, different hardware")
	}
	seen := map[string]string{}
	for i := range 50 {
		uuid := fmt.Sprintf("4c4c4544-0000-0000-0000-%012d", i)
		for _, n := range HardwareFor(uuid, "", nil).NICs {
			if other, dup := seen[n.MAC]; dup {
				t.Fatalf("MAC %s of %s also on %s", n.MAC, uuid, other)
			}
			seen[n.MAC] = uuid
		}
	}
	withBMC := HardwareFor("x", "", []string{"B0:26:28:00:00:01", "B0:26:28:00:00:02"})
	if len(withBMC.NICs) != 2 || withBMC.NICs[0].MAC != "b0:26:28:00:00:01" || !withBMC.NICs[0].Up {
		t.Fatalf("NICs %+v: want the BMC's MACs, the PXE NIC up", withBMC.NICs)
	}
}

// The probe, reading the tree, sees exactly the generated machine.
// Every NIC that is up has an LLDP neighbour, and no two NICs of a machine share a switch port:
// a ServerWiring written for an emulated server tells its NICs apart.
func TestNICsCabledToPortsOfTheirOwn(t *testing.T) {
	for i := range 50 {
		h := HardwareFor(fmt.Sprintf("4c4c4544-0000-0000-0000-%012d", i), "S", nil)
		ports := map[string]string{}
		for _, n := range h.NICs {
			if !n.Up {
				if n.Switch != "" || n.Port != "" {
					t.Errorf("%s: %s is down but has neighbour %s %s", h.UUID, n.Name, n.Switch, n.Port)
				}
				continue
			}
			if n.Switch == "" || n.Port == "" {
				t.Errorf("%s: %s is up without a neighbour", h.UUID, n.Name)
			}
			key := n.Switch + " " + n.Port
			if other, ok := ports[key]; ok {
				t.Errorf("%s: %s and %s both on %s", h.UUID, other, n.Name, key)
			}
			ports[key] = n.Name
		}
	}
}

func TestTreeReadsBackThroughTheProbe(t *testing.T) {
	for _, uuid := range []string{"11111111-0000-0000-0000-000000000001", "22222222-0000-0000-0000-000000000002", "33333333-0000-0000-0000-000000000003"} {
		hw := HardwareFor(uuid, "SER-"+uuid[:4], nil)
		root := t.TempDir()
		if err := hw.WriteTree(root); err != nil {
			t.Fatal(err)
		}
		r, err := probe.Collect(context.Background(), probe.Options{Root: root})
		if err != nil {
			t.Fatal(err)
		}
		threads, cores := 0, 0
		for _, c := range r.CPUs {
			threads += c.Threads
			cores += c.Cores
			if c.Model != hw.CPUModel || c.MaxMHz != hw.MaxMHz {
				t.Errorf("%s: cpu %+v", uuid, c)
			}
		}
		if len(r.CPUs) != hw.Sockets || threads != hw.Threads() || cores != hw.Sockets*hw.CoresPerSocket {
			t.Errorf("%s: cpus %+v, want %d sockets x %d cores x %d threads", uuid, r.CPUs, hw.Sockets, hw.CoresPerSocket, hw.ThreadsPerCore)
		}
		if r.MemoryBytes != hw.MemoryKiB*1024 || r.System.UUID != uuid || r.System.Serial != hw.Serial {
			t.Errorf("%s: memory %d system %+v", uuid, r.MemoryBytes, r.System)
		}
		if len(r.NICs) != len(hw.NICs) || len(r.BlockDevices) != len(hw.Disks) {
			t.Fatalf("%s: %d NICs %d disks, want %d %d", uuid, len(r.NICs), len(r.BlockDevices), len(hw.NICs), len(hw.Disks))
		}
		for i, n := range hw.NICs {
			got := r.NICs[i]
			if got.MAC != n.MAC || (got.Carrier == "up") != n.Up || (n.Up && (len(got.IPs) != 1 || len(got.Neighbors) != 1 || got.Neighbors[0].PortID != n.Port)) {
				t.Errorf("%s: NIC %+v, want %+v", uuid, got, n)
			}
		}
		for i, d := range hw.Disks {
			if got := r.BlockDevices[i]; got.Serial != d.Serial || d.Serial == "" || got.Model != d.Model || got.Rotational != d.Rotational || got.SizeBytes != d.Sectors*512 {
				t.Errorf("%s: disk %+v, want %+v", uuid, got, d)
			}
		}
		for i, n := range r.NICs {
			if n.PCIAddress != fmt.Sprintf("0000:%02x:00.0", 0x10+i) || n.Driver != "mlx5_core" {
				t.Errorf("%s: NIC %s at %q driven by %q", uuid, n.Name, n.PCIAddress, n.Driver)
			}
		}
		// The accelerators, named from the tree's pci.ids; the BMC's VGA is on the bus too.
		var gpus, vga int
		for _, d := range r.PCIDevices {
			switch {
			case d.Vendor == "1a03":
				vga++
				if d.DeviceName != "ASPEED Graphics Family" || d.Driver != "ast" {
					t.Errorf("%s: BMC VGA %+v", uuid, d)
				}
			case strings.HasPrefix(d.Address, "0000:8"):
				g := hw.GPUs[gpus]
				gpus++
				if d.Vendor != g.Vendor || d.Device != g.Device || d.Driver != g.Driver || d.DeviceName == "" || d.VendorName == "" {
					t.Errorf("%s: GPU %+v, want %+v with names", uuid, d, g)
				}
			case d.Vendor == "15b3" && d.DeviceName != "MT2892 Family [ConnectX-6 Dx]":
				t.Errorf("%s: NIC function %+v not named", uuid, d)
			}
		}
		if gpus != len(hw.GPUs) || vga != 1 {
			t.Errorf("%s: %d GPUs and %d VGA on the bus, want %d and 1", uuid, gpus, vga, len(hw.GPUs))
		}
		r.SystemUUID = uuid
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", uuid, err)
		}
	}
}

// Across a fleet, some machines carry accelerators and some do not.
func TestFleetHasGPUsAndMachinesWithout(t *testing.T) {
	with, without := 0, 0
	for i := range 20 {
		if len(HardwareFor(fmt.Sprintf("4c4c4544-0000-0000-0000-%012d", i), "", nil).GPUs) > 0 {
			with++
		} else {
			without++
		}
	}
	if with == 0 || without == 0 {
		t.Fatalf("%d machines with GPUs, %d without: want both", with, without)
	}
}

func TestParseIgnition(t *testing.T) {
	want := discovery.Params{RegistryURL: "http://127.0.0.1:8082", ServerUUID: "38947555-7742-3448-3784-823347823834", Token: "0123abcd", ProbeImage: "img"}
	rendered, err := discovery.RenderIgnition(want, "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"default template", string(rendered), ""},
		{"Ignition JSON with a data URL", `{"ignition": {"version": "3.3.0"}, "systemd": {"units": [{"name": "p.service",
			"contents": "[Service]\nExecStart=/bin/metalprobe --registry-url http://127.0.0.1:8082 --server-uuid=38947555-7742-3448-3784-823347823834 --token-file=/run/t\n"}]},
			"storage": {"files": [{"path": "/run/t", "contents": {"source": "data:,0123abcd%0A"}}]}}`, ""},
		{"base64 data URL and a drop-in", `{"systemd": {"units": [{"name": "p.service", "dropins": [{"name": "x.conf",
			"contents": "ExecStart=metalprobe --registry-url=http://127.0.0.1:8082 --server-uuid=38947555-7742-3448-3784-823347823834 --token-file=/t"}]}]},
			"storage": {"files": [{"path": "/t", "contents": {"source": "data:;base64,MDEyM2FiY2Q="}}]}}`, ""},
		{"token on the command line", "systemd:\n  units:\n    - name: p.service\n      contents: \"ExecStart=/metalprobe --registry-url=http://127.0.0.1:8082 --server-uuid=38947555-7742-3448-3784-823347823834 --token=0123abcd\"\n", ""},
		{"no metalprobe", "variant: fcos\nversion: 1.3.0\n", "no metalprobe"},
		{"not YAML", "{{{", "parsing ignition"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseIgnition([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := want
			w.ProbeImage = "" // the image is the boot provider's business, not the agent's
			if got != w {
				t.Fatalf("got %+v, want %+v", got, w)
			}
		})
	}
}
