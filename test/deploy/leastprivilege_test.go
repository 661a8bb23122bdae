package deploy

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/emulator/netboot"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/manager"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/syncbuf"
	"github.com/metalhub/metalhub/internal/webhook"
)

const serviceAccount = "metalhub-controller-manager"

// The operator runs with exactly the rights config/default gives its ServiceAccount — the
// generated role, the leader-election role and the default delivery-apply role — through a
// token from the TokenRequest API, with leader election on. It drives a small metal lifecycle
// (discovery through the real registry and probe, claim, enforced maintenance, release) and a
// small delivery sync (ConfigMap, Deployment and Service applied, then pruned). No request of
// the operator may be refused: every 401/403 response is counted, and the log is scanned.
func TestLeastPrivilege(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the operator through a metal lifecycle and a delivery sync")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	installRBAC(t, ctx)
	cfg := serviceAccountConfig(t, ctx)
	checkIdentity(t, ctx, cfg)
	refused := &refusals{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return refusalCounter{r: refused, rt: rt} }
	cfg.QPS, cfg.Burst = -1, 0

	// The operator, in this process, as the ServiceAccount.
	var logs syncbuf.Buffer
	log := zap.New(zap.WriteTo(&logs), zap.UseDevMode(false))
	ctrl.SetLogger(log) // the registry logs through controller-runtime's root logger
	opts := manager.DefaultOptions()
	opts.MetricsAddr, opts.HealthAddr = "0", "0"
	opts.LeaderElect, opts.LeaderElectionNamespace = true, namespace
	// Above the webhook server's own floor: net/http's Shutdown waits up to 6 s for a connection
	// the API server opened and has not sent a request on yet (Go's client dials spares).
	opts.GracefulShutdown = 15 * time.Second
	opts.Metal.RegistryBindAddress = "127.0.0.1:0"
	opts.Metal.DiscoveryNamespace = "default"
	opts.Metal.PowerPoll = 100 * time.Millisecond
	opts.Metal.BMCRequestTimeout = 2 * time.Second
	opts.Metal.RetryAfter = 500 * time.Millisecond
	opts.Delivery.Policy.AllowedKinds = []string{"ConfigMap", "Service", "Deployment.apps"}
	opts.Delivery.AllowOperatorIdentity = true     // what the default delivery-apply role is for
	opts.Delivery.AllowPlainHTTPCredentials = true // the Infrahub emulator serves plain HTTP on loopback
	// The admission webhooks too, as config/default runs them: their reads (the Endpoint MAC
	// check lists Endpoints) are the ServiceAccount's.
	opts.Webhook.Enabled, opts.Webhook.Host, opts.Webhook.Port = true, "127.0.0.1", 0
	opts.Webhook.CertDir = t.TempDir()
	// Bound first, on ports the system picks: the registry's URL goes into the ignition, the
	// webhook's into the webhook configuration.
	listeners, err := manager.Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	addrs := listeners.Addresses()
	opts.Listeners = listeners
	opts.Metal.RegistryURL = "http://" + addrs.Registry
	opts.ManyPerProcess = true // the other tests of this package build a manager too
	mgr, err := manager.New(cfg, opts, log)
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	stopped := false
	stopManager := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		}
	}
	defer func() {
		stopManager()
		if t.Failed() {
			lines := strings.Split(logs.String(), "\n")
			t.Logf("last operator log lines:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	}()

	// The leader's Lease, in the operator's namespace.
	eventually(t, 30*time.Second, func() error {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: opts.LeaderElectionID}, l); err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return fmt.Errorf("lease %s has no holder", l.Name)
		}
		return nil
	})

	admission(t, ctx, opts.Webhook.CertDir, "https://"+addrs.Webhook)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); metalLifecycle(t, ctx) }()
	go func() { defer wg.Done(); deliverySync(t, ctx) }()
	wg.Wait()
	checkMetrics(t)

	stopManager()
	if n, what := refused.get(); n > 0 {
		t.Errorf("the API server refused %d requests of the operator:\n%s", n, strings.Join(what, "\n"))
	}
	var forbidden []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			forbidden = append(forbidden, line)
		}
	}
	if len(forbidden) > 0 {
		t.Errorf("%d operator log lines say forbidden, e.g.:\n%s", len(forbidden), strings.Join(forbidden[:min(5, len(forbidden))], "\n"))
	}
}

