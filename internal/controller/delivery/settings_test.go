package delivery

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/policy"
)

func TestSettingsOverlay(t *testing.T) {
	t.Parallel()
	base := policy.DefaultSettings()
	tests := []struct {
		name     string
		data     map[string]string
		want     policy.Settings
		problems []string
	}{
		{name: "none", data: nil, want: base},
		{name: "reference sample", data: map[string]string{"requeueSyncAfter": "1m", "requeueResourcesAfter": "1m", "queryName": "ArtifactIDs", "eventBasedReconcile": "true"},
			want: policy.Settings{RequeueSyncAfter: time.Minute, RequeueResourcesAfter: time.Minute, QueryName: "ArtifactIDs", EventBasedReconcile: true}},
		{name: "bare seconds", data: map[string]string{"requeueSyncAfter": "30"},
			want: policy.Settings{RequeueSyncAfter: 30 * time.Second, RequeueResourcesAfter: base.RequeueResourcesAfter, QueryName: base.QueryName}},
		{name: "malformed values keep the base", data: map[string]string{"requeueSyncAfter": "soon", "requeueResourcesAfter": "0s", "eventBasedReconcile": "yes please", "queryName": " "},
			want: base, problems: []string{"eventBasedReconcile", "queryName: empty", "requeueResourcesAfter", "requeueSyncAfter"}},
		{name: "unknown key", data: map[string]string{"requeueSyncAfer": "5m"}, want: base, problems: []string{`unknown key "requeueSyncAfer"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := base.Overlay(tc.data)
			if got != tc.want {
				t.Fatalf("settings %+v, want %+v", got, tc.want)
			}
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d", problems, len(tc.problems))
			}
			for i, p := range tc.problems {
				if !strings.Contains(problems[i], p) {
					t.Fatalf("problem %d %q does not mention %q", i, problems[i], p)
				}
			}
		})
	}
}

func TestOptionsDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	o := Options{}.withDefaults()
	if o.Settings != policy.DefaultSettings() || o.InfrahubTimeout <= 0 || o.ClusterTimeout <= 0 {
		t.Fatalf("zero options not defaulted: %+v", o)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	o.Policy.AllowedKinds = []string{"apps/v1 Deployment"}
	if err := o.validate(); err == nil {
		t.Fatal("malformed allowed kind accepted")
	}
}

func TestBindFlags(t *testing.T) {
	t.Parallel()
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.BindFlags(fs)
	err := fs.Parse([]string{
		"--delivery-requeue-sync-after=30s", "--delivery-requeue-resources-after=5m", "--delivery-query-name=MyQuery",
		"--delivery-event-based-reconcile", "--delivery-allowed-kinds=Deployment.apps, ConfigMap",
		"--delivery-allowed-namespaces=apps", "--delivery-settings-namespace=ops", "--delivery-prune-max-fraction=0.2",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Settings{RequeueSyncAfter: 30 * time.Second, RequeueResourcesAfter: 5 * time.Minute, QueryName: "MyQuery", EventBasedReconcile: true}
	if o.Settings != want || o.SettingsNamespace != "ops" || o.InfrahubTimeout <= 0 {
		t.Fatalf("options %+v", o)
	}
	if o.PruneMaxFraction != 0.2 {
		t.Fatalf("prune max fraction %g", o.PruneMaxFraction)
	}
	if d := DefaultOptions(); d.PruneMaxFraction != 0.5 {
		t.Fatalf("default prune max fraction %g", d.PruneMaxFraction)
	}
	if strings.Join(o.Policy.AllowedKinds, "|") != "Deployment.apps|ConfigMap" || strings.Join(o.Policy.AllowedNamespaces, "|") != "apps" {
		t.Fatalf("policy %+v", o.Policy)
	}
}

// The settings come from the settings namespace only, and two ConfigMaps there are a conflict
// under which the flags apply: no tenant's ConfigMap sorts its way in.
func TestSettingsOnlyFromTheirNamespace(t *testing.T) {
	t.Parallel()
	cm := func(ns, name, interval string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{manifests.SettingsLabel: manifests.SettingsLabelValue}},
			Data: map[string]string{"requeueSyncAfter": interval}}
	}
	base := policy.DefaultSettings()
	for _, tc := range []struct {
		name        string
		objs        []client.Object
		want        time.Duration
		conflicting int
	}{
		{"the admin's", []client.Object{cm("metalhub-system", "vidra", "10m")}, 10 * time.Minute, 0},
		{"a tenant's elsewhere is ignored", []client.Object{cm("metalhub-system", "vidra", "10m"), cm("aaa", "x", "1s")}, 10 * time.Minute, 0},
		{"only a tenant's", []client.Object{cm("aaa", "x", "1s")}, base.RequeueSyncAfter, 0},
		{"two in the namespace", []client.Object{cm("metalhub-system", "vidra", "10m"), cm("metalhub-system", "a", "20m")}, base.RequeueSyncAfter, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tc.objs...).Build()
			src := &policy.SettingsSource{Base: base, Reader: c, Namespace: settingsNamespace(Options{OperatorNamespace: "metalhub-system"})}
			v := src.View(context.Background())
			if v.Settings.RequeueSyncAfter != tc.want || len(v.Conflicting) != tc.conflicting {
				t.Fatalf("requeueSyncAfter %s with %d conflicting, want %s with %d (problems %q)",
					v.Settings.RequeueSyncAfter, len(v.Conflicting), tc.want, tc.conflicting, v.Problems)
			}
			if tc.conflicting > 0 && (v.From != nil || len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "keep one")) {
				t.Fatalf("a conflict must use neither ConfigMap and say so: from %v, problems %q", v.From, v.Problems)
			}
		})
	}
	if got := settingsNamespace(Options{}); got != metav1.NamespaceDefault {
		t.Fatalf("outside a cluster the settings namespace is %q, want default", got)
	}
	if got := settingsNamespace(Options{SettingsNamespace: "ops", OperatorNamespace: "metalhub-system"}); got != "ops" {
		t.Fatalf("the flag names %q, want ops", got)
	}
}
