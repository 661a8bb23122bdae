package deploy

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/manager"
	"github.com/metalhub/metalhub/internal/syncbuf"
	"github.com/metalhub/metalhub/internal/webhook"
)

// vidraAgainstFake is shared/compat/samples/vidra/against-fake beside the checkout
// (METALHUB_COMPAT_SAMPLES overrides). Missing, the test skips, but not in CI.
func vidraAgainstFake(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("METALHUB_COMPAT_SAMPLES")
	if dir == "" {
		dir = filepath.Join(root, "..", "shared", "compat", "samples")
	}
	dir = filepath.Join(dir, "vidra", "against-fake")
	if _, err := os.Stat(dir); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("compat samples not found at %s (CI is set; set METALHUB_COMPAT_SAMPLES): %v", dir, err)
		}
		t.Skipf("compat samples not found at %s: %v", dir, err)
	}
	return dir
}

// chartOptions are the manager options of the chart's default rendering: its Deployment's
// arguments, parsed as `metalhub manager` parses them.
func chartOptions(t *testing.T) manager.Options {
	t.Helper()
	args := managerArgs(t, decode(t, helmTemplate(t)))
	fs := flag.NewFlagSet("metalhub manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts := manager.DefaultOptions()
	opts.BindFlags(fs)
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("parsing the chart's arguments %q: %v", args, err)
	}
	return opts
}

// Issue 42 finding 7, acceptance: Vidra's own against-fake samples — a credentials Secret
// labelled infrahub-api-url=127.0.0.1 with nothing else, its settings ConfigMap, and syncs over
// http:// naming no ServiceAccount — applied by an admin (kubectl, as the test control plane's
// admin) to an operator run with the chart's defaults: its RBAC (config/default, which the
// chart renders the same), its ServiceAccount's token, its arguments, its webhooks. Each sync
// delivers; the test adds no annotation (the only one, admitted-credentials, is the webhook's).
// Only the Infrahub address is rewritten, to the emulator's own listener; the metal family and
// the metrics, probe and webhook ports are left out or moved to free ports.
func TestVidraSamplesWithChartDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the operator with the chart's defaults through Vidra's samples")
	}
	dir := vidraAgainstFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	startChartOperator(t, ctx, "vidra-samples.metalhub.test")

	// The fake Infrahub, on a listener of its own; the samples name 127.0.0.1:8300.
	e := emu.New(emu.Options{})
	if err := e.LoadSample(); err != nil {
		t.Fatal(err)
	}
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	sample := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.ReplaceAll(data, []byte("127.0.0.1:8300"), []byte(strings.TrimPrefix(url, "http://")))
	}
	apply := func(name string) {
		t.Helper()
		if out, err := kubectlStdin(sample(name), "apply", "-f", "-"); err != nil {
			t.Fatal(err)
		} else {
			t.Logf("%s: %s", name, strings.TrimSpace(string(out)))
		}
	}
	apply("infrahub-credentials.yaml")
	t.Cleanup(func() { _, _ = kubectlStdin(sample("infrahub-credentials.yaml"), "delete", "-f", "-") })
	apply("vidra-config.yaml")
	t.Cleanup(func() { _, _ = kubectlStdin(sample("vidra-config.yaml"), "delete", "-f", "-") })

	webA := func(version string) func() error {
		return func() error {
			cm := &corev1.ConfigMap{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "web-a"}, cm); err != nil {
				return err
			}
			if cm.Data["version"] != version {
				return fmt.Errorf("web-a version %q, want %q", cm.Data["version"], version)
			}
			return nil
		}
	}
	webB := func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "web-b"}, &appsv1.Deployment{}); err != nil {
			return err
		}
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "web-b"}, &corev1.Service{})
	}
	// One sync at a time: they share artifacts (VidraResources are named after artifact ids)
	// and objects, as they would under Vidra.
	for _, tc := range []struct {
		file, name string
		artifacts  int
		delivered  []func() error
	}{
		{"infrahubsync-main.yaml", "fake-webserver-main", 2, []func() error{webA("v2"), webB}},
		{"infrahubsync-at.yaml", "fake-webserver-2025-04-09", 1, []func() error{webA("v1")}},
		{"infrahubsync-branch.yaml", "fake-webserver-feature-x", 2, []func() error{webB}},
	} {
		apply(tc.file)
		eventually(t, time.Minute, func() error {
			s := &infrahubv1alpha1.InfrahubSync{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: tc.name}, s); err != nil {
				return err
			}
			if s.Status.SyncState != infrahubv1alpha1.StateSucceeded || len(s.Status.Checksums) != tc.artifacts {
				return fmt.Errorf("sync %s: state %q, checksums %v, lastError %q", s.Name, s.Status.SyncState, s.Status.Checksums, s.Status.LastError)
			}
			var list infrahubv1alpha1.VidraResourceList
			if err := env.Client.List(ctx, &list); err != nil {
				return err
			}
			for _, vr := range list.Items {
				if vr.Status.DeployState != infrahubv1alpha1.StateSucceeded {
					return fmt.Errorf("VidraResource %s: state %q, lastError %q", vr.Name, vr.Status.DeployState, vr.Status.LastError)
				}
			}
			for _, check := range tc.delivered {
				if err := check(); err != nil {
					return err
				}
			}
			return nil
		})
		s := &infrahubv1alpha1.InfrahubSync{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: tc.name}, s); err != nil {
			t.Fatal(err)
		}
		if got, want := s.Annotations[infrahubv1alpha1.AdmittedCredentialsAnnotation], "default/infrahub-credentials-fake"; got != want {
			t.Errorf("sync %s bound to %q at admission, want %q", tc.name, got, want)
		}
		// Gone before the next: the sync, then (no garbage collector here) its VidraResources.
		if _, err := kubectlStdin(sample(tc.file), "delete", "-f", "-"); err != nil {
			t.Fatal(err)
		}
		removeVidraResources(t, ctx)
	}
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "infrahub-credentials-fake"}, sec); err != nil {
		t.Fatal(err)
	}
	delete(sec.Annotations, "kubectl.kubernetes.io/last-applied-configuration") // kubectl apply's own
	if len(sec.Annotations) > 0 {
		t.Errorf("the credentials Secret gained annotations: %v", sec.Annotations)
	}
}

