package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

// An orphan (its VidraResource gone without cleaning up) is not free for the taking, not even
// by a new VidraResource of the same name: only adopt-orphans-of naming the recorded owner's
// UID gives it away.
func TestOrphanNotTakenByNamesake(t *testing.T) {
	h := startManager(t, fastOptions())
	ctx := context.Background()
	ns := namespace(t)
	first := newResource(t, "own-orphan", ns, configMapYAML("orphan", "", "1"))
	waitResource(t, "own-orphan", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 20*time.Second)
	cm := &corev1.ConfigMap{}
	if err := exists(t, env.Client, cm, ns, "orphan"); err != nil {
		t.Fatal(err)
	}

	// Gone without its finalizer: its object is left behind, an orphan. The manager is stopped
	// meanwhile: a running one puts the finalizer back, and the deletion then cleans up.
	h.stop()
	vr := getResource(t, "own-orphan")
	controllerutil.RemoveFinalizer(vr, manifests.Finalizer)
	if err := env.Client.Update(ctx, vr); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, vr); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if exists(t, env.Client, &infrahubv1alpha1.VidraResource{}, "", "own-orphan") == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})

	startManager(t, fastOptions())
	second := newResource(t, "own-orphan", ns, configMapYAML("orphan", "", "2"))
	got := waitResource(t, "own-orphan", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonOwnershipConflict, 20*time.Second)
	if !strings.Contains(got.Status.LastError, infrahubv1alpha1.AdoptOrphansAnnotation) || !strings.Contains(got.Status.LastError, string(first.UID)) {
		t.Fatalf("lastError does not say how to adopt the orphan: %q", got.Status.LastError)
	}
	consistently(t, time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "orphan"); err != nil {
			return err
		}
		if cm.Data["value"] != "1" {
			return fmt.Errorf("the orphan was taken by a namesake: %v", cm.Data)
		}
		return nil
	})
	if err := exists(t, env.Client, cm, ns, "orphan"); err != nil {
		t.Fatal(err)
	}
	if got := cm.Annotations[infrahubv1alpha1.OwnerUIDsAnnotation]; got != "own-orphan="+string(first.UID) {
		t.Fatalf("owner UID mark %q, want own-orphan=%s", got, first.UID)
	}

	// Adopted by the recorded owner's UID.
	vr = getResource(t, "own-orphan")
	patch := client.MergeFrom(vr.DeepCopy())
	vr.Annotations = map[string]string{infrahubv1alpha1.AdoptOrphansAnnotation: string(first.UID)}
	if err := env.Client.Patch(ctx, vr, patch); err != nil {
		t.Fatal(err)
	}
	waitResource(t, "own-orphan", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 20*time.Second)
	eventually(t, 5*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "orphan"); err != nil {
			return err
		}
		if cm.Data["value"] != "2" || cm.Annotations[infrahubv1alpha1.OwnerUIDsAnnotation] != "own-orphan="+string(second.UID) {
			return fmt.Errorf("adopted orphan: data %v, annotations %v", cm.Data, cm.Annotations)
		}
		return nil
	})
}

// An object whose mark names a VidraResource that never applied it (not in its inventory: a
// copied or forged mark) is skipped with a Warning event: never pruned, and the prune of the
// rest goes on.
func TestForeignMarkSkippedPruneProceeds(t *testing.T) {
	startManager(t, fastOptions())
	ctx := context.Background()
	ns := namespace(t)
	newResource(t, "own-foreign", ns, docs(configMapYAML("keep", "", "1"), configMapYAML("drop", "", "1")))
	waitResource(t, "own-foreign", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 20*time.Second)
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forged",
		Labels:      map[string]string{manifests.ManagedByLabel: manifests.ManagedByValue},
		Annotations: map[string]string{manifests.OwnedByAnnotation: "own-foreign"}}, Data: map[string]string{"k": "theirs"}}
	if err := env.Client.Create(ctx, forged); err != nil {
		t.Fatal(err)
	}

	updateResourceManifest(t, "own-foreign", configMapYAML("keep", "", "1"))
	eventually(t, 15*time.Second, func() error {
		if exists(t, env.Client, &corev1.ConfigMap{}, ns, "drop") == nil {
			return fmt.Errorf("drop not pruned")
		}
		return nil
	})
	if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, "forged"); err != nil {
		t.Fatalf("an object the VidraResource never applied was pruned: %v", err)
	}
	waitVREvent(t, "own-foreign", "ForeignMark", "ConfigMap/"+ns+"/forged")
	waitResource(t, "own-foreign", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 10*time.Second)
	// Nor does the finalizer remove it.
	deleteResource(t, "own-foreign")
	if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, "forged"); err != nil {
		t.Fatalf("the finalizer removed an object the VidraResource never applied: %v", err)
	}
	if exists(t, env.Client, &corev1.ConfigMap{}, ns, "keep") == nil {
		t.Fatal("the finalizer left the applied ConfigMap behind")
	}
}
