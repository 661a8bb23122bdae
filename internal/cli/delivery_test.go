package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/preview"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// delivery diff previews a branch locally: the ConfigMap the branch edits shows as changed with
// its field diff, the one it drops as deleted, and nothing in the cluster changes.
func TestDeliveryDiff(t *testing.T) {
	ctx := context.Background()
	e := emu.New(emu.Options{})
	url, err := e.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	cm := func(name, v string) string {
		return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n  value: " + v + "\n"
	}
	art, err := e.AddArtifact("main", "dd-art", "application/yaml", []byte(cm("dd-keep", "one")+"---\n"+cm("dd-drop", "x")))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddBranch("dd-branch"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.UpdateArtifact("dd-branch", art.ID, []byte(cm("dd-keep", "two"))); err != nil {
		t.Fatal(err)
	}

	for _, ns := range []string{"dd-ops", "dd-app"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	label, err := target.HostLabelValues(url)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "dd-ops", Name: "dd-creds",
		Labels:      map[string]string{infrahubv1alpha1.InfrahubAPIURLLabel: label[0]},
		Annotations: map[string]string{infrahubv1alpha1.URLAnnotation: url, infrahubv1alpha1.SyncsAnnotation: "dd-sync"}},
		StringData: map[string]string{"username": emu.DefaultUsername, "password": emu.DefaultPassword}}
	s := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "dd-sync"}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
		Source:      infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", ArtefactName: "dd-art"},
		Destination: infrahubv1alpha1.Destination{Namespace: "dd-app"}}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// What the sync applied: its VidraResource (as the operator writes it) and the two objects,
	// marked as the apply marks them.
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: art.ID,
		Labels:      map[string]string{manifests.SyncLabel: s.Name},
		Annotations: map[string]string{manifests.ChecksumAnnotation: art.Checksum},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync",
			Name: s.Name, UID: s.UID, Controller: ptr.To(true)}}},
		Spec: infrahubv1alpha1.VidraResourceSpec{Destination: s.Spec.Destination}}
	if err := env.Client.Create(ctx, vr); err != nil {
		t.Fatal(err)
	}
	vr.Status.ManagedResources = []infrahubv1alpha1.ManagedResource{
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "dd-app", Name: "dd-keep"},
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "dd-app", Name: "dd-drop"},
	}
	if err := env.Client.Status().Update(ctx, vr); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"dd-keep": "one", "dd-drop": "x"} {
		live := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "dd-app", Name: name,
			Labels: map[string]string{manifests.ManagedByLabel: manifests.ManagedByValue},
			Annotations: map[string]string{manifests.OwnedByAnnotation: vr.Name,
				infrahubv1alpha1.OwnerUIDsAnnotation: vr.Name + "=" + string(vr.UID)}}, Data: map[string]string{"value": v}}
		if err := env.Client.Create(ctx, live); err != nil {
			t.Fatal(err)
		}
	}

	out, stderr, err := runCmd(t, "delivery", "diff", "dd-sync", "--branch", "dd-branch", "-o", "json", "--operator-namespace", "dd-ops")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rep preview.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]preview.Entry{}
	for _, e := range rep.Entries {
		got[e.Object] = e
	}
	keep, drop := got["ConfigMap dd-app/dd-keep"], got["ConfigMap dd-app/dd-drop"]
	if keep.Action != preview.Change || len(keep.Fields) != 1 || keep.Fields[0] != (preview.Field{Path: "/data/value", Old: "one", New: "two"}) {
		t.Errorf("dd-keep: %+v", keep)
	}
	if drop.Action != preview.Delete {
		t.Errorf("dd-drop: %+v", drop)
	}
	if len(got) != 2 {
		t.Errorf("entries %+v", rep.Entries)
	}
	text, _, err := runCmd(t, "delivery", "diff", "dd-sync", "--branch", "dd-branch", "--operator-namespace", "dd-ops")
	if err != nil || !strings.Contains(text, "- /data/value: one") || !strings.Contains(text, "+ /data/value: two") {
		t.Fatalf("text output (%v):\n%s", err, text)
	}
	var liveKeep corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "dd-app", Name: "dd-keep"}, &liveKeep); err != nil || liveKeep.Data["value"] != "one" {
		t.Fatalf("the preview changed the cluster: %v %v", liveKeep.Data, err)
	}
}
