package bmc

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// defaultSSHPort is where a BMC's SSH listens when it does not say.
const defaultSSHPort = 22

// SerialConsole implements BMC.
func (c *conn) SerialConsole(ctx context.Context, systemID string) (SerialConsole, error) {
	op := "read serial console of " + systemID
	sys, err := c.getSystem(ctx, systemID)
	if err != nil {
		return SerialConsole{}, wire.Wrap(op, err)
	}
	// gofish's SerialConsole is a value: only the raw body tells an absent SSH from a disabled one.
	var raw struct {
		SerialConsole *struct {
			SSH *struct{}
		}
	}
	_ = json.Unmarshal(sys.RawData, &raw)
	sc := sys.SerialConsole
	out := SerialConsole{IPMIEnabled: sc.IPMI.ServiceEnabled}
	if raw.SerialConsole != nil && raw.SerialConsole.SSH != nil {
		if out.SSHEnabled = sc.SSH.ServiceEnabled; out.SSHEnabled {
			out.Port = portOr(sc.SSH.Port)
		}
		out.EntryCommand, out.HotKeys = sc.SSH.ConsoleEntryCommand, sc.SSH.HotKeySequenceDisplay
		return out, nil
	}

	// Before ComputerSystem v1.13 only the manager says it has a serial console over SSH; the
	// port is its SSH service's.
	api, err := c.client(ctx)
	if err != nil {
		return SerialConsole{}, wire.Wrap(op, err)
	}
	uri, err := c.systemManagerURI(api, sys)
	if err != nil {
		return SerialConsole{}, wire.Wrap(op, err)
	}
	m, err := schemas.GetObject[schemas.Manager](api, uri)
	if err != nil {
		return SerialConsole{}, wire.Wrap(op, err)
	}
	types := m.SerialConsole.ConnectTypesSupported
	out.IPMIEnabled = out.IPMIEnabled || (m.SerialConsole.ServiceEnabled && slices.Contains(types, schemas.IPMISerialConnectTypesSupported))
	if !m.SerialConsole.ServiceEnabled || !slices.Contains(types, schemas.SSHSerialConnectTypesSupported) {
		return out, nil
	}
	out.SSHEnabled, out.Port = true, defaultSSHPort
	// The port is a nicety: a BMC without NetworkProtocol still listens on 22.
	if np, err := m.NetworkProtocol(); err == nil && np != nil {
		if np.SSH.ProtocolEnabled || np.SSH.Port != nil {
			out.Port = portOr(np.SSH.Port)
		}
	}
	return out, nil
}

// systemManagerURI is the manager that manages sys, else the service's first.
func (c *conn) systemManagerURI(api *gofish.APIClient, sys *schemas.ComputerSystem) (string, error) {
	if m := wire.ManagedBy(sys.RawData); m != "" {
		return m, nil
	}
	return wire.FirstManager(api, &c.root)
}

func portOr(p *uint) int {
	if p == nil || *p == 0 || *p > 65535 {
		return defaultSSHPort
	}
	return int(*p)
}
