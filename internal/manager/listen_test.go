package manager

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// Every endpoint asked for on port 0 gets a port of its own; New writes them to the address
// file, and once the manager runs each endpoint answers at the address written.
func TestNewReportsTheAddressesItListensOn(t *testing.T) {
	o := DefaultOptions()
	o.Controllers = Families{FamilyMetal}
	o.MetricsAddr, o.HealthAddr, o.PprofAddr, o.Metal.RegistryBindAddress = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.Webhook.Enabled, o.Webhook.Host, o.Webhook.Port = true, "127.0.0.1", 0
	o.Webhook.CertDir = t.TempDir()
	o.AddressFile = filepath.Join(t.TempDir(), "addresses.json")
	o.GracefulShutdown = time.Second
	o.ManyPerProcess = true // TestNewServesEveryConfiguredWebhook builds the metal family too
	mgr, err := New(env.Config, o, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.AddressFile)
	if err != nil {
		t.Fatal(err)
	}
	var a Addresses
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	seen := map[string]string{}
	for what, addr := range map[string]string{"metrics": a.Metrics, "health": a.Health, "pprof": a.Pprof, "registry": a.Registry, "webhook": a.Webhook} {
		if addr == "" || addr == "127.0.0.1:0" {
			t.Fatalf("%s address %q in\n%s", what, addr, b)
		}
		if other, dup := seen[addr]; dup {
			t.Fatalf("%s and %s both at %s", what, other, addr)
		}
		seen[addr] = what
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	// The webhook answers TLS only: readiness includes its check, so /readyz covers it.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed test certificate
	for _, url := range []string{"http://" + a.Health + "/healthz", "http://" + a.Health + "/readyz", "http://" + a.Health + "/readyz/webhook",
		"http://" + a.Metrics + "/metrics", "http://" + a.Pprof + "/debug/pprof/", "http://" + a.Registry + "/healthz"} {
		if err := waitOK(insecure, url, 30*time.Second); err != nil {
			t.Error(err)
		}
	}
	// Any HTTP answer over TLS shows the webhook server itself is at the address.
	resp, err := insecure.Get("https://" + a.Webhook + "/")
	if err != nil {
		t.Fatalf("webhook server: %v", err)
	}
	resp.Body.Close()
}

// waitOK polls url until it answers 200.
func waitOK(c *http.Client, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not OK after %s: %s", url, timeout, last)
}
