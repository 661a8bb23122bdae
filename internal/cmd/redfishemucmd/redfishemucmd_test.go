package redfishemucmd

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestSSHConsoleFlagPrintsAddresses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // print the fleet, then return at once
	var out, errOut bytes.Buffer
	if code := Main(ctx, []string{"bmc", "--servers", "2", "--listen", "127.0.0.1:0", "--ssh-console"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := strings.Count(out.String(), " ssh-console 127.0.0.1:"); got != 2 {
		t.Errorf("want 2 console addresses, got %d:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "ssh-console host-key SHA256:") {
		t.Errorf("no host key fingerprint:\n%s", out.String())
	}
}

// Flags written with one dash, as the standard library's flag package took them, still work.
func TestSingleDashFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	if code := Main(ctx, []string{"bmc", "-servers", "2", "-listen=127.0.0.1:0"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "emulating 2 BMCs") {
		t.Errorf("output:\n%s", out.String())
	}
}
