package bmc_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func TestSerialConsoleFromSystem(t *testing.T) {
	for _, on := range []bool{true, false} {
		e := fleet(t, redfish.Options{BMCs: 5, SystemsPerBMC: 2, SSHConsole: on})
		p := pool(t, bmc.Options{})
		for _, b := range e.BMCs() {
			c := get(t, p, endpoint(b))
			id := b.SystemIDs()[1]
			sc, err := c.SerialConsole(context.Background(), id)
			if err != nil {
				t.Fatalf("%s: %v", b.Vendor(), err)
			}
			want := bmc.SerialConsole{}
			if on {
				_, port, _ := net.SplitHostPort(b.SSHAddress())
				n, _ := strconv.Atoi(port)
				want = bmc.SerialConsole{SSHEnabled: true, Port: n, EntryCommand: "console " + id, HotKeys: "~. to exit"}
			}
			if sc != want {
				t.Errorf("%s, console %v: got %+v, want %+v", b.Vendor(), on, sc, want)
			}
		}
	}
}

// TestSerialConsoleFromManager covers BMCs older than ComputerSystem v1.13: the manager's
// SerialConsole and its NetworkProtocol's SSH port.
func TestSerialConsoleFromManager(t *testing.T) {
	const mp = "/redfish/v1/Managers/BMC"
	base := map[string]any{
		"/redfish/v1/": map[string]any{
			"@odata.id": "/redfish/v1/", "Id": "RootService", "RedfishVersion": "1.6.0",
			"Systems": map[string]any{"@odata.id": "/redfish/v1/Systems"}, "Managers": map[string]any{"@odata.id": "/redfish/v1/Managers"},
			"SessionService": map[string]any{"@odata.id": "/redfish/v1/SessionService"},
			"Links":          map[string]any{"Sessions": map[string]any{"@odata.id": "/redfish/v1/SessionService/Sessions"}},
		},
		"/redfish/v1/SessionService": map[string]any{"@odata.id": "/redfish/v1/SessionService", "Id": "SessionService", "ServiceEnabled": true,
			"Sessions": map[string]any{"@odata.id": "/redfish/v1/SessionService/Sessions"}},
		"/redfish/v1/Systems": map[string]any{"@odata.id": "/redfish/v1/Systems", "Members": []any{map[string]any{"@odata.id": "/redfish/v1/Systems/S1"}}},
		"/redfish/v1/Systems/S1": map[string]any{"@odata.id": "/redfish/v1/Systems/S1", "Id": "S1", "PowerState": "On",
			"Links": map[string]any{"ManagedBy": []any{map[string]any{"@odata.id": mp}}}},
		"/redfish/v1/Managers": map[string]any{"@odata.id": "/redfish/v1/Managers", "Members": []any{map[string]any{"@odata.id": mp}}},
	}
	manager := func(types []string, np bool) map[string]any {
		m := map[string]any{"@odata.id": mp, "Id": "BMC", "SerialConsole": map[string]any{"ServiceEnabled": true, "ConnectTypesSupported": types}}
		if np {
			m["NetworkProtocol"] = map[string]any{"@odata.id": mp + "/NetworkProtocol"}
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		manager map[string]any
		np      any
		want    bmc.SerialConsole
	}{
		{"ssh at its NetworkProtocol port", manager([]string{"SSH", "IPMI"}, true),
			map[string]any{"@odata.id": mp + "/NetworkProtocol", "Id": "NetworkProtocol", "SSH": map[string]any{"ProtocolEnabled": true, "Port": 2222}},
			bmc.SerialConsole{SSHEnabled: true, Port: 2222, IPMIEnabled: true}},
		{"ssh without NetworkProtocol", manager([]string{"SSH"}, false), nil, bmc.SerialConsole{SSHEnabled: true, Port: 22}},
		{"only IPMI", manager([]string{"IPMI"}, true), nil, bmc.SerialConsole{IPMIEnabled: true}},
		{"no serial console", map[string]any{"@odata.id": mp, "Id": "BMC"}, nil, bmc.SerialConsole{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &mockup{resources: map[string]json.RawMessage{}}
			res := map[string]any{mp: tc.manager}
			if tc.np != nil {
				res[mp+"/NetworkProtocol"] = tc.np
			}
			for k, v := range base {
				res[k] = v
			}
			for k, v := range res {
				raw, _ := json.Marshal(v)
				m.resources[k] = raw
			}
			srv := httptest.NewServer(m)
			t.Cleanup(srv.Close)
			c := get(t, pool(t, bmc.Options{}), bmc.Endpoint{Address: srv.URL, Username: "root", Password: "secret"})
			sc, err := c.SerialConsole(context.Background(), "S1")
			if err != nil {
				t.Fatal(err)
			}
			if sc != tc.want {
				t.Errorf("got %+v, want %+v", sc, tc.want)
			}
		})
	}
}
