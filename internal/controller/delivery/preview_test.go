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
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
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

// Issue 45, preview: a proposed change whose branch edits a ConfigMap and deletes a Service gets
// one comment listing exactly those, with the field diff; a change to the branch replaces the
// comment, a pass with nothing new writes nothing, and a restarted manager posts no second one.
func TestPreviewCommentsOnAProposedChange(t *testing.T) {
	o := fastOptions()
	o.PreviewInterval = 200 * time.Millisecond
	h := startManager(t, o)
	ns := namespace(t)
	e, url := startInfrahub(t, nil, "pc-sync")
	art, err := e.AddArtifact("main", "pc-art", "application/yaml", []byte(docs(configMapYAML("pc-cm", "", "one"), serviceYAML("pc-svc"))))
	if err != nil {
		t.Fatal(err)
	}
	newSync(t, "pc-sync", url, "pc-art", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Spec.Preview = &infrahubv1alpha1.Preview{ProposedChanges: true}
	})
	waitSync(t, "pc-sync", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	waitResource(t, art.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	untouched := e.AddProposedChange("docs only", "docs-branch", "main")
	pc := e.AddProposedChange("bump the value", "pc-branch", "main")
	if _, err := e.UpdateArtifact("pc-branch", art.ID, []byte(configMapYAML("pc-cm", "", "two"))); err != nil {
		t.Fatal(err)
	}
	comment := waitComment(t, e, pc, func(text string) bool { return strings.Contains(text, "+ /data/value: two") })
	for _, want := range []string{
		"| change | ConfigMap " + ns + "/pc-cm |", "| delete | Service " + ns + "/pc-svc |",
		"- /data/value: one", "0 to create, 1 to change, 1 to delete, 0 refused",
	} {
		if !strings.Contains(comment.Text, want) {
			t.Errorf("the comment lacks %q:\n%s", want, comment.Text)
		}
	}
	if n := strings.Count(comment.Text, "\n| "); n != 3 { // header and two rows
		t.Errorf("the comment's table has %d rows, want the two objects:\n%s", n-1, comment.Text)
	}
	s := waitSyncPreviews(t, "pc-sync", func(ps []infrahubv1alpha1.PreviewStatus) bool { return len(ps) == 1 && ps[0].Changed == 1 })
	if p := s.Status.Previews[0]; p.ProposedChange != pc || p.Deleted != 1 || p.Branch != "pc-branch" {
		t.Errorf("status.previews %+v", s.Status.Previews)
	}
	if cs := e.Comments(untouched); len(cs) != 0 {
		t.Errorf("a proposed change that changes none of the sync's artifacts got %d comments", len(cs))
	}

	// The branch changes again: the same comment is replaced.
	if _, err := e.UpdateArtifact("pc-branch", art.ID, []byte(docs(configMapYAML("pc-cm", "", "three"), serviceYAML("pc-svc")))); err != nil {
		t.Fatal(err)
	}
	comment = waitComment(t, e, pc, func(text string) bool { return strings.Contains(text, "+ /data/value: three") })
	if strings.Contains(comment.Text, "pc-svc") {
		t.Errorf("the Service is still in the comment:\n%s", comment.Text)
	}
	// A restart (a new manager, nothing remembered) finds its comment and leaves it.
	h.stop()
	gql := e.Counters().GraphQL
	startManager(t, o)
	waitGraphQL(t, e, gql+3) // lists, reads the comments, at least once more
	if cs := e.Comments(pc); len(cs) != 1 || cs[0].Text != comment.Text {
		t.Fatalf("after a restart the proposed change has %d comments", len(cs))
	}
}

func waitComment(t *testing.T, e *emu.Emulator, pc string, ok func(string) bool) emu.Comment {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs := e.Comments(pc)
		if len(cs) > 1 {
			t.Fatalf("%d comments on the proposed change, want one", len(cs))
		}
		if len(cs) == 1 && ok(cs[0].Text) {
			return cs[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such comment on the proposed change: %+v", cs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitGraphQL(t *testing.T, e *emu.Emulator, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.Counters().GraphQL < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d GraphQL requests, waited for %d", e.Counters().GraphQL, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitSyncPreviews(t *testing.T, name string, ok func([]infrahubv1alpha1.PreviewStatus) bool) *infrahubv1alpha1.InfrahubSync {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := getSync(t, name)
		if ok(s.Status.Previews) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.previews %+v", s.Status.Previews)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
