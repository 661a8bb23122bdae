package delivery

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/controlplane"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// env is the local cluster (the operator's); remote, started by the first test that needs it,
// plays a second cluster reached through a kubeconfig Secret.
var (
	env        *testenv.Env
	remoteOnce sync.Once
	remoteEnv  *testenv.Env
	remoteErr  error
)

// Tests that start no manager call t.Parallel: they work on fakes or on objects of their own.
// Those that start one stay serial: a test's manager acts on every InfrahubSync and
// VidraResource of the control plane with that test's options, and emulators number their
// artifacts alike, so tests at once would reconcile, and name, each other's objects.
func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	ctrl.SetLogger(testLogger())
	// With kube-controller-manager: Deployments roll out for real (revisions, ReplicaSets).
	e, err := testenv.StartWith(controlplane.Options{ControllerManager: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	env = e
	defer func() { _ = e.Stop() }()
	defer func() {
		if remoteEnv != nil {
			_ = remoteEnv.Stop()
		}
	}()
	return m.Run()
}

func remote(t testing.TB) *testenv.Env {
	t.Helper()
	remoteOnce.Do(func() { remoteEnv, remoteErr = testenv.Start() })
	if remoteErr != nil {
		t.Fatalf("starting the remote cluster: %v", remoteErr)
	}
	return remoteEnv
}

// writeCounter counts requests that change something on the API server (every method but GET
// and HEAD), made by the manager under test.
type writeCounter struct {
	n     atomic.Int64
	mu    sync.Mutex
	paths []string
}

type countingTransport struct {
	w  *writeCounter
	rt http.RoundTripper
}

func (c countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		c.w.n.Add(1)
		c.w.mu.Lock()
		if len(c.w.paths) < 200 {
			c.w.paths = append(c.w.paths, req.Method+" "+req.URL.Path)
		}
		c.w.mu.Unlock()
	}
	return c.rt.RoundTrip(req)
}

func (w *writeCounter) reset() {
	w.n.Store(0)
	w.mu.Lock()
	w.paths = nil
	w.mu.Unlock()
}

// count is how many of the recorded writes were method on a path ending in suffix.
func (w *writeCounter) count(method, suffix string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, p := range w.paths {
		if strings.HasPrefix(p, method+" ") && strings.HasSuffix(p, suffix) {
			n++
		}
	}
	return n
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

func (w *writeCounter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d writes %v", w.n.Load(), w.paths)
}

// harness is one manager running the delivery family against env.
type harness struct {
	mgr    ctrl.Manager
	rs     *reconcilers
	writes *writeCounter
	stop   func()
}

func testLogger() logr.Logger {
	if os.Getenv("DELIVERY_TEST_LOG") != "" {
		return zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr))
	}
	return logr.Discard()
}

// fastOptions: short sync interval, long resource interval; tests change what they need.
func fastOptions() Options {
	o := DefaultOptions()
	o.Settings.RequeueSyncAfter = 10 * time.Minute
	o.Settings.RequeueResourcesAfter = 10 * time.Minute
	o.InfrahubTimeout = 5 * time.Second
	o.ClusterTimeout = 10 * time.Second
	// Most tests name no ServiceAccount: the operator applies as itself, as it did before the
	// flag existed; the tenancy tests turn it off.
	o.AllowOperatorIdentity = true
	// The emulator serves plain HTTP on loopback; tests of the refusal turn this off.
	o.AllowPlainHTTPCredentials = true
	// As where the admission webhook guards both kinds (this package serves none): the
	// ServiceAccounts tests name are acted as. The tests of its absence set it to nil.
	o.admission = func(context.Context) error { return nil }
	// And as where it sealed what these tests write; the seal tests turn this off.
	o.assumeSealed = true
	return o
}

// startManager runs the delivery family with o until the test ends (or stop is called).
func startManager(t testing.TB, o Options) *harness {
	t.Helper()
	wc := &writeCounter{}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingTransport{w: wc, rt: rt} }
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.New(),
		Logger:                 testLogger(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// As the operator's manager: VidraResources cached without their manifests.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: manifests.CacheByObject()},
		// Each test runs its own manager with the same controller names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := setup(mgr, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	stopAtEnd(t, stop)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if !mgr.GetCache().WaitForCacheSync(sctx) {
		t.Fatal("manager cache did not sync")
	}
	return &harness{mgr: mgr, rs: rs, writes: wc, stop: stop}
}

var (
	stopsMu sync.Mutex
	stops   = map[testing.TB]*[]func(){}
)

