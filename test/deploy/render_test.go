package deploy

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/metalhub/metalhub/internal/manager"
)

const (
	release   = "metalhub"
	namespace = "metalhub-system"
)

// metalOnlyValues are the chart values for the settings of the kustomize overlay
// testdata/metal-only.
var metalOnlyValues = []string{
	"controllers={metal}",
	"replicas=3",
	"image.tag=1.2.3",
	"metal.registry.url=http://192.0.2.1:30082",
	"metal.registry.service.type=NodePort",
	"metal.registry.service.nodePort=30082",
	"metal.externalBootProvider=true",
	"metal.discoveryNamespace=metal-discovery",
}

// caBundle is the webhook CA bundle of testdata/no-certmanager.
const caBundle = "Q0EgYnVuZGxl"

// chartOnlyLabels are the labels helm conventions add and kustomize does not; they are the only
// difference allowed between the two renderings.
var chartOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by"}

// The chart with its defaults renders exactly config/default, object by object (Namespace,
// webhooks and cert-manager objects included); with other values, exactly the overlay of
// testdata/ that makes the same choice the way docs/install.md shows.
func TestChartMatchesKustomize(t *testing.T) {
	for _, tc := range []struct {
		name, kustomization string
		values              []string
	}{
		{"defaults", filepath.Join(root, "config", "default"), nil},
		{"metal-only", filepath.Join("testdata", "metal-only"), metalOnlyValues},
		{"no-webhooks", filepath.Join("testdata", "no-webhooks"), []string{"webhook.enabled=false", "controllers={metal}"}},
		{"no-certmanager", filepath.Join("testdata", "no-certmanager"), []string{"webhook.certManager.enabled=false", "webhook.caBundle=" + caBundle}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kust := decode(t, kustomize(t, tc.kustomization))
			chart := decode(t, helmTemplate(t, tc.values...))
			if len(kust) < 10 {
				t.Fatalf("kustomize rendered only %d objects", len(kust))
			}
			compareRenderings(t, kust, chart)
		})
	}
}

func compareRenderings(t *testing.T, kust, chart []*unstructured.Unstructured) {
	t.Helper()
	k, c := byKey(t, kust), byKey(t, chart)
	for key, obj := range c {
		for _, l := range chartOnlyLabels {
			unstructured.RemoveNestedField(obj.Object, "metadata", "labels", l)
		}
		if _, ok := k[key]; !ok {
			t.Errorf("the chart renders %s, config/ does not", key)
		}
	}
	for key, want := range k {
		got, ok := c[key]
		if !ok {
			t.Errorf("config/ renders %s, the chart does not", key)
			continue
		}
		if !reflect.DeepEqual(want.Object, got.Object) {
			wy, _ := yaml.Marshal(want.Object)
			gy, _ := yaml.Marshal(got.Object)
			t.Errorf("%s differs (- config/, + chart):\n%s", key, lineDiff(string(wy), string(gy)))
		}
	}
}

