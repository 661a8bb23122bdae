package console_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/metalhub/metalhub/internal/console"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
)

func emulator(t *testing.T) *redfish.Emulator {
	t.Helper()
	e, err := redfish.Start(redfish.Options{BMCs: 2, SystemsPerBMC: 2, SSHConsole: true, PowerDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func target(b *redfish.BMC, entry string) console.Target {
	u, p := b.Credentials()
	return console.Target{Address: b.SSHAddress(), Username: u, Password: p, EntryCommand: entry}
}

func pinned(t *testing.T, e *redfish.Emulator) ssh.HostKeyCallback {
	t.Helper()
	cb, err := console.HostKeyCallback("", ssh.FingerprintSHA256(e.SSHHostKey()), false)
	if err != nil {
		t.Fatal(err)
	}
	return cb
}

func dial(t *testing.T, tg console.Target, cb ssh.HostKeyCallback) *console.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := console.Dial(ctx, tg, cb)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// output collects a reader so a test waits for a string, with a deadline, instead of sleeping.
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

// waitFor returns what was seen up to and including want; the rest stays for the next call.
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
	i := strings.Index(s, want) + len(want)
	o.seen.Reset()
	o.seen.WriteString(s[i:])
	return s[:i]
}

func (o *output) rest(t *testing.T) string {
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
			t.Fatalf("output did not end; got %q", o.seen.String())
		}
	}
}

// attach runs Attach in the background; its result arrives on the channel.
func attach(ctx context.Context, s *console.Session) (in *io.PipeWriter, out *output, result <-chan error, closeOut func()) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	res := make(chan error, 1)
	go func() { res <- s.Attach(ctx, inR, outW) }()
	return inW, collect(outR), res, func() { outW.Close() }
}

func waitResult(t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Attach did not return within 10s")
		return nil
	}
}

func TestAttachBootLogEchoAndEscape(t *testing.T) {
	e := emulator(t)
	b := e.BMC(1)
	id := b.SystemIDs()[1]
	s := dial(t, target(b, "console "+id), pinned(t, e))
	in, out, res, closeOut := attach(context.Background(), s)
	defer in.Close()

	log := out.waitFor(t, id+" login: ")
	for _, want := range []string{"Booting Linux", "BIOS Version " + b.System(id).BIOSVersion()} {
		if !strings.Contains(log, want) {
			t.Errorf("boot log lacks %q:\n%s", want, log)
		}
	}
	_, _ = io.WriteString(in, "hello\r")
	out.waitFor(t, "hello\r\n"+id+" login: ")
	// Resizing while attached sends window-change (the emulator accepts it).
	if err := s.Resize(132, 43); err != nil {
		t.Fatalf("resize: %v", err)
	}
	// A ~ mid-line is sent; after Enter, ~. escapes (what the escape sends is checked in
	// TestEscape: an echo racing the close would prove nothing here).
	_, _ = io.WriteString(in, "a~b\r")
	out.waitFor(t, "a~b\r\n"+id+" login: ")
	_, _ = io.WriteString(in, "~.")
	if err := waitResult(t, res); err != nil {
		t.Fatalf("escape: Attach returned %v", err)
	}
	closeOut()
	out.rest(t)
	if err := s.Attach(context.Background(), strings.NewReader(""), io.Discard); err == nil {
		t.Error("Attach after the escape closed the session worked")
	}
}

func TestAttachShellAndContext(t *testing.T) {
	e := emulator(t)
	b := e.BMC(0)
	id := b.SystemIDs()[0]
	s := dial(t, target(b, ""), pinned(t, e))
	ctx, cancel := context.WithCancel(context.Background())
	in, out, res, closeOut := attach(ctx, s)
	defer closeOut()
	defer in.Close()
	out.waitFor(t, "bmc> ")
	_, _ = io.WriteString(in, "console "+id+"\r")
	out.waitFor(t, id+" login: ")
	cancel()
	if err := waitResult(t, res); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Attach returned %v", err)
	}
}

func TestAttachEndsWhenTheBMCRefuses(t *testing.T) {
	e := emulator(t)
	b := e.BMC(0)
	s := dial(t, target(b, "console NoSuchSystem"), pinned(t, e))
	in, out, res, closeOut := attach(context.Background(), s)
	defer in.Close()
	err := waitResult(t, res)
	if err == nil || !strings.Contains(err.Error(), "status 1") {
		t.Fatalf("unknown system: Attach returned %v", err)
	}
	closeOut()
	if msg := out.rest(t); !strings.Contains(msg, "no system") {
		t.Errorf("BMC's message not passed on: %q", msg)
	}
}

func TestDialRefusals(t *testing.T) {
	e := emulator(t)
	b := e.BMC(0)
	tg := target(b, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	bad := tg
	bad.Password += "x"
	if _, err := console.Dial(ctx, bad, pinned(t, e)); err == nil {
		t.Error("wrong password accepted")
	}

	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherKey, _ := ssh.NewSignerFromKey(other)
	wrong, err := console.HostKeyCallback("", ssh.FingerprintSHA256(otherKey.PublicKey()), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := console.Dial(ctx, tg, wrong); !errors.Is(err, console.ErrHostKeyMismatch) || !strings.Contains(err.Error(), "--host-key-fingerprint") {
		t.Errorf("wrong fingerprint: %v", err)
	}
	if _, err := console.HostKeyCallback("", "MD5:16:27:ac:a5:76:28:2d:36:63:1b:56:4d:eb:df:a6:48", false); err == nil {
		t.Error("an MD5 fingerprint was taken")
	}
	// The fingerprint as ssh-keygen prints it, padded or not, pins the key.
	padded, err := console.HostKeyCallback("", ssh.FingerprintSHA256(e.SSHHostKey())+"=", false)
	if err != nil {
		t.Fatal(err)
	}
	dial(t, tg, padded)

	insecure, _ := console.HostKeyCallback("", "", true)
	dial(t, tg, insecure)
}

func TestKnownHosts(t *testing.T) {
	e := emulator(t)
	b := e.BMC(0)
	tg := target(b, "")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	callback := func(file string) ssh.HostKeyCallback {
		cb, err := console.HostKeyCallback(file, "", false)
		if err != nil {
			t.Fatal(err)
		}
		return cb
	}

	known := write("known", knownhosts.Line([]string{b.SSHAddress()}, e.SSHHostKey())+"\n")
	dial(t, tg, callback(known))

	fp := ssh.FingerprintSHA256(e.SSHHostKey())
	for _, file := range []string{write("empty", ""), filepath.Join(dir, "missing")} {
		_, err := console.Dial(ctx, tg, callback(file))
		if !errors.Is(err, console.ErrUnknownHostKey) || !strings.Contains(err.Error(), "--host-key-fingerprint "+fp) ||
			!strings.Contains(err.Error(), knownhosts.Line([]string{b.SSHAddress()}, e.SSHHostKey())) {
			t.Errorf("%s: %v", filepath.Base(file), err)
		}
	}

	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherKey, _ := ssh.NewSignerFromKey(other)
	changed := write("changed", knownhosts.Line([]string{b.SSHAddress()}, otherKey.PublicKey())+"\n")
	if _, err := console.Dial(ctx, tg, callback(changed)); !errors.Is(err, console.ErrHostKeyMismatch) || !strings.Contains(err.Error(), "ssh-keygen -R") {
		t.Errorf("changed key: %v", err)
	}
}
