package console

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

// Read does the work of bmc.BMC.SerialConsole.
func Read(ctx context.Context, c wire.Conn, systemID string) (Access, error) {
	op := "read serial console of " + systemID
	sys, err := c.System(ctx, systemID)
	if err != nil {
		return Access{}, wire.Wrap(op, err)
	}
	// gofish's SerialConsole is a value: only the raw body tells an absent SSH from a disabled one.
	var raw struct {
		SerialConsole *struct {
			SSH *struct{}
		}
	}
	_ = json.Unmarshal(sys.RawData, &raw)
	sc := sys.SerialConsole
	out := Access{IPMIEnabled: sc.IPMI.ServiceEnabled}
	if raw.SerialConsole != nil && raw.SerialConsole.SSH != nil {
		if out.SSHEnabled = sc.SSH.ServiceEnabled; out.SSHEnabled {
			out.Port = portOr(sc.SSH.Port)
		}
		out.EntryCommand, out.HotKeys = sc.SSH.ConsoleEntryCommand, sc.SSH.HotKeySequenceDisplay
		return out, nil
	}

	// Before ComputerSystem v1.13 only the manager says it has a serial console over SSH; the
	// port is its SSH service's.
	api, err := c.Client(ctx)
	if err != nil {
		return Access{}, wire.Wrap(op, err)
	}
	uri, err := systemManagerURI(c, api, sys)
	if err != nil {
		return Access{}, wire.Wrap(op, err)
	}
	m, err := schemas.GetObject[schemas.Manager](api, uri)
	if err != nil {
		return Access{}, wire.Wrap(op, err)
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
func systemManagerURI(c wire.Conn, api *gofish.APIClient, sys *schemas.ComputerSystem) (string, error) {
	if m := wire.ManagedBy(sys.RawData); m != "" {
		return m, nil
	}
	return wire.FirstManager(api, c.Root())
}

func portOr(p *uint) int {
	if p == nil || *p == 0 || *p > 65535 {
		return defaultSSHPort
	}
	return int(*p)
}

// Access is how a system's serial console is reached through its BMC.
type Access struct {
	// SSHEnabled says the BMC serves the console over SSH, at Port (on the BMC's host).
	SSHEnabled bool `json:"sshEnabled"`
	Port       int  `json:"port,omitempty"`
	// EntryCommand selects this system's console once logged in (e.g. "console com2"), where
	// the SSH service is shared with the manager CLI; "" when unsaid.
	EntryCommand string `json:"entryCommand,omitempty"`
	// HotKeys describes how to leave the console, as the BMC displays it.
	HotKeys string `json:"hotKeys,omitempty"`
	// IPMIEnabled says Serial-over-LAN is served too.
	IPMIEnabled bool `json:"ipmiEnabled,omitempty"`
}
