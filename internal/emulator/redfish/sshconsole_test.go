package redfish_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

// output collects what a reader yields so a test can wait for a string with a deadline instead
// of sleeping.
type output struct {
	chunks chan []byte
	seen   strings.Builder
}

func collect(r io.Reader) *output {
	o := &output{chunks: make(chan []byte, 64)}
	go func() {
		defer close(o.chunks)
		for {
			buf := make([]byte, 1024)
			n, err := r.Read(buf)
			if n > 0 {
				o.chunks <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return o
}

// waitFor reads until want appears (after what earlier calls consumed) and returns everything
// seen so far.
func (o *output) waitFor(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(o.seen.String(), want) {
		select {
		case c, ok := <-o.chunks:
			if !ok {
				t.Fatalf("output ended before %q; got %q", want, o.seen.String())
			}
			o.seen.Write(c)
		case <-deadline:
			t.Fatalf("no %q within 10s; got %q", want, o.seen.String())
		}
	}
	s := o.seen.String()
	o.seen.Reset()
	_, after, _ := strings.Cut(s, want)
	o.seen.WriteString(after)
	return s
}

// waitEnd reads until the stream ends.
func (o *output) waitEnd(t *testing.T) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c, ok := <-o.chunks:
			if !ok {
				return o.seen.String()
			}
			o.seen.Write(c)
		case <-deadline:
			t.Fatalf("output did not end within 10s; got %q", o.seen.String())
		}
	}
}

func sshDial(t *testing.T, e *redfish.Emulator, b *redfish.BMC, user, password string) (*ssh.Client, error) {
	t.Helper()
	c, err := ssh.Dial("tcp", b.SSHAddress(), &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{ssh.Password(password)},
		HostKeyCallback: ssh.FixedHostKey(e.SSHHostKey()), Timeout: 10 * time.Second,
	})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

type sshSession struct {
	*ssh.Session
	stdin          io.WriteCloser
	stdout, stderr *output
}

func openSession(t *testing.T, c *ssh.Client, pty bool) *sshSession {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if pty {
		if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
			t.Fatalf("pty-req: %v", err)
		}
	}
	in, _ := s.StdinPipe()
	out, _ := s.StdoutPipe()
	errOut, _ := s.StderrPipe()
	return &sshSession{Session: s, stdin: in, stdout: collect(out), stderr: collect(errOut)}
}

func TestSSHConsoleExec(t *testing.T) {
	e := start(t, redfish.Options{BMCs: 2, SystemsPerBMC: 2, SSHConsole: true, Seed: 7})
	b := e.BMC(1)
	if b.SSHAddress() == "" || e.SSHHostKey() == nil {
		t.Fatalf("console off: address %q, host key %v", b.SSHAddress(), e.SSHHostKey())
	}
	if b.SSHAddress() == e.BMC(0).SSHAddress() {
		t.Fatalf("two BMCs share the console address %s", b.SSHAddress())
	}
	id := b.SystemIDs()[1]
	user, pw := b.Credentials()
	c, err := sshDial(t, e, b, user, pw)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	s := openSession(t, c, true)
	if err := s.Start("console " + id); err != nil {
		t.Fatalf("exec: %v", err)
	}
	log := s.stdout.waitFor(t, "\r\n"+id+" login: ")
	sys := b.System(id)
	for _, want := range []string{"BIOS Version " + sys.BIOSVersion(), "System " + id, "Booting Linux", "\r\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("boot log lacks %q:\n%s", want, log)
		}
	}
	if _, err := io.WriteString(s.stdin, "hellx\x7fo\r"); err != nil {
		t.Fatal(err)
	}
	s.stdout.waitFor(t, "hellx\b \bo\r\n"+id+" login: ")
	if err := s.Close(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("close: %v", err)
	}
}

func TestSSHConsoleRefusals(t *testing.T) {
	e := start(t, redfish.Options{SSHConsole: true})
	b := e.BMC(0)
	user, pw := b.Credentials()
	if _, err := sshDial(t, e, b, user, pw+"x"); err == nil {
		t.Fatal("wrong password accepted")
	}
	c, err := sshDial(t, e, b, user, pw)
	if err != nil {
		t.Fatal(err)
	}

	s := openSession(t, c, false)
	err = s.Run("console NoSuchSystem")
	var exit *ssh.ExitError
	if !errors.As(err, &exit) || exit.ExitStatus() != 1 {
		t.Fatalf("unknown system: %v", err)
	}
	if msg := s.stderr.waitEnd(t); !strings.Contains(msg, "no system") {
		t.Errorf("unknown system message %q", msg)
	}

	s = openSession(t, c, false)
	if err := s.Run("reboot now"); !errors.As(err, &exit) || exit.ExitStatus() != 127 {
		t.Fatalf("unknown command: %v", err)
	}
	if msg := s.stderr.waitEnd(t); !strings.Contains(msg, "command not found") {
		t.Errorf("unknown command message %q", msg)
	}
}

