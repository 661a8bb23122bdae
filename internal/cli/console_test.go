package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh/knownhosts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/syncbuf"
	"github.com/metalhub/metalhub/internal/testenv"
)

// consoleFleet starts an emulated BMC with an SSH serial console and registers it, with its
// Secret and its system as Server name, the way a user's cluster has them. uuid overrides the
// Server's systemUUID (another machine's).
func consoleFleet(t *testing.T, name, uuid string) (*redfish.Emulator, string) {
	t.Helper()
	e, err := redfish.Start(redfish.Options{BMCs: 1, SSHConsole: true, PowerDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	b := e.BMC(0)
	user, pass := b.Credentials()
	u, _ := url.Parse(b.URL())
	port, _ := strconv.Atoi(u.Port())
	ctx := context.Background()
	secret := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name},
		Data: map[string][]byte{metalv1alpha1.BMCSecretUsernameKey: []byte(user), metalv1alpha1.BMCSecretPasswordKey: []byte(pass)}}
	bmcObj := &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.BMCSpec{
		Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"},
		BMCSecretRef: corev1.LocalObjectReference{Name: name},
		Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: metalv1alpha1.HTTPScheme}}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, bmcObj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, bmcObj); _ = env.Client.Delete(ctx, secret) })
	sys := b.Systems()[0]
	if uuid == "" {
		uuid = sys.UUID()
	}
	server(t, name, "Available", func(s *metalv1alpha1.Server) {
		s.Spec.SystemUUID = uuid
		s.Spec.SystemURI = "/redfish/v1/Systems/" + sys.ID()
		s.Spec.BMCRef = &corev1.LocalObjectReference{Name: name}
	})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(b.SSHAddress())}, e.SSHHostKey())
	if err := os.WriteFile(kh, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return e, kh
}

// waitFor waits until the terminal shows want.
func waitFor(t *testing.T, screen *syncbuf.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(screen.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("terminal never showed %q; it shows:\n%s", want, screen.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metalhub console, run in a real terminal (a pty, so it goes raw as on a user's screen): the
// boot log shows, what is typed echoes back from the console, and ~. leaves.
func TestConsoleInATerminal(t *testing.T) {
	bin, err := testenv.MetalhubBinary()
	if err != nil {
		t.Fatal(err)
	}
	_, kh := consoleFleet(t, "con-tty", "")
	cmd := exec.Command(bin, "console", "con-tty", "--kubeconfig", env.Kubeconfig, "--known-hosts", kh)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 120, Rows: 40})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	out := &syncbuf.Buffer{}
	go func() { _, _ = io.Copy(out, tty) }()
	waitFor(t, out, "Connected to the serial console of server con-tty")
	waitFor(t, out, "Booting Linux")
	waitFor(t, out, "login: ")
	if _, err := tty.Write([]byte("hello-console\r")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, "hello-console")
	if _, err := tty.Write([]byte("\r~.")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("console exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("~. did not end the console")
	}
	waitFor(t, out, "closed")
}

// The console refuses what it cannot trust: a BMC host key it does not know, and an address
// that now answers for another machine than the Server's (checked before the console opens).
func TestConsoleRefusesUnknownKeyAndAnotherMachine(t *testing.T) {
	_, kh := consoleFleet(t, "con-key", "")
	empty := filepath.Join(t.TempDir(), "known_hosts")
	var errOut bytes.Buffer
	err := runConsole(context.Background(), env.Client, "con-key", consoleOptions{knownHosts: empty, timeout: 20 * time.Second},
		strings.NewReader(""), io.Discard, &errOut)
	var code ExitCode
	if !errors.As(err, &code) || !strings.Contains(errOut.String(), "--host-key-fingerprint") {
		t.Fatalf("unknown host key: %v %q", err, errOut.String())
	}
	if err := runConsole(context.Background(), env.Client, "con-key", consoleOptions{knownHosts: kh, fingerprint: "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", timeout: 20 * time.Second},
		strings.NewReader(""), io.Discard, &errOut); err == nil {
		t.Fatal("a wrong fingerprint was accepted")
	}

	consoleFleet(t, "con-other", "11111111-2222-3333-4444-555555555555")
	err = runConsole(context.Background(), env.Client, "con-other", consoleOptions{insecure: true, timeout: 20 * time.Second},
		strings.NewReader(""), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "answers as") {
		t.Fatalf("another machine's console: %v", err)
	}
}
