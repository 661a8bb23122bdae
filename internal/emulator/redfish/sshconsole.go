package redfish

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/metalhub/metalhub/internal/emulator/redfish/sshconsole"
	"golang.org/x/crypto/ssh"
)

// SSHHostKey is the host key every BMC's SSH console presents (one per emulator), nil when
// Options.SSHConsole is off.
func (e *Emulator) SSHHostKey() ssh.PublicKey {
	if e.ssh == nil {
		return nil
	}
	return e.ssh.HostKey()
}

// SSHAddress is the host:port of the BMC's SSH serial console, "" when Options.SSHConsole is off
// or before its Redfish listener started.
func (b *BMC) SSHAddress() string {
	if a := b.sshAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// sshPort is the console's port for the Redfish resources, 0 when there is none.
func (b *BMC) sshPort() int {
	_, p, err := net.SplitHostPort(b.SSHAddress())
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// serveSSH accepts b's console connections on l until the emulator closes.
func (e *Emulator) serveSSH(b *BMC, l net.Listener) {
	addr := l.Addr().String()
	b.sshAddr.Store(&addr)
	e.ssh.Serve(l, consoleBMC{b})
}

// consoleBMC is the BMC as its SSH console sees it.
type consoleBMC struct{ b *BMC }

func (c consoleBMC) ValidLogin(user, password string) bool { return c.b.validLogin(user, password) }
func (c consoleBMC) SystemIDs() []string                   { return c.b.SystemIDs() }

func (c consoleBMC) Describe() string {
	return c.b.profile.Manufacturer + " " + c.b.mgrModel + " (firmware " + c.b.FirmwareVersion() + ")"
}

func (c consoleBMC) BootLog(systemID string) (string, bool) {
	s := c.b.byID[systemID]
	if s == nil {
		return "", false
	}
	return bootLog(s), true
}

// bootLog is what the serial port showed while the system came up: firmware POST, the boot
// device, then the kernel.
func bootLog(s *System) string {
	b := s.bmc
	s.mu.Lock()
	boot, order, power := s.boot, append([]string(nil), s.bootOrder...), s.power
	s.mu.Unlock()
	bootFrom := "boot order " + strings.Join(order, ",")
	if boot.Enabled != "" && boot.Enabled != "Disabled" && boot.Target != "" && boot.Target != "None" {
		bootFrom = "boot override " + boot.Target + " (" + boot.Enabled + ")"
	}
	lines := []string{
		"",
		fmt.Sprintf("%s %s", s.hw.Manufacturer, s.hw.Model),
		fmt.Sprintf("BIOS Version %s", s.BIOSVersion()),
		fmt.Sprintf("System %s  UUID %s  Serial %s  (power %s)", s.hw.ID, s.UUID(), s.SerialNumber(), power),
		fmt.Sprintf("Managed by %s %s, firmware %s", b.profile.Manufacturer, b.mgrModel, b.FirmwareVersion()),
		fmt.Sprintf("%d CPU(s): %s", len(s.hw.CPUs), s.hw.CPUs[0].Model),
		"Initializing memory... done",
		"Booting from " + bootFrom,
		"Booting Linux on physical CPU 0x0",
		"[    0.000000] Linux version 6.1.0-metal (metalhub emulator)",
		"[    0.000000] Command line: console=ttyS0,115200n8",
		"[    2.418305] systemd[1]: Reached target Multi-User System.",
		"",
	}
	return strings.Join(lines, "\r\n")
}

// systemSerialConsole is ComputerSystem.SerialConsole (v1.13).
func (b *BMC) systemSerialConsole(systemID string) obj {
	return sshconsole.SystemBody(b.sshPort(), systemID)
}

// managerSerialConsole is Manager.SerialConsole.
func (b *BMC) managerSerialConsole() obj { return sshconsole.ManagerBody(b.sshPort()) }