func TestSSHConsoleShellPrompt(t *testing.T) {
	e := start(t, redfish.Options{SSHConsole: true})
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	user, pw := b.Credentials()
	c, err := sshDial(t, e, b, user, pw)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, c, true)
	if err := s.Shell(); err != nil {
		t.Fatal(err)
	}
	s.stdout.waitFor(t, "bmc> ")
	_, _ = io.WriteString(s.stdin, "frobnicate\r")
	s.stdout.waitFor(t, "frobnicate: command not found")
	s.stdout.waitFor(t, "bmc> ")
	_, _ = io.WriteString(s.stdin, "console "+id+"\r")
	s.stdout.waitFor(t, id+" login: ")
	_, _ = io.WriteString(s.stdin, "root\r")
	s.stdout.waitFor(t, "root\r\n"+id+" login: ")

	// A second session of the same connection gets its own prompt and can leave.
	s2 := openSession(t, c, true)
	if err := s2.Shell(); err != nil {
		t.Fatal(err)
	}
	s2.stdout.waitFor(t, "bmc> ")
	_, _ = io.WriteString(s2.stdin, "exit\r")
	if err := s2.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

func TestSSHConsoleOffAndClose(t *testing.T) {
	off := start(t, redfish.Options{})
	if off.BMC(0).SSHAddress() != "" || off.SSHHostKey() != nil {
		t.Fatal("console on without Options.SSHConsole")
	}

	e, err := redfish.Start(redfish.Options{SSHConsole: true})
	if err != nil {
		t.Fatal(err)
	}
	b := e.BMC(0)
	user, pw := b.Credentials()
	c, err := sshDial(t, e, b, user, pw)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, c, true)
	if err := s.Start("console " + b.SystemIDs()[0]); err != nil {
		t.Fatal(err)
	}
	s.stdout.waitFor(t, " login: ")
	// Close must end the attached session (it waits for every console goroutine).
	closed := make(chan struct{})
	go func() { _ = e.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs with an open console session")
	}
	s.stdout.waitEnd(t)
	if conn, err := net.DialTimeout("tcp", b.SSHAddress(), time.Second); err == nil {
		conn.Close()
		t.Fatal("console still listening after Close")
	}
}

func TestSSHConsoleResources(t *testing.T) {
	for _, on := range []bool{true, false} {
		e := start(t, redfish.Options{SSHConsole: on})
		b := e.BMC(0)
		id := b.SystemIDs()[0]
		_, sys := do(t, b, call{method: "GET", path: "/redfish/v1/Systems/" + id, basic: true})
		sc, _ := sys["SerialConsole"].(map[string]any)
		sshc, _ := sc["SSH"].(map[string]any)
		if sshc["ServiceEnabled"] != on {
			t.Fatalf("SSHConsole %v: system SerialConsole %v", on, sc)
		}
		if !on {
			if _, ok := sshc["Port"]; ok {
				t.Errorf("console off, yet a port: %v", sshc)
			}
			continue
		}
		_, port, _ := net.SplitHostPort(b.SSHAddress())
		if got := sshc["Port"]; fmt.Sprint(got) != port {
			t.Errorf("SSH port %v, console at %s", got, b.SSHAddress())
		}
		if sshc["ConsoleEntryCommand"] != "console "+id || sshc["SharedWithManagerCLI"] != true || sshc["HotKeySequenceDisplay"] == "" {
			t.Errorf("system SSH console %v", sshc)
		}
		if ipmi, _ := sc["IPMI"].(map[string]any); ipmi["ServiceEnabled"] != false {
			t.Errorf("IPMI %v", sc["IPMI"])
		}
		_, mgrs := do(t, b, call{method: "GET", path: "/redfish/v1/Managers", basic: true})
		mp := mgrs["Members"].([]any)[0].(map[string]any)["@odata.id"].(string)
		_, mgr := do(t, b, call{method: "GET", path: mp, basic: true})
		msc, _ := mgr["SerialConsole"].(map[string]any)
		if msc["ServiceEnabled"] != true || fmt.Sprint(msc["ConnectTypesSupported"]) != "[SSH]" {
			t.Errorf("manager SerialConsole %v", msc)
		}
	}
}

func TestSSHConsoleWithListenAt(t *testing.T) {
	e, err := redfish.New(redfish.Options{SSHConsole: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	b := e.BMC(0)
	if err := b.ListenAt("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	user, pw := b.Credentials()
	c, err := sshDial(t, e, b, user, pw)
	if err != nil {
		t.Fatalf("console of a BMC started by ListenAt: %v", err)
	}
	s := openSession(t, c, true)
	if err := s.Start("console " + b.SystemIDs()[0]); err != nil {
		t.Fatal(err)
	}
	s.stdout.waitFor(t, " login: ")
}
