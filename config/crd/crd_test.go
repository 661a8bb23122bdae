package crd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/webhook"
)

var env *testenv.Env

// The control plane runs with metalhub's admission webhooks served from this process and
// registered (as `metalhub dev` does), so every sample goes through the CRD schema and the
// webhooks, as in a cluster installed from config/default.
func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &env, func(m *testing.M) int {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dir, err := os.MkdirTemp("", "metalhub-webhook-certs-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		o := webhook.DefaultOptions()
		o.Enabled, o.Host, o.Port, o.CertDir = true, "127.0.0.1", 0, dir
		// Syncs in these tests name no ServiceAccount: the operator applies as itself.
		o.Delivery.AllowOperatorIdentity = true
		done, err := webhook.StartLocal(ctx, env.Config, o, logr.Discard())
		if err != nil {
			fmt.Fprintln(os.Stderr, "starting the webhooks:", err)
			return 1
		}
		code := m.Run()
		cancel()
		<-done
		return code
	}))
}

// samplesDir is shared/compat/samples beside the checkout, where users' manifests of both
// reference systems are kept (CI lays a copy of shared/ there too).
func samplesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("METALHUB_COMPAT_SAMPLES")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), "..", "shared", "compat", "samples")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("compat samples not found at %s (set METALHUB_COMPAT_SAMPLES): %v", dir, err)
	}
	return dir
}

// readObjects decodes every document of a manifest file the way kubectl does (YAML 1.1 scalars).
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "{}" {
			continue
		}
		// Through JSON, as kubectl sends it: integers stay integers.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		objs = append(objs, u)
	}
}