// admission registers the operator's webhooks at url with the API server (until the test ends:
// later tests share the control plane) and has the Endpoint webhook refuse a duplicate MAC.
func admission(t *testing.T, ctx context.Context, certDir, url string) {
	ca, err := os.ReadFile(filepath.Join(certDir, webhook.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.InstallLocal(ctx, env.Client, url, ca); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = webhook.UninstallLocal(context.Background(), env.Client) })
	if err := webhook.WaitActive(ctx, env.Client, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i, mac := range []string{"52:54:00:1e:a5:70", "52-54-00-1E-A5-70"} {
		ep := &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lp-endpoint-%d", i)}, Spec: metalv1alpha1.EndpointSpec{MACAddress: mac, IP: "192.0.2.10"}}
		err := env.Client.Create(ctx, ep)
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ep) })
		}
		if i == 1 && (err == nil || !strings.Contains(err.Error(), `already used by Endpoint "lp-endpoint-0"`)) {
			t.Fatalf("duplicate MAC: %v", err)
		}
	}
}

// metalLifecycle: two BMCs; their servers are discovered (real registry, real probe through
// the emulated PXE boot) and become Available; one is claimed (Reserved, On), taken into
// enforced maintenance and handed back, then released (Available, Off).
func metalLifecycle(t *testing.T, ctx context.Context) {
	const n = 2
	nb, err := netboot.New(netboot.Options{Client: env.Client, Namespace: "default", ProbeInterval: 200 * time.Millisecond, Logger: logr.Discard()})
	if err != nil {
		t.Error(err)
		return
	}
	t.Cleanup(func() { nb.Close() }) // after the manager stops: no request to a closed BMC counts as an error
	fleet, err := redfish.Start(redfish.Options{BMCs: n, PowerDelay: 200 * time.Millisecond, OnBoot: nb.OnBoot})
	if err != nil {
		t.Error(err)
		return
	}
	t.Cleanup(func() { _ = fleet.Close() })

	names := make([]string, n)
	for i := range n {
		b := fleet.BMC(i)
		user, pass := b.Credentials()
		name := fmt.Sprintf("lp-%d", i)
		port, _ := strconv.Atoi(b.URL()[strings.LastIndex(b.URL(), ":")+1:])
		if err := env.Client.Create(ctx, &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"username": user, "password": pass}}); err != nil {
			t.Error(err)
			return
		}
		if err := env.Client.Create(ctx, &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: metalv1alpha1.BMCSpec{
			Access: &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"}, BMCSecretRef: corev1.LocalObjectReference{Name: name},
			Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: int32(port), Scheme: metalv1alpha1.HTTPScheme},
		}}); err != nil {
			t.Error(err)
			return
		}
		names[i] = bmccontroller.ServerName(name, b.SystemIDs()[0])
	}
	is := func(state metalv1alpha1.ServerState, power metalv1alpha1.PowerState) func(*metalv1alpha1.Server) error {
		return func(s *metalv1alpha1.Server) error {
			if s.Annotations[lifecycle.StateAnnotation] != string(state) || s.Status.State != state || s.Status.PowerState != power {
				return fmt.Errorf("server %s: state %s/%s, power %s; want %s, %s", s.Name,
					s.Annotations[lifecycle.StateAnnotation], s.Status.State, s.Status.PowerState, state, power)
			}
			return nil
		}
	}
	waitServer := func(name string, timeout time.Duration, ok func(*metalv1alpha1.Server) error) bool {
		return eventuallyOK(t, timeout, func() error {
			s := &metalv1alpha1.Server{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
				return err
			}
			return ok(s)
		})
	}
	for _, name := range names {
		if !waitServer(name, 2*time.Minute, is(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff)) {
			return
		}
	}

	claim := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lp-claim"},
		Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerRef: &corev1.LocalObjectReference{Name: names[0]}}}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Error(err)
		return
	}
	if !waitServer(names[0], time.Minute, is(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn)) {
		return
	}
	maint := &metalv1alpha1.ServerMaintenance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lp-maintenance"},
		Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: names[0]},
			Policy: metalv1alpha1.ServerMaintenancePolicyEnforced, ServerPower: metalv1alpha1.PowerOff}}
	if err := env.Client.Create(ctx, maint); err != nil {
		t.Error(err)
		return
	}
	if !waitServer(names[0], time.Minute, is(metalv1alpha1.ServerStateMaintenance, metalv1alpha1.PowerStateOff)) {
		return
	}
	if err := env.Client.Delete(ctx, maint); err != nil {
		t.Error(err)
		return
	}
	if !waitServer(names[0], time.Minute, is(metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn)) {
		return
	}
	if err := env.Client.Delete(ctx, claim); err != nil {
		t.Error(err)
		return
	}
	if !waitServer(names[0], time.Minute, is(metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff)) {
		return
	}
	eventuallyOK(t, 30*time.Second, func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), &metalv1alpha1.ServerClaim{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("claim still there (%v)", err)
	})
}