// stopAtEnd stops a test's managers once its other cleanups have run. The first manager's stop
// is registered before the test creates its objects; one started later (a restart) joins it
// rather than registering its own, which would run first and leave the objects' cleanup with no
// manager to take their finalizers off.
func stopAtEnd(t testing.TB, stop func()) {
	stopsMu.Lock()
	defer stopsMu.Unlock()
	if list, ok := stops[t]; ok {
		*list = append(*list, stop)
		return
	}
	list := &[]func(){stop}
	stops[t] = list
	t.Cleanup(func() {
		stopsMu.Lock()
		delete(stops, t)
		fs := *list
		stopsMu.Unlock()
		for i := len(fs) - 1; i >= 0; i-- {
			fs[i]()
		}
	})
}

// startInfrahub runs an emulator on loopback and a credentials Secret for it, labelled with the
// host_port form so that concurrent emulators do not share credentials, stating the emulator's
// http URL and serving the syncs named.
func startInfrahub(t testing.TB, secretData map[string]string, syncs ...string) (*emu.Emulator, string) {
	t.Helper()
	e := emu.New(emu.Options{APITokens: []string{"test-token"}})
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	if secretData == nil {
		secretData = map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword}
	}
	createAnnotatedSecret(t, "default", infrahubv1alpha1.InfrahubAPIURLLabel, labelFor(t, url), credsFor(url, syncs...), secretData)
	return e, url
}

// credsFor are the annotations of a credentials Secret for url serving syncs.
func credsFor(url string, syncs ...string) map[string]string {
	return map[string]string{infrahubv1alpha1.URLAnnotation: url, infrahubv1alpha1.SyncsAnnotation: strings.Join(syncs, ",")}
}

// kubeconfigFor are the annotations of a kubeconfig Secret serving VidraResources made by hand.
func kubeconfigFor(resources ...string) map[string]string {
	return map[string]string{infrahubv1alpha1.VidraResourcesAnnotation: strings.Join(resources, ",")}
}

// labelFor is the most specific label value for a URL (host_port).
func labelFor(t testing.TB, url string) string {
	t.Helper()
	v, err := target.HostLabelValues(url)
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}

func createSecret(t testing.TB, ns, labelKey, labelValue string, data map[string]string) *corev1.Secret {
	t.Helper()
	return createAnnotatedSecret(t, ns, labelKey, labelValue, nil, data)
}

// createAnnotatedSecret creates a labelled Secret with annotations (the syncs it serves, its URL).
func createAnnotatedSecret(t testing.TB, ns, labelKey, labelValue string, annotations, data map[string]string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "creds-", Namespace: ns, Labels: map[string]string{labelKey: labelValue}, Annotations: annotations},
		StringData: data,
	}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	return s
}

var (
	nsSeq     atomic.Int64
	notInName = regexp.MustCompile(`[^a-z0-9-]+`) // what a test's name may hold and a namespace's not
)

// namespace creates a fresh namespace for a test's objects (envtest never finishes deleting
// namespaces, so they are left behind).
func namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsSeq.Add(1), notInName.ReplaceAllString(strings.ToLower(t.Name()), "-"))
	if len(name) > 60 {
		name = strings.TrimRight(name[:60], "-")
	}
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// newSync creates an InfrahubSync and, at the end of the test (while the manager still runs),
// removes it and its VidraResources (envtest has no garbage collector).
func newSync(t testing.TB, name, url, artefact, ns string, mutate ...func(*infrahubv1alpha1.InfrahubSync)) *infrahubv1alpha1.InfrahubSync {
	t.Helper()
	s := &infrahubv1alpha1.InfrahubSync{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: infrahubv1alpha1.InfrahubSyncSpec{
			Source:      infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", ArtefactName: artefact},
			Destination: infrahubv1alpha1.Destination{Namespace: ns, ReconcileOnEvents: true},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	if err := env.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSync(t, s.Name) })
	return s
}

func deleteSync(t testing.TB, name string) {
	ctx := context.Background()
	s := &infrahubv1alpha1.InfrahubSync{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		return
	}
	_ = env.Client.Delete(ctx, s)
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(ctx, &list, client.MatchingLabels{manifests.SyncLabel: name}); err != nil {
		return
	}
	for i := range list.Items {
		deleteResource(t, list.Items[i].Name)
	}
}

// newResource creates a VidraResource by hand (as users of the reference do) and removes it at
// the end of the test.
func newResource(t testing.TB, name, ns, manifest string, mutate ...func(*infrahubv1alpha1.VidraResource)) *infrahubv1alpha1.VidraResource {
	t.Helper()
	vr := &infrahubv1alpha1.VidraResource{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: infrahubv1alpha1.VidraResourceSpec{
			Manifest:    manifest,
			Destination: infrahubv1alpha1.Destination{Namespace: ns, ReconcileOnEvents: true},
		},
	}
	for _, m := range mutate {
		m(vr)
	}
	if err := env.Client.Create(context.Background(), vr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteResource(t, name) })
	return vr
}

// updateResourceManifest replaces a VidraResource's manifest, as its sync would.
func updateResourceManifest(t testing.TB, name, manifest string) {
	t.Helper()
	patchObject(t, env.Client, &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: name}},
		func(vr *infrahubv1alpha1.VidraResource) { vr.Spec.Manifest = manifest })
}