func files(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		matches, err := filepath.Glob(filepath.Join(d, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, matches...)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("no samples in %v", dirs)
	}
	return out
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// create creates obj with strict field validation (kubectl's default), in namespace default when
// the kind is namespaced and the manifest names none.
func create(c context.Context, obj *unstructured.Unstructured) error {
	mapping, err := env.Client.RESTMapper().RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
	if err != nil {
		return fmt.Errorf("no mapping for %s: %w", obj.GroupVersionKind(), err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace && obj.GetNamespace() == "" {
		obj.SetNamespace("default")
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		// The namespace a sample names exists in its user's cluster (the reference's chart
		// makes metal-servers for ServerWirings); the sample itself stays as written.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: obj.GetNamespace()}}
		if err := env.Client.Create(c, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	return env.Client.Create(c, obj, client.FieldValidation("Strict"))
}

func isOurs(obj *unstructured.Unstructured) bool {
	g := obj.GroupVersionKind().Group
	return g == "metal.ironcore.dev" || g == "maintenance.metal.ironcore.dev" || g == "system.metal.ironcore.dev" || g == "baseboard.metal.ironcore.dev" ||
		g == "readiness.metal.ironcore.dev" || g == "infrahub.operators.com"
}

// Every sample users of the references write must be accepted, and read back with every field it
// set unchanged (defaults may add fields; status is the controllers' and not writable on create).
func TestSamplesAccepted(t *testing.T) {
	root := samplesDir(t)
	paths := files(t,
		filepath.Join(root, "metal-operator"), filepath.Join(root, "metal-operator", "against-emulators"),
		filepath.Join(root, "metal-operator", "visualizer"),
		filepath.Join(root, "vidra"), filepath.Join(root, "vidra", "against-fake"))
	// The companion operator's samples, every one: metalhub serves all its groups
	// (maintenance, system, baseboard and readiness .metal.ironcore.dev).
	paths = append(paths, files(t, filepath.Join(root, "metal-maintenance-operator"))...)
	kinds := map[string]bool{}
	for _, path := range paths {
		rel, _ := filepath.Rel(root, path)
		t.Run(rel, func(t *testing.T) {
			c := ctx(t)
			objs := readObjects(t, path)
			for _, obj := range objs {
				registerCluster(t, obj)
				sent := obj.DeepCopy()
				if err := create(c, obj); err != nil {
					t.Fatalf("%s %s rejected: %v", obj.GetKind(), obj.GetName(), err)
				}
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
				if !isOurs(obj) {
					continue
				}
				kinds[obj.GetKind()] = true
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(obj.GroupVersionKind())
				if err := env.Client.Get(c, client.ObjectKeyFromObject(obj), got); err != nil {
					t.Fatal(err)
				}
				delete(sent.Object, "status")
				delete(sent.Object, "metadata")
				if diff := missing("", sent.Object, got.Object); diff != "" {
					t.Errorf("%s %s changed on the way through the API server: %s", obj.GetKind(), obj.GetName(), diff)
				}
			}
		})
	}
	// One object of every kind the references' users write must have gone through.
	for _, k := range []string{"BMC", "BMCSecret", "Endpoint", "Server", "ServerClaim", "ServerBootConfiguration",
		"ServerMaintenance", "InfrahubSync", "VidraResource", "BIOSVersion", "BIOSVersionSet", "BIOSSettings", "BIOSSettingsSet", "BMCVersion", "BMCVersionSet", "BMCSettings", "BMCSettingsSet", "ServerWiring", "ServerReadinessRule"} {
		if !kinds[k] {
			t.Errorf("no sample of kind %s was applied", k)
		}
	}
}

// missing reports the first field of want that got lacks or holds differently.
func missing(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want object, got %T", path, got)
		}
		for k, v := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: dropped", path, k)
			}
			if d := missing(path+"."+k, v, gv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want %v, got %v", path, want, got)
		}
		for i := range w {
			if d := missing(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Sprintf("%s: want %v (%T), got %v (%T)", path, want, want, got, got)
		}
		return ""
	}
}

// The samples a strict API server refuses as written must be refused here too, with a reason.
func TestSamplesRejected(t *testing.T) {
	root := samplesDir(t)
	for _, path := range files(t, filepath.Join(root, "metal-operator", "expect-reject"), filepath.Join(root, "vidra", "expect-reject")) {
		rel, _ := filepath.Rel(root, path)
		t.Run(rel, func(t *testing.T) {
			c := ctx(t)
			var rejected error
			for _, obj := range readObjects(t, path) {
				if err := create(c, obj); err != nil {
					rejected = err
					continue
				}
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
			}
			if rejected == nil {
				t.Fatal("accepted, but a strict API server refuses it")
			}
			if !apierrors.IsInvalid(rejected) && !apierrors.IsBadRequest(rejected) {
				t.Fatalf("rejected for the wrong reason: %v", rejected)
			}
			t.Logf("rejected: %v", rejected)
		})
	}
}

func mustObject(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	return u
}

// Invalid objects and forbidden changes are refused by the API server with a message that says
// what is wrong.
func TestInvalidObjectsRejected(t *testing.T) {
	tests := []struct {
		name    string
		initial string // created first, when set
		update  string // then created (no initial, or create set) or applied as an update
		create  bool
		want    string // in the error message
	}{{
		name:   "unknown power enum",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: bad-power, namespace: default}\nspec: {power: Maybe, image: img}",
		want:   `spec.power: Unsupported value: "Maybe": supported values: "On", "Off"`,
	}, {
		name:   "BIOSVersion without version",
		update: "apiVersion: system.metal.ironcore.dev/v1alpha1\nkind: BIOSVersion\nmetadata: {name: no-version}\nspec: {serverRef: {name: s}, version: '', image: {URI: 'http://x/bios.bin'}}",
		want:   "version is required",
	}, {
		name:    "BIOSVersion serverRef changed",
		initial: "apiVersion: system.metal.ironcore.dev/v1alpha1\nkind: BIOSVersion\nmetadata: {name: repoint-bios}\nspec: {serverRef: {name: a}, version: '1', image: {URI: 'http://x/bios.bin'}}",
		update:  "apiVersion: system.metal.ironcore.dev/v1alpha1\nkind: BIOSVersion\nmetadata: {name: repoint-bios}\nspec: {serverRef: {name: b}, version: '1', image: {URI: 'http://x/bios.bin'}}",
		want:    "serverRef is immutable",
	}, {
		name:   "BIOSVersionSet with maxUnavailable 0",
		update: "apiVersion: system.metal.ironcore.dev/v1alpha1\nkind: BIOSVersionSet\nmetadata: {name: zero}\nspec: {serverSelector: {}, biosVersionTemplate: {version: '1', image: {URI: 'http://x/bios.bin'}}, rollout: {maxUnavailable: 0}}",
		want:   "maxUnavailable is a count of at least 1 or a percentage",
	}, {
		name:   "BIOSVersionSet with maxUnavailable 150%",
		update: "apiVersion: system.metal.ironcore.dev/v1alpha1\nkind: BIOSVersionSet\nmetadata: {name: toomuch}\nspec: {serverSelector: {}, biosVersionTemplate: {version: '1', image: {URI: 'http://x/bios.bin'}}, rollout: {maxUnavailable: '150%'}}",
		want:   "maxUnavailable is a count of at least 1 or a percentage",
	}, {
		name:   "BIOSVersion with an unknown maintenance policy",
		update: "apiVersion: system.metal.ironcore.dev/v1alpha1\nkind: BIOSVersion\nmetadata: {name: bad-policy}\nspec: {serverRef: {name: a}, version: '1', serverMaintenancePolicy: Whenever, image: {URI: 'http://x/bios.bin'}}",
		want:   `Unsupported value: "Whenever"`,
	}, {
		name:   "claim without power",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: no-power, namespace: default}\nspec: {image: img}",
		want:   "spec.power: Required value",
	}, {
		name:   "bad infrahubAPIURL",
		update: "apiVersion: infrahub.operators.com/v1alpha1\nkind: InfrahubSync\nmetadata: {name: bad-url}\nspec: {source: {infrahubAPIURL: 'ftp://infrahub', artefactName: a}}",
		want:   "spec.source.infrahubAPIURL in body should match",
	}, {
		name:   "bad destination server",
		update: "apiVersion: infrahub.operators.com/v1alpha1\nkind: VidraResource\nmetadata: {name: bad-dest}\nspec: {destination: {server: 'not a url'}}",
		want:   "spec.destination.server in body should match",
	}, {
		name:   "BMC with both access and endpointRef",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMC\nmetadata: {name: both}\nspec: {access: {ip: 10.0.0.1}, endpointRef: {name: e}, bmcSecretRef: {name: s}, protocol: {name: Redfish, port: 443}}",
		want:   "exactly one of access or endpointRef must be set",
	}, {
		name:   "BMC with neither access nor endpointRef",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMC\nmetadata: {name: neither}\nspec: {bmcSecretRef: {name: s}, protocol: {name: Redfish, port: 443}}",
		want:   "exactly one of access or endpointRef must be set",
	}, {
		name:   "BMC certificate with a signer name and an issuer",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMC\nmetadata: {name: cert-both}\nspec: {access: {ip: 10.0.0.1}, bmcSecretRef: {name: s}, protocol: {name: Redfish, port: 443}, certificate: {signerName: example.com/bmc, caBundleRef: {namespace: pki, name: ca}, issuerRef: {name: i, namespace: pki}}}",
		want:   "exactly one of signerName or issuerRef must be set",
	}, {
		name:   "BMC certificate with a signer name and no CA",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMC\nmetadata: {name: cert-noca}\nspec: {access: {ip: 10.0.0.1}, bmcSecretRef: {name: s}, protocol: {name: Redfish, port: 443}, certificate: {signerName: example.com/bmc}}",
		want:   "caBundleRef is required with signerName",
	}, {
		name:    "BMC access changed",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMC\nmetadata: {name: moved}\nspec: {access: {ip: 10.0.0.1}, bmcSecretRef: {name: s}, protocol: {name: Redfish, port: 443}}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMC\nmetadata: {name: moved}\nspec: {access: {ip: 10.0.0.2}, bmcSecretRef: {name: s}, protocol: {name: Redfish, port: 443}}",
		want:    "access is immutable",
	}, {
		name:    "claim serverRef changed",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: repoint, namespace: default}\nspec: {power: 'On', image: img, serverRef: {name: a}}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: repoint, namespace: default}\nspec: {power: 'On', image: img, serverRef: {name: b}}",
		want:    "serverRef is immutable",
	}, {
		name:    "claim serverRef removed",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: unref, namespace: default}\nspec: {power: 'On', image: img, serverRef: {name: a}}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: unref, namespace: default}\nspec: {power: 'On', image: img}",
		want:    "serverRef cannot be removed once set",
	}, {
		name:    "bound claim serverSelector changed",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: reselect, namespace: default}\nspec: {power: 'On', image: img, serverRef: {name: s}, serverSelector: {matchLabels: {a: b}}}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: reselect, namespace: default}\nspec: {power: 'On', image: img, serverRef: {name: s}, serverSelector: {matchLabels: {a: c}}}",
		want:    "serverSelector is immutable once the claim is bound",
	}, {
		name:    "server claim ref re-pointed",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: Server\nmetadata: {name: claimed}\nspec: {systemUUID: u1, serverClaimRef: {name: c1, namespace: default}}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: Server\nmetadata: {name: claimed}\nspec: {systemUUID: u1, serverClaimRef: {name: c2, namespace: default}}",
		want:    "name is immutable; remove the reference instead",
	}, {
		name:   "server unknown reclaim policy",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: Server\nmetadata: {name: reclaim}\nspec: {systemUUID: u2, reclaimPolicy: Destroy}",
		want:   `spec.reclaimPolicy: Unsupported value: "Destroy"`,
	}, {
		name:    "immutable BMCSecret data changed",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: frozen-data}\nimmutable: true\ndata: {username: YWRtaW4=, password: b2xk}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: frozen-data}\nimmutable: true\ndata: {username: YWRtaW4=, password: bmV3}",
		want:    "data is immutable because immutable is true",
	}, {
		name:    "immutable BMCSecret stringData added",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: frozen-string}\nimmutable: true\ndata: {username: YWRtaW4=}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: frozen-string}\nimmutable: true\ndata: {username: YWRtaW4=}\nstringData: {password: new}",
		want:    "stringData is immutable because immutable is true",
	}, {
		name:    "BMCSecret immutable unset",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: thawed}\nimmutable: true\nstringData: {username: admin}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: thawed}\nstringData: {username: admin}",
		want:    "immutable cannot be unset once true",
	}, {
		name:   "infrahubAPIURL port out of range",
		update: "apiVersion: infrahub.operators.com/v1alpha1\nkind: InfrahubSync\nmetadata: {name: bad-port}\nspec: {source: {infrahubAPIURL: 'http://infrahub:99999', artefactName: a}}",
		want:   `spec.source.infrahubAPIURL: Invalid value: "http://infrahub:99999": port must be between 1 and 65535`,
	}, {
		name:   "infrahubAPIURL bad host",
		update: "apiVersion: infrahub.operators.com/v1alpha1\nkind: InfrahubSync\nmetadata: {name: bad-host}\nspec: {source: {infrahubAPIURL: 'https://infra..hub', artefactName: a}}",
		want:   "host must be a DNS name or an IPv4 address",
	}, {
		name:   "destination namespace not a name",
		update: "apiVersion: infrahub.operators.com/v1alpha1\nkind: InfrahubSync\nmetadata: {name: bad-ns}\nspec: {source: {infrahubAPIURL: 'http://infrahub', artefactName: a}, destination: {namespace: Web_Servers}}",
		want:   `spec.destination.namespace: Invalid value: "Web_Servers": must be a namespace name`,
	}, {
		name:   "destination server port out of range",
		update: "apiVersion: infrahub.operators.com/v1alpha1\nkind: VidraResource\nmetadata: {name: bad-dest-port}\nspec: {destination: {server: 'https://k8s:0'}}",
		want:   "port must be between 1 and 65535",
	}, {
		name:    "duplicate Endpoint MAC (webhook)",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: Endpoint\nmetadata: {name: mac-owner}\nspec: {macAddress: '52:54:00:0A:0B:0C', ip: 10.0.0.1}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: Endpoint\nmetadata: {name: mac-thief}\nspec: {macAddress: '52-54-00-0a-0b-0c', ip: 10.0.0.2}",
		create:  true,
		want:    `spec.macAddress: Duplicate value: "52-54-00-0a-0b-0c": MAC address 52:54:00:0a:0b:0c is already used by Endpoint "mac-owner"`,
	}, {
		name:   "claim selector Exists with values (webhook)",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerClaim\nmetadata: {name: exists-values, namespace: default}\nspec: {power: 'On', image: img, serverSelector: {matchExpressions: [{key: gpu, operator: Exists, values: ['yes']}]}}",
		want:   "spec.serverSelector.matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
	}, {
		name:   "sync target date in days (webhook)",
		update: "apiVersion: infrahub.operators.com/v1alpha1\nkind: InfrahubSync\nmetadata: {name: days}\nspec: {source: {infrahubAPIURL: 'http://infrahub', artefactName: a, targetDate: now-2d}}",
		want:   `spec.source.targetDate: Invalid value: "now-2d": Infrahub does not understand day or week units; use hours, e.g. now-48h`,
	}, {
		name:   "maintenance unknown policy",
		update: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: ServerMaintenance\nmetadata: {name: pol, namespace: default}\nspec: {serverRef: {name: s}, policy: Whenever}",
		want:   `spec.policy: Unsupported value: "Whenever"`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ctx(t)
			var err error
			var obj *unstructured.Unstructured
			if tc.initial != "" {
				obj = mustObject(t, tc.initial)
				if err := create(c, obj); err != nil {
					t.Fatalf("initial object rejected: %v", err)
				}
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
			}
			if obj != nil && !tc.create {
				upd := mustObject(t, tc.update)
				upd.SetNamespace(obj.GetNamespace())
				upd.SetResourceVersion(obj.GetResourceVersion())
				err = env.Client.Update(c, upd)
			} else {
				obj := mustObject(t, tc.update)
				if err = create(c, obj); err == nil {
					t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
				}
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message %q does not say %q", err.Error(), tc.want)
			}
		})
	}
}

