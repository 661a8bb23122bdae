package probe

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// lldpSingle is lldpctl -f json with one neighbour: interfaces are an object keyed by name.
const lldpSingle = `{
  "lldp": {
    "interface": {
      "eth0": {
        "via": "LLDP", "rid": "1", "age": "0 day, 00:00:13",
        "chassis": {
          "leaf-01.example.com": {
            "id": {"type": "mac", "value": "00:1c:73:aa:bb:cc"},
            "descr": "Arista Networks EOS version 4.28.3M",
            "mgmt-ip": ["10.0.0.1", "fe80::21c:73ff:feaa:bbcc"],
            "capability": [{"type": "Bridge", "enabled": true}, {"type": "Router", "enabled": true}]
          }
        },
        "port": {
          "id": {"type": "ifname", "value": "Ethernet12"},
          "descr": "server-12 eno1",
          "ttl": "120"
        }
      }
    }
  }
}`

// lldpMulti has two interfaces and two neighbours on eno1: the interface list becomes an array
// of single-key objects, and one chassis has no system name.
const lldpMulti = `{"lldp": {"interface": [
  {"eno1": {"via": "LLDP", "chassis": {"leaf-01": {"id": {"type": "mac", "value": "00:1c:73:00:00:01"}, "descr": "EOS"}},
            "port": {"id": {"type": "ifname", "value": "Ethernet1"}, "descr": "to server"}}},
  {"eno1": {"via": "LLDP", "chassis": {"id": {"type": "local", "value": "some-id"}, "descr": ["first", "second"]},
            "port": {"id": {"type": "mac", "value": "02:00:00:00:00:01"}}}},
  {"eno2": {"via": "LLDP", "chassis": {"leaf-02": {"id": {"type": "mac", "value": "00:1c:73:00:00:02"}}},
            "port": {"id": {"type": "ifname", "value": "Ethernet2"}, "ttl": 120}}}
]}}`

func TestParseLLDP(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string][]Neighbor
		wantErr bool
	}{
		{"one neighbour", lldpSingle, map[string][]Neighbor{"eth0": {{
			ChassisID: "00:1c:73:aa:bb:cc", ChassisIDType: "mac", SystemName: "leaf-01.example.com",
			SystemDescription: "Arista Networks EOS version 4.28.3M",
			PortID:            "Ethernet12", PortIDType: "ifname", PortDescription: "server-12 eno1",
		}}}, false},
		{"several interfaces and neighbours", lldpMulti, map[string][]Neighbor{
			"eno1": {
				{ChassisID: "00:1c:73:00:00:01", ChassisIDType: "mac", SystemName: "leaf-01", SystemDescription: "EOS",
					PortID: "Ethernet1", PortIDType: "ifname", PortDescription: "to server"},
				{ChassisID: "some-id", ChassisIDType: "local", SystemDescription: "first",
					PortID: "02:00:00:00:00:01", PortIDType: "mac"},
			},
			"eno2": {{ChassisID: "00:1c:73:00:00:02", ChassisIDType: "mac", SystemName: "leaf-02",
				PortID: "Ethernet2", PortIDType: "ifname"}},
		}, false},
		{"no neighbours", `{"lldp": {}}`, map[string][]Neighbor{}, false},
		{"lldpd with nothing to say", `{"lldp": [{}]}`, map[string][]Neighbor{}, false},
		{"empty output", "", nil, false},
		{"not JSON", "lldpctl: cannot connect", nil, true},
		{"interface of the wrong type", `{"lldp": {"interface": 3}}`, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLLDP([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLLDPCommand(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "lldpctl")
	// A stand-in lldpctl that insists on the JSON format, as the real one would print text otherwise.
	body := "#!/bin/sh\n[ \"$1 $2\" = \"-f json\" ] || { echo bad args >&2; exit 2; }\ncat <<'END'\n" + lldpSingle + "\nEND\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	live := sysfs{root: "/"}
	t.Run("on PATH", func(t *testing.T) {
		t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		got, err := collectLLDP(context.Background(), live, Options{Root: "/", LLDPCommand: "lldpctl"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got["eth0"]) != 1 || got["eth0"][0].PortID != "Ethernet12" {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("absent", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		got, err := collectLLDP(context.Background(), live, Options{Root: "/", LLDPCommand: "lldpctl"})
		if err != nil || got != nil {
			t.Fatalf("got %v, %v; want no neighbours and no error", got, err)
		}
	})
	t.Run("failing", func(t *testing.T) {
		bad := filepath.Join(dir, "broken")
		if err := os.WriteFile(bad, []byte("#!/bin/sh\necho no lldpd >&2\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := collectLLDP(context.Background(), live, Options{Root: "/", LLDPCommand: bad}); err == nil {
			t.Fatal("want an error from a failing lldpctl")
		}
	})
	t.Run("fixture root never runs lldpctl", func(t *testing.T) {
		t.Setenv("PATH", dir)
		got, err := collectLLDP(context.Background(), fixtureFS(t, map[string]string{"sys/<dir>": "<dir>"}), Options{Root: "/x", LLDPCommand: "lldpctl"})
		if err != nil || got != nil {
			t.Fatalf("got %v, %v", got, err)
		}
	})
}