// Every flag the chart can render is one the binary has (parsed as `metalhub manager` parses).
func TestChartFlagsExist(t *testing.T) {
	objs := decode(t, helmTemplate(t,
		"metal.registry.url=http://192.0.2.1:8082", "metal.externalBootProvider=true",
		"metal.discoveryNamespace=d", "metal.discoveryImage=img", "metal.probeImage=probe", "metal.cleaningPolicy=AllDisks",
		"delivery.allowedNamespaces={a,b}", "delivery.eventBasedReconcile=true",
		"delivery.secretsNamespace=s", "delivery.settingsNamespace=s",
		"extraArgs={--zap-log-level=debug}"))
	args := managerArgs(t, objs)
	if len(args) < 15 || args[0] != "manager" {
		t.Fatalf("unexpected args %q", args)
	}
	for _, v := range []string{"--leader-elect", "--external-boot-provider", "--cleaning-policy=AllDisks", "--delivery-event-based-reconcile", "--zap-log-level=debug"} {
		if !contains(args, v) {
			t.Errorf("args %q lack %s", args, v)
		}
	}
	parseManagerFlags(t, args[1:])
	// And the flags of config/default.
	parseManagerFlags(t, managerArgs(t, decode(t, kustomize(t, filepath.Join(root, "config", "default"))))[1:])

	// Registry off: the flag turns it off, no port, no Service.
	objs = decode(t, helmTemplate(t, "metal.registry.enabled=false"))
	args = managerArgs(t, objs)
	if !contains(args, "--registry-bind-address=0") {
		t.Errorf("registry disabled: args %q", args)
	}
	for _, o := range objs {
		if o.GetKind() == "Service" && strings.HasSuffix(o.GetName(), "-registry") {
			t.Errorf("registry disabled, but the chart renders Service %s", o.GetName())
		}
	}
	// Delivery only: no metal flags; metal only: no delivery flags or apply role.
	args = managerArgs(t, decode(t, helmTemplate(t, "controllers={delivery}")))
	for _, a := range args {
		if strings.HasPrefix(a, "--registry") {
			t.Errorf("delivery only: metal flag %s", a)
		}
	}
	objs = decode(t, helmTemplate(t, "controllers={metal}"))
	for _, a := range managerArgs(t, objs) {
		if strings.HasPrefix(a, "--delivery") {
			t.Errorf("metal only: delivery flag %s", a)
		}
	}
	for _, o := range objs {
		if strings.Contains(o.GetName(), "delivery-apply") {
			t.Errorf("metal only, but the chart renders %s %s", o.GetKind(), o.GetName())
		}
	}
	// Webhooks on (the default): the flags, the port, the certificate volume and the objects;
	// off: none of them.
	objs = decode(t, helmTemplate(t))
	args = managerArgs(t, objs)
	for _, v := range []string{"--enable-webhooks", "--webhook-port=9443", "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs"} {
		if !contains(args, v) {
			t.Errorf("webhooks on: args %q lack %s", args, v)
		}
	}
	for _, kind := range []string{"ValidatingWebhookConfiguration", "Issuer", "Certificate", "Namespace"} {
		if !hasKind(objs, kind) {
			t.Errorf("defaults render no %s", kind)
		}
	}
	objs = decode(t, helmTemplate(t, "webhook.enabled=false", "namespace.create=false", "controllers={metal}"))
	for _, a := range managerArgs(t, objs) {
		if strings.Contains(a, "webhook") {
			t.Errorf("webhooks off: flag %s", a)
		}
	}
	for _, kind := range []string{"ValidatingWebhookConfiguration", "Issuer", "Certificate", "Namespace"} {
		if hasKind(objs, kind) {
			t.Errorf("webhook.enabled=false, namespace.create=false: the chart renders a %s", kind)
		}
	}
	// Delivery without the webhooks is refused: nothing would check that whoever writes an
	// InfrahubSync or VidraResource may act as the ServiceAccount it names (issue 42).
	for _, values := range [][]string{{"webhook.enabled=false"}, {"webhook.enabled=false", "controllers={delivery}"}} {
		if out, err := helmTemplateErr(values...); err == nil || !strings.Contains(err.Error(), "delivery needs the admission webhooks") {
			t.Errorf("%v: err %v\n%s", values, err, out)
		}
	}
	// Without cert-manager the CA bundle is required.
	if out, err := helmTemplateErr("webhook.certManager.enabled=false"); err == nil || !strings.Contains(err.Error(), "webhook.caBundle") {
		t.Errorf("webhook.certManager.enabled=false without caBundle: err %v\n%s", err, out)
	}
	// Shards: every replica acts on its share, so no leader election; delivery is refused.
	args = managerArgs(t, decode(t, helmTemplate(t, "shards=12", "controllers={metal}")))
	if !contains(args, "--shards=12") || contains(args, "--leader-elect") {
		t.Errorf("shards=12: args %q, want --shards=12 and no --leader-elect", args)
	}
	parseManagerFlags(t, args[1:])
	if out, err := helmTemplateErr("shards=12"); err == nil || !strings.Contains(err.Error(), "metal family only") {
		t.Errorf("shards=12 with delivery: err %v\n%s", err, out)
	}
	// A family the binary does not have is refused at render time.
	if out, err := helmTemplateErr("controllers={metal,bogus}"); err == nil {
		t.Errorf("controllers={metal,bogus} rendered:\n%s", out)
	}
}

// parseManagerFlags parses args with the flags `metalhub manager` binds (cmd/metalhub runManager).
func parseManagerFlags(t *testing.T, args []string) {
	t.Helper()
	fs := flag.NewFlagSet("metalhub manager", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	opts := manager.DefaultOptions()
	opts.BindFlags(fs)
	fs.String("kubeconfig", "", "")
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Errorf("metalhub manager refuses %q: %v", args, err)
	}
	if fs.NArg() > 0 {
		t.Errorf("metalhub manager: unexpected arguments %q", fs.Args())
	}
}

func managerArgs(t *testing.T, objs []*unstructured.Unstructured) []string {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			c := c.(map[string]any)
			if c["name"] == "manager" {
				var args []string
				for _, a := range c["args"].([]any) {
					args = append(args, a.(string))
				}
				return args
			}
		}
	}
	t.Fatal("no manager container rendered")
	return nil
}

// ---- rendering ------------------------------------------------------------------------------

