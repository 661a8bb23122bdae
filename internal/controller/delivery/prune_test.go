package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// addArtifacts adds n artifacts named name, each a ConfigMap <prefix>-<i>.
func addArtifacts(t *testing.T, e *emu.Emulator, name, prefix string, n int) []emu.Artifact {
	t.Helper()
	out := make([]emu.Artifact, 0, n)
	for i := range n {
		a, err := e.AddArtifact("", name, "", []byte(configMapYAML(fmt.Sprintf("%s-%d", prefix, i), "", "1")))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// syncResources counts the VidraResources a sync controls that are not being deleted.
func syncResources(t *testing.T, sync string) int {
	t.Helper()
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(context.Background(), &list, client.MatchingLabels{manifests.SyncLabel: sync}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, vr := range list.Items {
		if vr.DeletionTimestamp.IsZero() {
			n++
		}
	}
	return n
}

func waitSyncResources(t *testing.T, sync string, want int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() error {
		if n := syncResources(t, sync); n != want {
			return fmt.Errorf("sync %s has %d VidraResources, want %d", sync, n, want)
		}
		return nil
	})
}

func annotateSync(t *testing.T, name, key, value string) {
	t.Helper()
	s := getSync(t, name)
	patch := client.MergeFrom(s.DeepCopy())
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[key] = value
	if err := env.Client.Patch(context.Background(), s, patch); err != nil {
		t.Fatal(err)
	}
}

// heldToken is the token of the prune a sync holds, from its durable record.
func heldToken(t *testing.T, name string) string {
	t.Helper()
	v := getSync(t, name).Annotations[infrahubv1alpha1.PrunePendingAnnotation]
	token, _, ok := strings.Cut(v, "@")
	if !ok {
		t.Fatalf("sync %s records no held prune (%s=%q)", name, infrahubv1alpha1.PrunePendingAnnotation, v)
	}
	return token
}

// A short answer (1 artifact of 50) deletes nothing: the sync holds with PruneHeld naming how
// many would go; a confirmation naming another prune does not release it, the exact one does,
// and releases exactly that prune.
func TestPruneGuardShortAnswerHeldUntilConfirmed(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "pg-short")
	ns := namespace(t)
	arts := addArtifacts(t, e, "pg-short", "pgs", 50)
	newSync(t, "pg-short", url, "pg-short", ns)
	waitSync(t, "pg-short", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 90*time.Second)
	waitSyncResources(t, "pg-short", 50, 10*time.Second)

	for _, a := range arts[1:] {
		if err := e.DeleteArtifact("", a.ID); err != nil {
			t.Fatal(err)
		}
	}
	requestSync(t, getSync(t, "pg-short"))
	s := waitSync(t, "pg-short", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonPruneHeld, 15*time.Second)
	if !strings.Contains(s.Status.LastError, "49 of 50") || !strings.Contains(s.Status.LastError, infrahubv1alpha1.ConfirmPruneAnnotation) {
		t.Fatalf("PruneHeld does not say how many would go and how to confirm: %q", s.Status.LastError)
	}
	token := heldToken(t, "pg-short")
	if !strings.HasPrefix(token, "49-") || !strings.Contains(s.Status.LastError, token) {
		t.Fatalf("token %q (message %q)", token, s.Status.LastError)
	}
	consistently(t, time.Second, func() error {
		if n := syncResources(t, "pg-short"); n != 50 {
			return fmt.Errorf("a held prune deleted: %d VidraResources left", n)
		}
		return nil
	})

	// A confirmation of another prune (a stale one, or a guess) approves nothing.
	annotateSync(t, "pg-short", infrahubv1alpha1.ConfirmPruneAnnotation, "49-000000000000")
	requestSync(t, getSync(t, "pg-short"))
	consistently(t, 2*time.Second, func() error {
		if n := syncResources(t, "pg-short"); n != 50 {
			return fmt.Errorf("a wrong confirmation released the prune: %d VidraResources left", n)
		}
		return nil
	})
	annotateSync(t, "pg-short", infrahubv1alpha1.ConfirmPruneAnnotation, token)
	waitSyncResources(t, "pg-short", 1, 20*time.Second)
	if err := exists(t, env.Client, &infrahubv1alpha1.VidraResource{}, "", arts[0].ID); err != nil {
		t.Fatalf("the surviving artifact's VidraResource: %v", err)
	}
	waitSync(t, "pg-short", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 20*time.Second)
	eventually(t, 10*time.Second, func() error {
		a := getSync(t, "pg-short").Annotations
		if _, ok := a[infrahubv1alpha1.ConfirmPruneAnnotation]; ok {
			return fmt.Errorf("the used confirmation is still there: %v", a)
		}
		if _, ok := a[infrahubv1alpha1.PrunePendingAnnotation]; ok {
			return fmt.Errorf("the released prune is still recorded: %v", a)
		}
		return nil
	})
}

// A second answer that agrees with the held one, a sync interval later, releases the prune; the
// first answer is recorded on the sync, so a restart in between neither loses nor fakes it.
func TestPruneGuardSecondAgreeingAnswerReleases(t *testing.T) {
	const interval = 3 * time.Second
	o := fastOptions()
	o.Settings.RequeueSyncAfter = interval
	o.PruneAutoRelease = true
	h := startManager(t, o)
	e, url := startInfrahub(t, nil, "pg-agree")
	ns := namespace(t)
	arts := addArtifacts(t, e, "pg-agree", "pga", 4)
	newSync(t, "pg-agree", url, "pg-agree", ns)
	waitSync(t, "pg-agree", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	waitSyncResources(t, "pg-agree", 4, 10*time.Second)

	for _, a := range arts[1:] {
		if err := e.DeleteArtifact("", a.ID); err != nil {
			t.Fatal(err)
		}
	}
	requestSync(t, getSync(t, "pg-agree"))
	waitSync(t, "pg-agree", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonPruneHeld, 10*time.Second)
	if n := syncResources(t, "pg-agree"); n != 4 {
		t.Fatalf("held prune deleted: %d VidraResources left", n)
	}
	token := heldToken(t, "pg-agree")

	// Restart: the record is on the sync, not in the manager.
	h.stop()
	startManager(t, o)
	waitSyncResources(t, "pg-agree", 1, 4*interval)
	waitSync(t, "pg-agree", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
	if !strings.HasPrefix(token, "3-") {
		t.Fatalf("token %q does not name 3 deletions", token)
	}
}

// An answer whose count disagrees with its edges is not trusted: the pass fails with
// IncompleteResult and deletes nothing.
func TestPruneGuardCountMismatchDeletesNothing(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "pg-count")
	ns := namespace(t)
	addArtifacts(t, e, "pg-count", "pgc", 3)
	newSync(t, "pg-count", url, "pg-count", ns)
	waitSync(t, "pg-count", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	waitSyncResources(t, "pg-count", 3, 10*time.Second)

	e.DropEdges(1)
	requestSync(t, getSync(t, "pg-count"))
	s := waitSync(t, "pg-count", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonIncompleteResult, 10*time.Second)
	if !strings.Contains(s.Status.LastError, "count 3") || !strings.Contains(s.Status.LastError, "2 artifacts") {
		t.Fatalf("lastError does not name the mismatch: %q", s.Status.LastError)
	}
	consistently(t, time.Second, func() error {
		if n := syncResources(t, "pg-count"); n != 3 {
			return fmt.Errorf("an incomplete answer deleted: %d VidraResources left", n)
		}
		return nil
	})
	e.DropEdges(0)
	requestSync(t, getSync(t, "pg-count"))
	waitSync(t, "pg-count", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
}

// An artifact whose id changes while its name and content stay hands its objects over to the
// new VidraResource: the applied object is never deleted (its UID does not change).
func TestRenamedArtifactHandsItsObjectsOver(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "pg-rename")
	ns := namespace(t)
	content := []byte(configMapYAML("renamed", "", "1"))
	old, err := e.AddArtifact("", "pg-rename", "", content)
	if err != nil {
		t.Fatal(err)
	}
	newSync(t, "pg-rename", url, "pg-rename", ns)
	waitResource(t, old.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	before := &corev1.ConfigMap{}
	if err := exists(t, env.Client, before, ns, "renamed"); err != nil {
		t.Fatal(err)
	}

	if err := e.DeleteArtifact("", old.ID); err != nil {
		t.Fatal(err)
	}
	renamed, err := e.AddArtifact("", "pg-rename", "", content)
	if err != nil || renamed.ID == old.ID {
		t.Fatalf("new artifact %v: %v", renamed.ID, err)
	}
	requestSync(t, getSync(t, "pg-rename"))
	waitResource(t, renamed.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 20*time.Second)
	eventually(t, 20*time.Second, func() error {
		if exists(t, env.Client, &infrahubv1alpha1.VidraResource{}, "", old.ID) == nil {
			return fmt.Errorf("the old VidraResource %s is still there", old.ID)
		}
		return nil
	})
	waitSync(t, "pg-rename", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 10*time.Second)
	after := &corev1.ConfigMap{}
	if err := exists(t, env.Client, after, ns, "renamed"); err != nil {
		t.Fatalf("the object was removed in the handover: %v", err)
	}
	if after.UID != before.UID {
		t.Fatalf("the object was deleted and recreated (UID %s, was %s)", after.UID, before.UID)
	}
	if got := strings.Join(target.OwnersOf(after), ","); got != renamed.ID {
		t.Fatalf("owned-by %q, want %s", got, renamed.ID)
	}
}

// Failed always says why: a sync whose destination's kubeconfig Secret cannot be used reads
// Failed with a non-empty lastError, and so does its VidraResource.
func TestFailedSyncAndResourceSayWhy(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "pg-why")
	ns := namespace(t)
	a, _ := e.AddArtifact("", "pg-why", "", []byte(configMapYAML("why", "", "1")))
	const server = "https://unusable.example:6443"
	createSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server), map[string]string{"kubeconfig": "this is not a kubeconfig"})
	newSync(t, "pg-why", url, "pg-why", ns, func(s *infrahubv1alpha1.InfrahubSync) { s.Spec.Destination.Server = server })
	vr := waitResource(t, a.ID, infrahubv1alpha1.StateFailed, "", 30*time.Second)
	if vr.Status.LastError == "" {
		t.Fatalf("VidraResource Failed with an empty lastError: %+v", vr.Status)
	}
	s := waitSync(t, "pg-why", infrahubv1alpha1.StateFailed, "", 30*time.Second)
	c := meta.FindStatusCondition(s.Status.Conditions, infrahubv1alpha1.ConditionReady)
	if s.Status.LastError == "" || c.Reason == "" || c.Message == "" {
		t.Fatalf("sync Failed without saying why: lastError %q, condition %+v", s.Status.LastError, c)
	}
	if !strings.Contains(s.Status.LastError, a.ID) {
		t.Fatalf("sync lastError %q does not name the failed VidraResource", s.Status.LastError)
	}
}

// A Namespace that left the manifest is not deleted while it holds an object no VidraResource
// manages: it is released with a Warning event. One that holds only ours goes.
func TestPruneKeepsNamespaceWithUnmanagedObjects(t *testing.T) {
	o := fastOptions()
	o.Policy.AllowedKinds = []string{"Namespace", "ConfigMap"}
	o.Policy.AllowedNamespaces = []string{"*"}
	startManager(t, o)
	ctx := context.Background()
	ns := namespace(t)
	kept, gone := fmt.Sprintf("t%d-nsg-kept", nsSeq.Add(1)), fmt.Sprintf("t%d-nsg-gone", nsSeq.Add(1))
	nsYAML := func(name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", name)
	}
	newResource(t, "pg-ns", ns, docs(nsYAML(kept), configMapYAML("ours", kept, "1"), nsYAML(gone), configMapYAML("ours", gone, "1"), configMapYAML("stay", "", "1")))
	waitResource(t, "pg-ns", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: kept, Name: "theirs"}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}

	updateResourceManifest(t, "pg-ns", configMapYAML("stay", "", "1"))
	eventually(t, 20*time.Second, func() error {
		n := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: gone}, n); err == nil && n.DeletionTimestamp.IsZero() {
			return fmt.Errorf("namespace %s, holding only our objects, not deleted", gone)
		}
		if exists(t, env.Client, &corev1.ConfigMap{}, kept, "ours") == nil {
			return fmt.Errorf("our ConfigMap in %s not pruned", kept)
		}
		return nil
	})
	n := &corev1.Namespace{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: kept}, n); err != nil || !n.DeletionTimestamp.IsZero() {
		t.Fatalf("namespace %s holding an unmanaged object was deleted (%v)", kept, err)
	}
	if err := exists(t, env.Client, &corev1.ConfigMap{}, kept, "theirs"); err != nil {
		t.Fatal(err)
	}
	waitVREvent(t, "pg-ns", "NamespaceKept", kept)
	waitResource(t, "pg-ns", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 10*time.Second)
}