// What the rules above do not refuse: a BMCSecret not marked immutable may be edited (a
// password rotation), an immutable one may be relabelled and marked immutable later.
func TestAllowedChanges(t *testing.T) {
	tests := []struct{ name, initial, update string }{{
		name:    "mutable BMCSecret rotated",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: rotate}\nstringData: {username: admin, password: old}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: rotate}\nstringData: {username: admin, password: new}",
	}, {
		name:    "BMCSecret made immutable",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: freeze}\nstringData: {username: admin}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: freeze}\nimmutable: true\nstringData: {username: admin}",
	}, {
		name:    "immutable BMCSecret relabelled",
		initial: "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: relabel}\nimmutable: true\ndata: {username: YWRtaW4=}",
		update:  "apiVersion: metal.ironcore.dev/v1alpha1\nkind: BMCSecret\nmetadata: {name: relabel, labels: {rack: r1}}\nimmutable: true\ndata: {username: YWRtaW4=}",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ctx(t)
			obj := mustObject(t, tc.initial)
			if err := create(c, obj); err != nil {
				t.Fatalf("initial object rejected: %v", err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
			upd := mustObject(t, tc.update)
			upd.SetResourceVersion(obj.GetResourceVersion())
			if err := env.Client.Update(c, upd); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// registerCluster creates the kubeconfig Secret that registers the remote cluster a delivery
// sample sends to, as the cluster a user switches from has it: admission refuses a destination
// no Secret registers.
func registerCluster(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	server, _, _ := unstructured.NestedString(obj.Object, "spec", "destination", "server")
	u, err := url.Parse(server)
	if server == "" || err != nil || u.Hostname() == "" || u.Hostname() == "kubernetes.default.svc" {
		return
	}
	value := u.Hostname()
	if u.Port() != "" {
		value += "_" + u.Port()
	}
	// The Secret names the syncs it serves (docs/delivery.md): this one.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubeconfig-" + obj.GetName(),
		Labels:      map[string]string{infrahubv1alpha1.ClusterKubeconfigLabel: value},
		Annotations: map[string]string{infrahubv1alpha1.SyncsAnnotation: obj.GetName()}},
		StringData: map[string]string{"kubeconfig": "apiVersion: v1\nkind: Config\n"}}
	if err := env.Client.Create(ctx(t), sec); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), sec) })
}
