// Package sshconsole is the emulated BMCs' SSH serial console: one host key and one listener
// per BMC, password login, a tiny manager CLI and "console <systemID>" attaching to a system's
// serial port (its boot log, then a login prompt echoing like a tty in cooked mode), and the
// SerialConsole bodies of the Redfish resources that advertise it.
//
// What it needs of a BMC comes through the BMC interface; it must not import the emulator
// package.
package sshconsole

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
	"golang.org/x/crypto/ssh"
)

// maxSessions is advertised as MaxConcurrentSessions (not enforced).
const maxSessions = 2

// handshakeTimeout bounds a client that connects and never speaks SSH.
const handshakeTimeout = 10 * time.Second

// BMC is what the console needs of one emulated BMC.
type BMC interface {
	// ValidLogin reports whether user and password open the BMC.
	ValidLogin(user, password string) bool
	// Describe names the BMC for the CLI's greeting: vendor, model and firmware.
	Describe() string
	// SystemIDs lists the BMC's systems.
	SystemIDs() []string
	// BootLog is what the system's serial port showed while it came up; false when the BMC
	// has no such system.
	BootLog(systemID string) (string, bool)
}

// Server is the emulator's SSH console service: its host key, and the listeners and
// connections kept so Close ends them. Their goroutines count in the emulator's WaitGroup.
type Server struct {
	wg  *sync.WaitGroup
	key ssh.Signer

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	closed    bool
}

// NewServer makes a console service with a fresh host key; its goroutines count in wg.
func NewServer(wg *sync.WaitGroup) (*Server, error) {
	k, err := newHostKey()
	if err != nil {
		return nil, err
	}
	return &Server{wg: wg, key: k}, nil
}

// HostKey is the host key every BMC's console presents.
func (e *Server) HostKey() ssh.PublicKey { return e.key.PublicKey() }

func newHostKey() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return ssh.NewSignerFromKey(priv)
}

// Listen opens the console listener of a BMC whose Redfish listener is on host; the system
// picks the port, so nothing can take it between choosing and listening.
func Listen(host string) (net.Listener, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen for SSH console: %w", err)
	}
	return l, nil
}

// Serve accepts b's console connections on l until the server closes.
func (e *Server) Serve(l net.Listener, b BMC) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		l.Close()
		return
	}
	e.listeners = append(e.listeners, l)
	e.wg.Add(1)
	e.mu.Unlock()
	cfg := &ssh.ServerConfig{
		PasswordCallback: func(m ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if b.ValidLogin(m.User(), string(pw)) {
				return nil, nil
			}
			return nil, errors.New("wrong user name or password")
		},
		ServerVersion: "SSH-2.0-BMC",
	}
	cfg.AddHostKey(e.key)
	go func() {
		defer e.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !e.track(c) {
				c.Close()
				return
			}
			go func() {
				defer e.wg.Done()
				defer e.untrack(c)
				e.conn(c, cfg, b)
			}()
		}
	}()
}

// track registers a connection so Close can end it (false once closing).
func (e *Server) track(c net.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	if e.conns == nil {
		e.conns = map[net.Conn]struct{}{}
	}
	e.conns[c] = struct{}{}
	e.wg.Add(1)
	return true
}

func (e *Server) untrack(c net.Conn) {
	c.Close()
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
}

// Close closes every console listener and connection; their goroutines then end.
func (e *Server) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	for _, l := range e.listeners {
		l.Close()
	}
	for c := range e.conns {
		c.Close()
	}
}

func (e *Server) conn(c net.Conn, cfg *ssh.ServerConfig, b BMC) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	defer func() {
		sc.Close()
		_ = sc.Wait()
	}()
	_ = c.SetDeadline(time.Time{})
	if !e.trackGoroutine() {
		return
	}
	go func() {
		defer e.wg.Done()
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
		if !e.trackGoroutine() {
			ch.Close()
			continue
		}
		go func() {
			defer e.wg.Done()
			e.session(ch, creqs, b)
		}()
	}
}

// trackGoroutine counts a goroutine in the emulator's WaitGroup unless the server is closing (then Wait may have
// started and must not see the count grow).
func (e *Server) trackGoroutine() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	return true
}

// session answers one session channel's requests; the first exec or shell runs, in its own
// goroutine, until it ends the channel.
func (e *Server) session(ch ssh.Channel, reqs <-chan *ssh.Request, b BMC) {
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
			if !e.trackGoroutine() {
				return
			}
			go func() {
				defer e.wg.Done()
				var code uint32
				if req.Type == "exec" {
					code = exec(ch, b, cmd.Command)
				} else {
					code = shell(ch, b)
				}
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{code}))
				ch.Close()
			}()
		default:
			_ = req.Reply(false, nil)
		}
	}
}

// exec runs one manager CLI command and returns its exit status.
func exec(ch ssh.Channel, b BMC, command string) uint32 {
	f := strings.Fields(command)
	if len(f) == 2 && f[0] == "console" {
		log, ok := b.BootLog(f[1])
		if !ok {
			fmt.Fprintf(ch.Stderr(), "console: no system %q on this BMC (systems: %s)\r\n", f[1], strings.Join(b.SystemIDs(), ", "))
			return 1
		}
		attach(ch, f[1], log)
		return 0
	}
	fmt.Fprintf(ch.Stderr(), "%s: command not found (try: console <systemID>)\r\n", command)
	return 127
}

// shell is the manager CLI prompt: it echoes what is typed, as a tty would, and runs each
// line on Enter.
func shell(ch ssh.Channel, b BMC) uint32 {
	const prompt = "bmc> "
	_, _ = io.WriteString(ch, "Connected to "+b.Describe()+"\r\n"+prompt)
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
				case len(f) == 2 && f[0] == "console":
					if log, ok := b.BootLog(f[1]); ok {
						attach(ch, f[1], log)
						return 0
					}
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

// attach is the system's serial port: a boot log, then a login prompt echoing what is
// typed until the client closes.
func attach(ch ssh.Channel, systemID, bootLog string) {
	login := "\r\n" + systemID + " login: "
	_, _ = io.WriteString(ch, bootLog+login)
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

// SystemBody is ComputerSystem.SerialConsole (v1.13): SSH shared with the manager CLI,
// entered with "console <systemID>".
func SystemBody(port int, systemID string) rfhttp.Obj {
	sshc := rfhttp.Obj{"ServiceEnabled": false}
	if port != 0 {
		sshc = rfhttp.Obj{
			"ServiceEnabled": true, "Port": port, "SharedWithManagerCLI": true,
			"ConsoleEntryCommand": "console " + systemID, "HotKeySequenceDisplay": "~. to exit",
		}
	}
	return rfhttp.Obj{"MaxConcurrentSessions": maxSessions, "SSH": sshc, "IPMI": rfhttp.Obj{"ServiceEnabled": false}}
}

// ManagerBody is Manager.SerialConsole: what clients that predate the systems' own
// SerialConsole read.
func ManagerBody(port int) rfhttp.Obj {
	return rfhttp.Obj{"ServiceEnabled": port != 0, "MaxConcurrentSessions": maxSessions, "ConnectTypesSupported": []string{"SSH"}}
}
