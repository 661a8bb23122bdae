package redfish

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// The SSH serial console (Options.SSHConsole): what `metalhub console` and a plain ssh client
// meet on a real BMC — password login, a tiny manager CLI and "console <systemID>" attaching to
// a system's serial port, which here prints a boot log and echoes like a tty in cooked mode.

// sshMaxSessions is advertised as MaxConcurrentSessions (not enforced).
const sshMaxSessions = 2

// sshHandshakeTimeout bounds a client that connects and never speaks SSH.
const sshHandshakeTimeout = 10 * time.Second

// SSHHostKey is the host key every BMC's SSH console presents (one per emulator), nil when
// Options.SSHConsole is off.
func (e *Emulator) SSHHostKey() ssh.PublicKey {
	if e.hostKey == nil {
		return nil
	}
	return e.hostKey.PublicKey()
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

func newHostKey() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// listenSSH opens the console listener of a BMC whose Redfish listener is on host; the system
// picks the port, so nothing can take it between choosing and listening.
func (e *Emulator) listenSSH(host string) (net.Listener, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen for SSH console: %w", err)
	}
	return l, nil
}

// serveSSH accepts b's console connections on l until the emulator closes.
func (e *Emulator) serveSSH(b *BMC, l net.Listener) {
	addr := l.Addr().String()
	b.sshAddr.Store(&addr)
	e.sshMu.Lock()
	if e.sshClosed {
		e.sshMu.Unlock()
		l.Close()
		return
	}
	e.sshListeners = append(e.sshListeners, l)
	e.wg.Add(1)
	e.sshMu.Unlock()
	cfg := &ssh.ServerConfig{
		PasswordCallback: func(m ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if b.validLogin(m.User(), string(pw)) {
				return nil, nil
			}
			return nil, errors.New("wrong user name or password")
		},
		ServerVersion: "SSH-2.0-BMC",
	}
	cfg.AddHostKey(e.hostKey)
	go func() {
		defer e.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !e.trackSSH(c) {
				c.Close()
				return
			}
			go func() {
				defer e.wg.Done()
				defer e.untrackSSH(c)
				b.sshConn(c, cfg)
			}()
		}
	}()
}

// trackSSH registers a connection so Close can end it (false once closing).
func (e *Emulator) trackSSH(c net.Conn) bool {
	e.sshMu.Lock()
	defer e.sshMu.Unlock()
	if e.sshClosed {
		return false
	}
	if e.sshConns == nil {
		e.sshConns = map[net.Conn]struct{}{}
	}
	e.sshConns[c] = struct{}{}
	e.wg.Add(1)
	return true
}

func (e *Emulator) untrackSSH(c net.Conn) {
	c.Close()
	e.sshMu.Lock()
	delete(e.sshConns, c)
	e.sshMu.Unlock()
}

// closeSSH closes every console listener and connection; their goroutines then end.
func (e *Emulator) closeSSH() {
	e.sshMu.Lock()
	defer e.sshMu.Unlock()
	e.sshClosed = true
	for _, l := range e.sshListeners {
		l.Close()
	}
	for c := range e.sshConns {
		c.Close()
	}
}