func kustomize(t *testing.T, dir string) []byte {
	t.Helper()
	out, err := run(filepath.Join(env.AssetsDir, "kubectl"), "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helmTemplate(t *testing.T, set ...string) []byte {
	t.Helper()
	out, err := helmTemplateErr(set...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func helmTemplateErr(set ...string) ([]byte, error) {
	helm, err := helmBinary()
	if err != nil {
		return nil, err
	}
	args := []string{"template", release, filepath.Join(root, "charts", "metalhub"), "--namespace", namespace, "--include-crds"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return run(helm, args...)
}

func run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("decoding rendered YAML: %v", err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

func key(o *unstructured.Unstructured) string {
	k := o.GetAPIVersion() + " " + o.GetKind() + " "
	if o.GetNamespace() != "" {
		k += o.GetNamespace() + "/"
	}
	return k + o.GetName()
}

func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if _, dup := m[key(o)]; dup {
			t.Errorf("%s rendered twice", key(o))
		}
		m[key(o)] = o
	}
	return m
}

func hasKind(objs []*unstructured.Unstructured, kind string) bool {
	for _, o := range objs {
		if o.GetKind() == kind {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// lineDiff shows the lines only in a (-) or only in b (+), in order (longest common subsequence).
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j = i+1, j+1
		case j < len(y) && (i == len(x) || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, "+ "+y[j])
			j++
		default:
			out = append(out, "- "+x[i])
			i++
		}
	}
	return strings.Join(out, "\n")
}

// The API server accepts both renderings and the samples (kubectl apply --dry-run=server, as
// the cluster admin of the test control plane).
func TestServerDryRun(t *testing.T) {
	ensureNamespace(t, namespace)
	installCertManagerStandIns(t)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"config/default", kustomize(t, filepath.Join(root, "config", "default"))},
		{"chart", helmTemplate(t)},
		{"chart metal-only", helmTemplate(t, metalOnlyValues...)},
		{"chart no-certmanager", helmTemplate(t, "webhook.certManager.enabled=false", "webhook.caBundle="+caBundle)},
		{"config/samples", kustomize(t, filepath.Join(root, "config", "samples"))},
	} {
		t.Run(strings.ReplaceAll(tc.name, "/", "-"), func(t *testing.T) {
			out, err := kubectlStdin(tc.data, "apply", "--dry-run=server", "-f", "-")
			if err != nil {
				t.Fatal(err)
			}
			n := strings.Count(strings.TrimSpace(string(out)), "\n") + 1
			if want := len(decode(t, tc.data)); n != want {
				t.Errorf("kubectl applied %d objects, want %d:\n%s", n, want, out)
			}
			t.Logf("%s: %d objects accepted", tc.name, n)
		})
	}
}

func kubectlStdin(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(env.AssetsDir, "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out, nil
}

// installCertManagerStandIns installs CRDs for cert-manager's Issuer and Certificate that accept
// any content: this control plane has no cert-manager, and the dry run checks our objects, not
// cert-manager's schema.
func installCertManagerStandIns(t *testing.T) {
	t.Helper()
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, kind := range []string{"Issuer", "Certificate"} {
		plural := strings.ToLower(kind) + "s"
		crds = append(crds, &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + ".cert-manager.io"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: "cert-manager.io", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
			},
		})
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
		t.Fatal(err)
	}
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// No RBAC rule in config/ or the chart grants '*' (verbs, resources or API groups).
func TestNoWildcardRights(t *testing.T) {
	for name, data := range map[string][]byte{
		"config/default": kustomize(t, filepath.Join(root, "config", "default")),
		"chart":          helmTemplate(t),
	} {
		n := 0
		for _, o := range decode(t, data) {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				n++
				for _, field := range []string{"verbs", "resources", "apiGroups", "nonResourceURLs"} {
					values, _, _ := unstructured.NestedStringSlice(r.(map[string]any), field)
					for _, v := range values {
						if strings.Contains(v, "*") {
							t.Errorf("%s: %s %s grants %s %q", name, o.GetKind(), o.GetName(), field, v)
						}
					}
				}
			}
		}
		if n < 10 {
			t.Errorf("%s: only %d RBAC rules rendered", name, n)
		}
	}
}