// deliverySync: an InfrahubSync over the emulator's sample (a ConfigMap; a Deployment and a
// Service) delivers both artifacts into a namespace; deleting the sync prunes what it applied.
func deliverySync(t *testing.T, ctx context.Context) {
	e := emu.New(emu.Options{})
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Error(err)
		return
	}
	t.Cleanup(func() { _ = e.Close() })
	if err := e.LoadSample(); err != nil {
		t.Error(err)
		return
	}
	const ns = "lp-delivery"
	ensureNamespace(t, ns)
	hostPort := strings.ReplaceAll(strings.TrimPrefix(url, "http://"), ":", "_")
	if err := env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lp-infrahub", Labels: map[string]string{infrahubv1alpha1.InfrahubAPIURLLabel: hostPort},
			Annotations: map[string]string{infrahubv1alpha1.URLAnnotation: url, infrahubv1alpha1.SyncsAnnotation: "lp-sync"}},
		StringData: map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword},
	}); err != nil {
		t.Error(err)
		return
	}
	sync := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "lp-sync"}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
		Source:      infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", ArtefactName: emu.SampleArtifactName},
		Destination: infrahubv1alpha1.Destination{Namespace: ns, ReconcileOnEvents: true},
	}}
	if err := env.Client.Create(ctx, sync); err != nil {
		t.Error(err)
		return
	}
	ok := eventuallyOK(t, time.Minute, func() error {
		s := &infrahubv1alpha1.InfrahubSync{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sync), s); err != nil {
			return err
		}
		if s.Status.SyncState != infrahubv1alpha1.StateSucceeded || len(s.Status.Checksums) != 2 {
			return fmt.Errorf("sync: state %q, checksums %v, lastError %q", s.Status.SyncState, s.Status.Checksums, s.Status.LastError)
		}
		var list infrahubv1alpha1.VidraResourceList
		if err := env.Client.List(ctx, &list); err != nil {
			return err
		}
		for _, vr := range list.Items {
			c := meta.FindStatusCondition(vr.Status.Conditions, "Ready")
			if vr.Status.DeployState != infrahubv1alpha1.StateSucceeded {
				return fmt.Errorf("vidraresource %s: state %q, condition %+v, lastError %q", vr.Name, vr.Status.DeployState, c, vr.Status.LastError)
			}
		}
		return nil
	})
	if !ok {
		return
	}
	applied := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-a"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-b"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-b"}},
	}
	for _, o := range applied {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("delivered %T %s: %v", o, o.GetName(), err)
		}
	}
	// Deleting the sync deletes its VidraResources (no garbage collector here: by hand, as the
	// collector would), whose finalizers prune what they applied.
	if err := env.Client.Delete(ctx, sync); err != nil {
		t.Error(err)
		return
	}
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Error(err)
		return
	}
	for i := range list.Items {
		if err := env.Client.Delete(ctx, &list.Items[i]); err != nil {
			t.Error(err)
		}
	}
	for _, o := range applied {
		eventuallyOK(t, 30*time.Second, func() error {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("%T %s not pruned (%v)", o, o.GetName(), err)
		})
	}
	eventuallyOK(t, 30*time.Second, func() error {
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

// installRBAC applies config/default's ServiceAccounts (the operator's and delivery's), roles and
// bindings (what a user installs).
func installRBAC(t *testing.T, ctx context.Context) {
	t.Helper()
	ensureNamespace(t, namespace)
	var docs [][]byte
	for _, o := range decode(t, kustomize(t, filepath.Join(root, "config", "default"))) {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, b)
		}
	}
	if len(docs) != 9 {
		t.Fatalf("config/default has %d RBAC objects, want 9", len(docs))
	}
	if out, err := kubectlStdin(bytes.Join(docs, []byte("---\n")), "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("installed:\n%s", out)
	}
}