// removeVidraResources deletes every VidraResource, as the garbage collector would after its
// sync, and waits until their finalizers have pruned what they applied.
func removeVidraResources(t *testing.T, ctx context.Context) {
	t.Helper()
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if err := env.Client.Delete(ctx, &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, func() error {
		var list infrahubv1alpha1.VidraResourceList
		if err := env.Client.List(ctx, &list); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d VidraResources left (finalizers %v)", len(list.Items), list.Items[0].Finalizers)
		}
		return nil
	})
}

// startChartOperator runs, until the test ends, the delivery family as the chart's default
// rendering runs it: config/default's RBAC, a token of its ServiceAccount, the chart's
// arguments, its webhooks installed and serving. leaseID keeps the tests' leases apart.
func startChartOperator(t *testing.T, ctx context.Context, leaseID string) {
	t.Helper()
	installRBAC(t, ctx)
	cfg := serviceAccountConfig(t, ctx)
	opts := chartOptions(t)
	if opts.Delivery.DefaultServiceAccount != namespace+"/"+release+"-delivery" || opts.Delivery.AllowPlainHTTPCredentials || opts.Delivery.AllowOperatorIdentity {
		t.Fatalf("the chart's defaults changed: default ServiceAccount %q, plain http %t, operator identity %t",
			opts.Delivery.DefaultServiceAccount, opts.Delivery.AllowPlainHTTPCredentials, opts.Delivery.AllowOperatorIdentity)
	}
	opts.Namespace = namespace // the pod's namespace, in a cluster
	opts.Controllers = manager.Families{manager.FamilyDelivery}
	opts.MetricsAddr, opts.HealthAddr, opts.Metal.RegistryBindAddress = "0", "0", "0"
	opts.LeaderElectionNamespace, opts.LeaderElectionID = namespace, leaseID
	// Above the webhook server's own floor: net/http's Shutdown waits up to 6 s for a connection
	// the API server opened and has not sent a request on yet (Go's client dials spares).
	opts.GracefulShutdown = 15 * time.Second
	opts.Webhook.Host, opts.Webhook.Port, opts.Webhook.CertDir = "127.0.0.1", 0, t.TempDir()
	listeners, err := manager.Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Listeners = listeners
	var logs syncbuf.Buffer
	log := zap.New(zap.WriteTo(&logs), zap.UseDevMode(false))
	opts.ManyPerProcess = true // the other tests of this package build a manager too
	mgr, err := manager.New(cfg, opts, log)
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		if t.Failed() {
			lines := strings.Split(logs.String(), "\n")
			t.Logf("last operator log lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	ca, err := os.ReadFile(filepath.Join(opts.Webhook.CertDir, webhook.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.InstallLocal(ctx, env.Client, "https://"+listeners.Addresses().Webhook, ca); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = webhook.UninstallLocal(context.Background(), env.Client) })
	if err := webhook.WaitActive(ctx, env.Client, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}