// The Deployment of config/default is hardened and highly available as docs/install.md says.
func TestDeploymentHardening(t *testing.T) {
	var dep *unstructured.Unstructured
	for _, o := range decode(t, kustomize(t, filepath.Join(root, "config", "default"))) {
		if o.GetKind() == "Deployment" {
			dep = o
		}
	}
	if dep == nil {
		t.Fatal("no Deployment")
	}
	want := map[string]any{
		"spec.replicas": int64(2),
		"spec.template.spec.securityContext.runAsNonRoot":                          true,
		"spec.template.spec.containers.0.securityContext.readOnlyRootFilesystem":   true,
		"spec.template.spec.containers.0.securityContext.allowPrivilegeEscalation": false,
		"spec.template.spec.containers.0.securityContext.capabilities.drop.0":      "ALL",
		"spec.template.spec.containers.0.livenessProbe.httpGet.path":               "/healthz",
		"spec.template.spec.containers.0.readinessProbe.httpGet.path":              "/readyz",
		"spec.template.spec.containers.0.resources.requests.cpu":                   "100m",
		"spec.template.spec.containers.0.resources.requests.memory":                "128Mi",
		"spec.template.spec.serviceAccountName":                                    serviceAccount,
		"spec.template.spec.containers.0.ports.2.containerPort":                    int64(8082),
		"spec.template.spec.securityContext.seccompProfile.type":                   "RuntimeDefault",
		"spec.template.spec.containers.0.securityContext.capabilities.add":         nil,
		"spec.template.spec.containers.0.securityContext.privileged":               nil,
		"spec.template.spec.hostNetwork":                                           nil,
		"spec.template.spec.containers.0.livenessProbe.httpGet.port":               "health",
		"spec.template.spec.containers.0.readinessProbe.httpGet.port":              "health",
		"spec.template.spec.containers.0.ports.1.containerPort":                    int64(8081),
		"spec.template.spec.containers.0.ports.0.containerPort":                    int64(8080),
		"spec.template.spec.containers.0.resources.limits.memory":                  "512Mi",
		"spec.template.spec.containers.0.securityContext.capabilities.drop.1":      nil,
		"spec.template.spec.containers.0.securityContext.runAsUser":                nil,
		"spec.template.spec.securityContext.runAsUser":                             int64(65532),
	}
	for path, v := range want {
		// Numbers decode as float64 or int64 depending on the decoder: compare printed values.
		if got := lookup(dep.Object, path); fmt.Sprint(got) != fmt.Sprint(v) {
			t.Errorf("Deployment %s = %#v, want %#v", path, got, v)
		}
	}
	if args := managerArgs(t, []*unstructured.Unstructured{dep}); !contains(args, "--leader-elect") {
		t.Errorf("leader election off: %q", args)
	}
}

// lookup follows a dotted path through maps and (numeric) list indexes; nil if absent.
func lookup(obj any, path string) any {
	for _, p := range strings.Split(path, ".") {
		switch o := obj.(type) {
		case map[string]any:
			obj = o[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i >= len(o) {
				return nil
			}
			obj = o[i]
		default:
			return nil
		}
	}
	return obj
}

// Issue 42 finding 7: the chart sets up the identity that syncs naming no ServiceAccount apply
// as (a ServiceAccount bound to the delivery-apply role, standing in for Vidra's own ClusterRole)
// and passes it to the operator, so Vidra's manifests deliver as written; values name another
// or none.
func TestChartDeliveryIdentity(t *testing.T) {
	const flag = "--delivery-default-service-account="
	identity := func(objs []*unstructured.Unstructured) (sa, binding bool) {
		for _, o := range objs {
			switch {
			case o.GetKind() == "ServiceAccount" && o.GetNamespace() == namespace && o.GetName() == release+"-delivery":
				sa = true
			case o.GetKind() == "ClusterRoleBinding" && o.GetName() == release+"-delivery":
				role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
				subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
				binding = role == release+"-delivery-apply-default" && len(subjects) == 1 &&
					fmt.Sprint(subjects[0]) == fmt.Sprint(map[string]any{"kind": "ServiceAccount", "name": release + "-delivery", "namespace": namespace})
			}
		}
		return sa, binding
	}
	defaultSA := func(args []string) string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, flag); ok {
				return v
			}
		}
		return ""
	}
	for _, tc := range []struct {
		name        string
		values      []string
		wantSA      string
		wantObjects bool
	}{
		{"defaults", nil, namespace + "/" + release + "-delivery", true},
		{"another default", []string{"delivery.defaultServiceAccount=team/deployer"}, "team/deployer", true},
		{"none", []string{"delivery.serviceAccount.create=false"}, "", false},
		{"metal only", []string{"controllers={metal}"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := decode(t, helmTemplate(t, tc.values...))
			args := managerArgs(t, objs)
			if got := defaultSA(args); got != tc.wantSA {
				t.Errorf("%s%q, want %q (args %q)", flag, got, tc.wantSA, args)
			}
			if sa, binding := identity(objs); sa != tc.wantObjects || binding != tc.wantObjects {
				t.Errorf("ServiceAccount %s-delivery rendered %t, bound to the delivery-apply role %t; want %t", release, sa, binding, tc.wantObjects)
			}
			parseManagerFlags(t, args[1:])
		})
	}
}