// patchObject reads obj afresh, lets mutate change it and merge-patches only what changed: the
// controllers write the same objects (metadata, status), and a read-modify-Update racing them
// fails with "the object has been modified".
func patchObject[T client.Object](t testing.TB, c client.Client, obj T, mutate func(T)) {
	t.Helper()
	ctx := context.Background()
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	base, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		t.Fatalf("copying %T", obj)
	}
	mutate(obj)
	if err := c.Patch(ctx, obj, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

// deleteResource deletes a VidraResource and waits for its finalizer; if the manager cannot
// finish (stopped, cluster gone) the finalizer is removed by hand.
func deleteResource(t testing.TB, name string) {
	ctx := context.Background()
	vr := &infrahubv1alpha1.VidraResource{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, vr); err != nil {
		return
	}
	_ = env.Client.Delete(ctx, vr)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		err := env.Client.Get(ctx, client.ObjectKey{Name: name}, vr)
		if apierrors.IsNotFound(err) {
			return
		}
		// The controller said it cannot remove what it applied (an unusable destination or
		// identity); its next try comes after cleanupRetry, past this wait.
		if c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionReady); err == nil &&
			!vr.DeletionTimestamp.IsZero() && c != nil && c.Reason == infrahubv1alpha1.ReasonCleanupFailed {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The controller may still be writing it: remove the finalizer on a fresh read.
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, vr); err != nil {
			return err
		}
		if !controllerutil.RemoveFinalizer(vr, manifests.Finalizer) {
			return nil
		}
		return env.Client.Update(ctx, vr)
	})
}

// eventually polls f until it returns nil or timeout passes, then fails with f's last error.
func eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// consistently fails if f returns an error at any point during d.
func consistently(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := f(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getSync(t testing.TB, name string) *infrahubv1alpha1.InfrahubSync {
	t.Helper()
	s := &infrahubv1alpha1.InfrahubSync{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func getResource(t testing.TB, name string) *infrahubv1alpha1.VidraResource {
	t.Helper()
	vr := &infrahubv1alpha1.VidraResource{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, vr); err != nil {
		t.Fatal(err)
	}
	return vr
}

// syncState waits for a sync to report state with the Ready reason.
func waitSync(t testing.TB, name string, state infrahubv1alpha1.State, reason string, timeout time.Duration) *infrahubv1alpha1.InfrahubSync {
	t.Helper()
	var s *infrahubv1alpha1.InfrahubSync
	eventually(t, timeout, func() error {
		s = &infrahubv1alpha1.InfrahubSync{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, s); err != nil {
			return err
		}
		c := meta.FindStatusCondition(s.Status.Conditions, infrahubv1alpha1.ConditionReady)
		if s.Status.SyncState != state || c == nil || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("sync %s: state %q, condition %+v, lastError %q; want %s/%s", name, s.Status.SyncState, c, s.Status.LastError, state, reason)
		}
		return nil
	})
	return s
}

func waitResource(t testing.TB, name string, state infrahubv1alpha1.State, reason string, timeout time.Duration) *infrahubv1alpha1.VidraResource {
	t.Helper()
	var vr *infrahubv1alpha1.VidraResource
	eventually(t, timeout, func() error {
		vr = &infrahubv1alpha1.VidraResource{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, vr); err != nil {
			return err
		}
		c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionReady)
		if vr.Status.DeployState != state || c == nil || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("vidraresource %s: state %q, condition %+v, lastError %q; want %s/%s", name, vr.Status.DeployState, c, vr.Status.LastError, state, reason)
		}
		return nil
	})
	return vr
}

// exists reports whether an object is there, failing on other errors.
func exists(t testing.TB, c client.Client, obj client.Object, ns, name string) error {
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%T %s/%s not found", obj, ns, name)
	}
	return err
}

// requestSync sets the requested-at annotation on an object.
func requestSync(t testing.TB, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[infrahubv1alpha1.RequestedAtAnnotation] = time.Now().Format(time.RFC3339Nano)
	obj.SetAnnotations(a)
	if err := env.Client.Patch(ctx, obj, patch); err != nil {
		t.Fatal(err)
	}
}

// Artifact contents.

func configMapYAML(name, ns, value string) string {
	nsLine := ""
	if ns != "" {
		nsLine = "\n  namespace: " + ns
	}
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s%s\ndata:\n  value: %q\n", name, nsLine, value)
}

func deploymentYAML(name string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      containers:
      - name: web
        image: nginx:1.27-alpine
`, name, replicas)
}

func serviceYAML(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %[1]s
spec:
  selector: {app: %[1]s}
  ports:
  - port: 80
`, name)
}

func docs(parts ...string) string { return strings.Join(parts, "---\n") }
