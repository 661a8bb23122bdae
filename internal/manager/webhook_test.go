package manager

import (
	"flag"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	webhookconfig "github.com/metalhub/metalhub/config/webhook"
	"github.com/metalhub/metalhub/internal/webhook"
)

func TestWebhookFlags(t *testing.T) {
	o := DefaultOptions()
	if o.Webhook.Enabled {
		t.Fatal("webhooks on by default: local runs and tests would all serve on :9443")
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--enable-webhooks", "--webhook-port=9444", "--webhook-cert-dir=/certs"}); err != nil {
		t.Fatal(err)
	}
	if !o.Webhook.Enabled || o.Webhook.Port != 9444 || o.Webhook.CertDir != "/certs" {
		t.Fatalf("webhook options %+v", o.Webhook)
	}
}

// With webhooks on, New generates a certificate into an empty directory and serves a handler
// at every path the generated webhook configuration (config/webhook) calls, whatever the
// controller families.
func TestNewServesEveryConfiguredWebhook(t *testing.T) {
	cfg, err := webhookconfig.ValidatingWebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	mutating, err := webhookconfig.MutatingWebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, w := range cfg.Webhooks {
		paths[w.Name] = *w.ClientConfig.Service.Path
	}
	for _, w := range mutating.Webhooks {
		paths[w.Name] = *w.ClientConfig.Service.Path
	}
	for _, families := range []Families{{FamilyDelivery}, {FamilyMetal}} {
		o := DefaultOptions()
		o.Controllers = families
		o.MetricsAddr, o.HealthAddr, o.Metal.RegistryBindAddress = "0", "0", "127.0.0.1:0"
		o.Webhook.Enabled, o.Webhook.Host, o.Webhook.Port = true, "127.0.0.1", 0
		o.Webhook.CertDir = filepath.Join(t.TempDir(), "certs")
		l, err := Listen(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() }) // the manager is not started: nothing else closes them
		o.Listeners = l
		mgr, err := New(env.Config, o, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{webhook.CertFile, webhook.KeyFile, webhook.CAFile} {
			if _, err := os.Stat(filepath.Join(o.Webhook.CertDir, f)); err != nil {
				t.Errorf("%s: %v", families, err)
			}
		}
		mux := mgr.GetWebhookServer().WebhookMux()
		for name, path := range paths {
			if _, pattern := mux.Handler(httptest.NewRequest("POST", path, nil)); pattern != path {
				t.Errorf("%s: webhook %s calls %s, which the server does not serve", families, name, path)
			}
		}
	}
}
