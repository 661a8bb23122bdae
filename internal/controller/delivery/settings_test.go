package delivery

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestSettingsOverlay(t *testing.T) {
	base := DefaultSettings()
	tests := []struct {
		name     string
		data     map[string]string
		want     Settings
		problems []string
	}{
		{name: "none", data: nil, want: base},
		{name: "reference sample", data: map[string]string{"requeueSyncAfter": "1m", "requeueResourcesAfter": "1m", "queryName": "ArtifactIDs", "eventBasedReconcile": "true"},
			want: Settings{RequeueSyncAfter: time.Minute, RequeueResourcesAfter: time.Minute, QueryName: "ArtifactIDs", EventBasedReconcile: true}},
		{name: "bare seconds", data: map[string]string{"requeueSyncAfter": "30"},
			want: Settings{RequeueSyncAfter: 30 * time.Second, RequeueResourcesAfter: base.RequeueResourcesAfter, QueryName: base.QueryName}},
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
	o := Options{}.withDefaults()
	if o.Settings != DefaultSettings() || o.InfrahubTimeout <= 0 || o.ClusterTimeout <= 0 {
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
	want := Settings{RequeueSyncAfter: 30 * time.Second, RequeueResourcesAfter: 5 * time.Minute, QueryName: "MyQuery", EventBasedReconcile: true}
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
