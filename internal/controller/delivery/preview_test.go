package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/preview"
)

// A branch edits a ConfigMap and a Secret, drops a Service and adds a Deployment the sync's
// ServiceAccount may not create: the preview, dry-run as that ServiceAccount, names exactly
// those, with the ConfigMap's field diff, the Secret's fields masked, the Deployment refused;
// and changes nothing.
func TestPreviewOfABranch(t *testing.T) {
	o := fastOptions()
	o.Policy.AllowedKinds = []string{"*", "Secret"}
	h := startManager(t, o)
	ctx := context.Background()
	ns := namespace(t)
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps", "services", "secrets"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "deployer"}}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	e, url := startInfrahub(t, nil, "pv-sync")
	secret := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: pv-secret\nstringData:\n  password: %s\n"
	art, err := e.AddArtifact("main", "pv-art", "application/yaml",
		[]byte(docs(configMapYAML("pv-cm", "", "one"), serviceYAML("pv-svc"), strings.Replace(secret, "%s", "hunter2", 1))))
	if err != nil {
		t.Fatal(err)
	}
	s := newSync(t, "pv-sync", url, "pv-art", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Spec.Destination.ServiceAccountName = "deployer"
	})
	waitSync(t, "pv-sync", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	waitResource(t, art.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	if err := e.AddBranch("change-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.UpdateArtifact("change-1", art.ID, []byte(docs(configMapYAML("pv-cm", "", "two"),
		strings.Replace(secret, "%s", "correct-horse", 1), deploymentYAML("pv-dep", 1)))); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: s.Name}, s); err != nil {
		t.Fatal(err)
	}
	rep, err := h.rs.preview(ctx, s, "change-1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]preview.Entry{}
	for _, e := range rep.Entries {
		if e.Action != preview.Unchanged {
			got[e.Object] = e
		}
	}
	md := rep.Markdown()
	t.Log("\n" + md)
	want := map[string]preview.Action{
		"ConfigMap " + ns + "/pv-cm":        preview.Change,
		"Secret " + ns + "/pv-secret":       preview.Change,
		"Service " + ns + "/pv-svc":         preview.Delete,
		"Deployment.apps " + ns + "/pv-dep": preview.Refused,
	}
	if len(got) != len(want) {
		t.Errorf("the preview names %d objects, want %d: %+v", len(got), len(want), got)
	}
	for obj, a := range want {
		if got[obj].Action != a {
			t.Errorf("%s: %q, want %q (%+v)", obj, got[obj].Action, a, got[obj])
		}
	}
	cm := got["ConfigMap "+ns+"/pv-cm"]
	if len(cm.Fields) != 1 || cm.Fields[0] != (preview.Field{Path: "/data/value", Old: "one", New: "two"}) {
		t.Errorf("ConfigMap field diff %+v", cm.Fields)
	}
	for _, f := range got["Secret "+ns+"/pv-secret"].Fields {
		if f.New != preview.Masked && f.New != "" || f.Old != preview.Masked && f.Old != "" {
			t.Errorf("a Secret's value shown: %+v", f)
		}
	}
	if strings.Contains(md, "hunter2") || strings.Contains(md, "correct-horse") || strings.Contains(md, "aHVudGVyMg") {
		t.Error("the report shows a Secret's value")
	}
	if dep := got["Deployment.apps "+ns+"/pv-dep"]; !strings.Contains(dep.Message, "forbidden") || !strings.Contains(dep.Message, "deployer") {
		t.Errorf("the refusal does not say who may not: %q", dep.Message)
	}
	// Nothing was changed by the preview.
	var cmLive corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pv-cm"}, &cmLive); err != nil || cmLive.Data["value"] != "one" {
		t.Fatalf("the live ConfigMap changed: %v %v", cmLive.Data, err)
	}
	if err := exists(t, env.Client, &corev1.Service{}, ns, "pv-svc"); err != nil {
		t.Fatalf("the Service: %v", err)
	}
}