// serviceAccountConfig is a client configuration with a token of the operator's ServiceAccount.
func serviceAccountConfig(t *testing.T, ctx context.Context) *rest.Config {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	cfg := &rest.Config{
		Host:            env.Config.Host,
		APIPath:         env.Config.APIPath,
		TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData, CAFile: env.Config.CAFile},
		BearerToken:     tr.Status.Token,
	}
	return cfg
}

// checkIdentity makes sure the configuration really is the ServiceAccount, with no more rights.
func checkIdentity(t *testing.T, ctx context.Context, cfg *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:" + namespace + ":" + serviceAccount; review.Status.UserInfo.Username != want {
		t.Fatalf("token is %q, want %q", review.Status.UserInfo.Username, want)
	}
	c, err := client.New(rest.CopyConfig(cfg), client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.ObjectList{&corev1.PodList{}, &corev1.NodeList{}} {
		if err := c.List(ctx, o); !apierrors.IsForbidden(err) {
			t.Errorf("the operator may list %T (err %v): more rights than config/rbac grants", o, err)
		}
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("rbac.authorization.k8s.io/v1")
	u.SetKind("ClusterRoleBinding")
	u.SetName("lp-escalate")
	u.Object["roleRef"] = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}
	if err := c.Create(ctx, u); !apierrors.IsForbidden(err) {
		t.Errorf("the operator may bind cluster-admin (err %v)", err)
	}
}

// refusals records the operator's requests the API server refused (401 or 403).
type refusals struct {
	mu   sync.Mutex
	n    int
	what []string
}

func (r *refusals) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if !slices.Contains(r.what, s) && len(r.what) < 50 {
		r.what = append(r.what, s)
	}
}

func (r *refusals) get() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, append([]string(nil), r.what...)
}

type refusalCounter struct {
	r  *refusals
	rt http.RoundTripper
}

func (c refusalCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err == nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized) {
		c.r.add(fmt.Sprintf("%d %s %s", resp.StatusCode, req.Method, req.URL.Path))
	}
	return resp, err
}

// ---- helpers ---------------------------------------------------------------------------------

func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	if !eventuallyOK(t, timeout, f) {
		t.FailNow()
	}
}

// eventuallyOK polls f until it returns nil; after timeout it reports f's last error with
// t.Error (safe from other goroutines) and returns false.
func eventuallyOK(t *testing.T, timeout time.Duration, f func() error) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("after %s: %v", timeout, err)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkMetrics reads the operator's /metrics registry after the lifecycle and the sync: the
// state gauges count what the cluster holds, with zero-valued series for what nothing is in,
// and the event counters counted what happened. Every metric the alert rules use is there.
func checkMetrics(t *testing.T) {
	t.Helper()
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "bmc" {
					continue // ports differ per run
				}
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			key := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				series[key] += m.GetCounter().GetValue()
			case m.Gauge != nil:
				series[key] += m.GetGauge().GetValue()
			case m.Histogram != nil:
				series[mf.GetName()+"_count{"+strings.Join(labels, ",")+"}"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for key, want := range map[string]float64{
		"metalhub_leader{}": 1,
		"metalhub_servers{power_state=Off,state=Available}":  2,
		"metalhub_servers{power_state=On,state=Reserved}":    0,
		"metalhub_servers{power_state=Off,state=Error}":      0,
		"metalhub_server_claims{phase=Bound}":                0,
		"metalhub_server_claims{phase=Unbound}":              0,
		"metalhub_infrahub_syncs{state=Failed}":              0,
		"metalhub_vidra_resources{state=Failed}":             0,
		"metalhub_vidra_applied_objects{}":                   0,
		"metalhub_state_metrics_errors{}":                    0,
		"metalhub_discovery_reports_total{result=malformed}": 0,
		"metalhub_bmc_requests_total{result=5xx}":            0,
		"metalhub_bmc_requests_total{result=error}":          0,
	} {
		if got, ok := series[key]; !ok || got != want {
			t.Errorf("metrics: %s = %v (present %t), want %v", key, got, ok, want)
		}
	}
	for key, atLeast := range map[string]float64{
		"metalhub_discovery_reports_total{result=accepted}": 2,
		"metalhub_bmc_requests_total{result=2xx}":           10,
		"metalhub_bmc_request_duration_seconds_count{}":     10,
	} {
		if got := series[key]; got < atLeast {
			t.Errorf("metrics: %s = %v, want at least %v", key, got, atLeast)
		}
	}
}