func (b *BMC) sshConn(c net.Conn, cfg *ssh.ServerConfig) {
	_ = c.SetDeadline(time.Now().Add(sshHandshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer func() {
		sc.Close()
		_ = sc.Wait()
	}()
	_ = c.SetDeadline(time.Time{})
	if !b.em.trackGoroutine() {
		return
	}
	go func() {
		defer b.em.wg.Done()
		ssh.DiscardRequests(reqs) // ends with the connection
	}()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		if !b.em.trackGoroutine() {
			ch.Close()
			continue
		}
		go func() {
			defer b.em.wg.Done()
			b.sshSession(ch, creqs)
		}()
	}
}

// trackGoroutine counts a goroutine in e.wg unless the emulator is closing (then Wait may have
// started and must not see the count grow).
func (e *Emulator) trackGoroutine() bool {
	e.sshMu.Lock()
	defer e.sshMu.Unlock()
	if e.sshClosed {
		return false
	}
	e.wg.Add(1)
	return true
}

// sshSession answers one session channel's requests; the first exec or shell runs, in its own
// goroutine, until it ends the channel.
func (b *BMC) sshSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	started := false
	for req := range reqs {
		switch req.Type {
		case "pty-req", "window-change", "env":
			// The console is line-oriented: size and environment do not matter.
			_ = req.Reply(true, nil)
		case "exec", "shell":
			var cmd struct{ Command string }
			if req.Type == "exec" && ssh.Unmarshal(req.Payload, &cmd) != nil {
				_ = req.Reply(false, nil)
				continue
			}
			if started {
				_ = req.Reply(false, nil)
				continue
			}
			started = true
			_ = req.Reply(true, nil)
			if !b.em.trackGoroutine() {
				return
			}
			go func() {
				defer b.em.wg.Done()
				var code uint32
				if req.Type == "exec" {
					code = b.sshExec(ch, cmd.Command)
				} else {
					code = b.sshShell(ch)
				}
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
				ch.Close()
			}()
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// sshExec runs one manager CLI command and returns its exit status.
func (b *BMC) sshExec(ch ssh.Channel, command string) uint32 {
	f := strings.Fields(command)
	if len(f) == 2 && f[0] == "console" {
		s := b.byID[f[1]]
		if s == nil {
			fmt.Fprintf(ch.Stderr(), "console: no system %q on this BMC (systems: %s)\r\n", f[1], strings.Join(b.SystemIDs(), ", "))
			return 1
		}
		b.attachConsole(ch, s)
		return 0
	}
	fmt.Fprintf(ch.Stderr(), "%s: command not found (try: console <systemID>)\r\n", command)
	return 127
}

// sshShell is the manager CLI prompt: it echoes what is typed, as a tty would, and runs each
// line on Enter.
func (b *BMC) sshShell(ch ssh.Channel) uint32 {
	const prompt = "bmc> "
	_, _ = io.WriteString(ch, "Connected to "+b.profile.manufacturer+" "+b.mgrModel+" (firmware "+b.FirmwareVersion()+")\r\n"+prompt)
	var line []byte
	buf := make([]byte, 256)
	lastCR := false
	for {
		n, err := ch.Read(buf)
		for _, c := range buf[:n] {
			cr := lastCR
			lastCR = c == '\r'
			switch c {
			case '\r', '\n':
				if c == '\n' && cr {
					continue
				}
				_, _ = io.WriteString(ch, "\r\n")
				cmd := strings.TrimSpace(string(line))
				line = line[:0]
				f := strings.Fields(cmd)
				switch {
				case cmd == "":
				case cmd == "exit" || cmd == "quit":
					return 0
				case len(f) == 2 && f[0] == "console" && b.byID[f[1]] != nil:
					b.attachConsole(ch, b.byID[f[1]])
					return 0
				case len(f) == 2 && f[0] == "console":
					fmt.Fprintf(ch, "console: no system %q on this BMC (systems: %s)\r\n", f[1], strings.Join(b.SystemIDs(), ", "))
				default:
					fmt.Fprintf(ch, "%s: command not found (commands: console <systemID>, exit)\r\n", f[0])
				}
				_, _ = io.WriteString(ch, prompt)
			case 0x7f, '\b':
				if len(line) > 0 {
					line = line[:len(line)-1]
					_, _ = io.WriteString(ch, "\b \b")
				}
			case 0x03: // Ctrl-C drops the line
				line = line[:0]
				_, _ = io.WriteString(ch, "^C\r\n"+prompt)
			case 0x04: // Ctrl-D on an empty line logs out
				if len(line) == 0 {
					_, _ = io.WriteString(ch, "\r\n")
					return 0
				}
			default:
				line = append(line, c)
				_, _ = ch.Write([]byte{c})
			}
		}
		if err != nil {
			return 0
		}
	}
}

// attachConsole is the system's serial port: a boot log, then a login prompt echoing what is
// typed until the client closes.
func (b *BMC) attachConsole(ch ssh.Channel, s *System) {
	login := "\r\n" + s.hw.ID + " login: "
	_, _ = io.WriteString(ch, bootLog(s)+login)
	buf := make([]byte, 256)
	lineLen := 0
	lastCR := false
	for {
		n, err := ch.Read(buf)
		var out []byte
		for _, c := range buf[:n] {
			cr := lastCR
			lastCR = c == '\r'
			switch c {
			case '\r', '\n':
				if c == '\n' && cr {
					continue
				}
				out = append(out, login...)
				lineLen = 0
			case 0x7f, '\b':
				if lineLen > 0 {
					lineLen--
					out = append(out, "\b \b"...)
				}
			default:
				lineLen++
				out = append(out, c)
			}
		}
		if len(out) > 0 {
			if _, werr := ch.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
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
		fmt.Sprintf("Managed by %s %s, firmware %s", b.profile.manufacturer, b.mgrModel, b.FirmwareVersion()),
		fmt.Sprintf("%d CPU(s): %s", len(s.hw.CPUs), s.hw.CPUs[0].model),
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

// systemSerialConsole is ComputerSystem.SerialConsole (v1.13): SSH shared with the manager CLI,
// entered with "console <systemID>".
func (b *BMC) systemSerialConsole(systemID string) obj {
	sshc := obj{"ServiceEnabled": false}
	if port := b.sshPort(); port != 0 {
		sshc = obj{
			"ServiceEnabled": true, "Port": port, "SharedWithManagerCLI": true,
			"ConsoleEntryCommand": "console " + systemID, "HotKeySequenceDisplay": "~. to exit",
		}
	}
	return obj{"MaxConcurrentSessions": sshMaxSessions, "SSH": sshc, "IPMI": obj{"ServiceEnabled": false}}
}

// managerSerialConsole is Manager.SerialConsole: what clients that predate the systems' own
// SerialConsole read.
func (b *BMC) managerSerialConsole() obj {
	return obj{"ServiceEnabled": b.sshPort() != 0, "MaxConcurrentSessions": sshMaxSessions, "ConnectTypesSupported": []string{"SSH"}}
}
