package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/testenv"
)

// #16 scenario 6: metadata others own is not drift. The Deployment controller's revision
// annotation (written on every rollout, and moving a Deployment's generation) left the resource
// Stale and re-applied; a change to an annotation the manifest sets still counts.
// kube-controller-manager runs in this package's control plane: the rollout is real.
func TestOthersAnnotationsAreNotDrift(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	dep := strings.Replace(deploymentYAML("web", 1), "  name: web\n", "  name: web\n  annotations: {team: blue}\n", 1)
	newResource(t, "d-revision", ns, docs(dep, configMapYAML("sync-point", "", "1")), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.ReconcileOnEvents = false // drift is reported (Stale), restored by the periodic pass
	})
	waitResource(t, "d-revision", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	// The rollout: kube-controller-manager writes the revision annotation.
	eventually(t, 30*time.Second, func() error {
		d := &appsv1.Deployment{}
		if err := exists(t, env.Client, d, ns, "web"); err != nil {
			return err
		}
		if d.Annotations["deployment.kubernetes.io/revision"] == "" {
			return fmt.Errorf("not rolled out yet")
		}
		return nil
	})
	// Then a deletion that is drift, whose report lists everything drifted by then.
	cm := &corev1.ConfigMap{}
	if err := exists(t, env.Client, cm, ns, "sync-point"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	vr := waitResource(t, "d-revision", infrahubv1alpha1.StateStale, infrahubv1alpha1.ReasonDrifted, 5*time.Second)
	msg := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionReady).Message
	if !strings.Contains(msg, "ConfigMap/"+ns+"/sync-point deleted") || strings.Contains(msg, "Deployment") {
		t.Fatalf("drift report %q: want the deleted ConfigMap only, not the Deployment's rollout", msg)
	}
	// An annotation the manifest sets, changed by hand: drift.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := exists(t, env.Client, d, ns, "web"); err != nil {
			return err
		}
		d.Annotations["team"] = "red"
		return env.Client.Update(context.Background(), d)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		c := meta.FindStatusCondition(getResource(t, "d-revision").Status.Conditions, infrahubv1alpha1.ConditionReady)
		if !strings.Contains(c.Message, "Deployment/"+ns+"/web changed") {
			return fmt.Errorf("drift report %q does not name the Deployment", c.Message)
		}
		return nil
	})
}

// #16 scenario 1: an object no VidraResource created (kube-system/coredns, the operator's own
// Deployment) is neither rewritten nor, when the artifact drops it, deleted; the adopt
// annotation naming the VidraResource lets it take the object over.
func TestNoTakeoverWithoutAdopt(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	ctx := context.Background()
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}, Data: map[string]string{"value": "theirs"}}
	if err := env.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	newResource(t, "d-takeover", ns, docs(configMapYAML("coredns", "", "ours"), configMapYAML("sibling", "", "1")))
	vr := waitResource(t, "d-takeover", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonOwnershipConflict, 15*time.Second)
	if !strings.Contains(vr.Status.LastError, infrahubv1alpha1.AdoptAnnotation) {
		t.Errorf("lastError %q does not say how to let it adopt", vr.Status.LastError)
	}
	cm := &corev1.ConfigMap{}
	if err := exists(t, env.Client, cm, ns, "coredns"); err != nil {
		t.Fatal(err)
	}
	if cm.Data["value"] != "theirs" || len(target.OwnersOf(cm)) != 0 {
		t.Fatalf("foreign object rewritten: data %v, owned-by %v", cm.Data, target.OwnersOf(cm))
	}
	// The artifact drops it: nothing of it is deleted.
	updateResourceManifest(t, "d-takeover", configMapYAML("sibling", "", "1"))
	waitResource(t, "d-takeover", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)
	if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, "coredns"); err != nil {
		t.Fatalf("foreign object deleted when the artifact dropped it: %v", err)
	}
	// Opted in: taken over.
	patchObject(t, env.Client, cm, func(cm *corev1.ConfigMap) {
		cm.Annotations = map[string]string{infrahubv1alpha1.AdoptAnnotation: "d-takeover"}
	})
	updateResourceManifest(t, "d-takeover", docs(configMapYAML("coredns", "", "ours"), configMapYAML("sibling", "", "1")))
	waitResource(t, "d-takeover", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)
	eventually(t, 5*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "coredns"); err != nil {
			return err
		}
		if cm.Data["value"] != "ours" || strings.Join(target.OwnersOf(cm), ",") != "d-takeover" {
			return fmt.Errorf("adopted object: data %v, owned-by %v", cm.Data, target.OwnersOf(cm))
		}
		return nil
	})
}

// #16 scenario 7: Vidra's shared ownership. An object whose owned-by lists two VidraResources is
// applied by both, and pruned only when the last of them drops it.
func TestSharedOwnership(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	ctx := context.Background()
	shared := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared",
		Labels:      map[string]string{manifests.ManagedByLabel: manifests.ManagedByValue},
		Annotations: map[string]string{manifests.OwnedByAnnotation: "d-share-a,d-share-b"}}}
	if err := env.Client.Create(ctx, shared); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"d-share-a", "d-share-b"} {
		newResource(t, name, ns, docs(configMapYAML("shared", "", "1"), configMapYAML(name+"-own", "", "1")))
	}
	for _, name := range []string{"d-share-a", "d-share-b"} {
		waitResource(t, name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)
	}
	owners := func() string {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "shared"); err != nil {
			return "gone"
		}
		return strings.Join(target.OwnersOf(cm), ",")
	}
	if got := owners(); got != "d-share-a,d-share-b" {
		t.Fatalf("shared object owned by %q", got)
	}
	// The first owner goes: the object stays, with the other owner alone.
	if err := env.Client.Delete(ctx, getResource(t, "d-share-a")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, func() error {
		if exists(t, env.Client, &corev1.ConfigMap{}, ns, "d-share-a-own") == nil {
			return fmt.Errorf("d-share-a's own object still there")
		}
		if got := owners(); got != "d-share-b" {
			return fmt.Errorf("shared object owned by %q, want d-share-b", got)
		}
		return nil
	})
	// The last owner drops it: pruned.
	updateResourceManifest(t, "d-share-b", configMapYAML("d-share-b-own", "", "1"))
	eventually(t, 15*time.Second, func() error {
		if got := owners(); got != "gone" {
			return fmt.Errorf("shared object owned by %q after its last owner dropped it", got)
		}
		return nil
	})
}

// #16 scenario 2: an artifact reaches only its destination namespace. One naming another
// tenant's namespace, or the operator's own (where a Deployment would run as the operator's
// ServiceAccount), is refused whole with a condition, and nothing of it is created.
func TestArtifactConfinedToItsNamespace(t *testing.T) {
	o := fastOptions()
	o.OperatorNamespace, o.SecretsNamespace = namespace(t), "default"
	startManager(t, o)
	tenantA, tenantB := namespace(t), namespace(t)
	cases := []struct{ name, manifest, deny string }{
		{"d-other-tenant", docs(configMapYAML("mine", "", "1"), configMapYAML("theirs", tenantB, "1")), tenantB},
		{"d-operator-ns", docs(configMapYAML("mine2", "", "1"), strings.Replace(deploymentYAML("escalate", 1), "  name: escalate\n", "  name: escalate\n  namespace: "+o.OperatorNamespace+"\n", 1)), "operator's own"},
	}
	for _, tc := range cases {
		newResource(t, tc.name, tenantA, tc.manifest)
		vr := waitResource(t, tc.name, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonPolicyDenied, 15*time.Second)
		if !strings.Contains(vr.Status.LastError, tc.deny) {
			t.Errorf("%s: lastError %q does not say %q", tc.name, vr.Status.LastError, tc.deny)
		}
	}
	wantNotCreated(t, []absent{
		{&corev1.ConfigMap{}, tenantA, "mine"}, {&corev1.ConfigMap{}, tenantB, "theirs"},
		{&corev1.ConfigMap{}, tenantA, "mine2"}, {&appsv1.Deployment{}, o.OperatorNamespace, "escalate"},
	})
}

// #16 scenario 5: what a VidraResource applied is known from its own bookkeeping, not from its
// status or the watches of the moment. After a failed apply (which left the object out of the
// report), a wiped status and a restart with no watch on the kind, the objects the new
// manifests dropped are still pruned.
func TestInventorySurvivesFailedApplyStatusWipeAndRestart(t *testing.T) {
	o := fastOptions()
	h := startManager(t, o)
	ns := namespace(t)
	newResource(t, "d-inv-wipe", ns, docs(configMapYAML("keep-w", "", "1"), serviceYAML("gone-after-wipe")))
	newResource(t, "d-inv-failed", ns, docs(configMapYAML("keep-f", "", "1"), serviceYAML("gone-after-failure")))
	for _, name := range []string{"d-inv-wipe", "d-inv-failed"} {
		waitResource(t, name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	}
	// An apply of the Service that the API server refuses.
	bad := strings.Replace(serviceYAML("gone-after-failure"), "port: 80", "port: 700000", 1)
	updateResourceManifest(t, "d-inv-failed", docs(configMapYAML("keep-f", "", "1"), bad))
	waitResource(t, "d-inv-failed", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonApplyFailed, 15*time.Second)

	h.stop()
	vr := getResource(t, "d-inv-wipe")
	vr.Status = infrahubv1alpha1.VidraResourceStatus{}
	if err := testenv.WriteStatus(context.Background(), env.Client, vr); err != nil {
		t.Fatal(err)
	}
	updateResourceManifest(t, "d-inv-wipe", configMapYAML("keep-w", "", "1"))
	updateResourceManifest(t, "d-inv-failed", configMapYAML("keep-f", "", "1"))
	startManager(t, o) // watches only what the new manifests name: ConfigMaps

	for _, name := range []string{"d-inv-wipe", "d-inv-failed"} {
		waitResource(t, name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	}
	eventually(t, 10*time.Second, func() error {
		for _, svc := range []string{"gone-after-wipe", "gone-after-failure"} {
			if exists(t, env.Client, &corev1.Service{}, ns, svc) == nil {
				return fmt.Errorf("Service %s left behind", svc)
			}
		}
		return nil
	})
}

// #16 item 6: a VidraResource says whether what it applied is healthy (kstatus). A Deployment
// whose pods never become ready (kube-controller-manager rolls it out; no scheduler or kubelet
// runs its pods) reads InProgress and names the Deployment; scaled to zero, it is Current.
func TestHealthFollowsTheAppliedObjects(t *testing.T) {
	o := fastOptions()
	o.HealthPoll = 500 * time.Millisecond
	startManager(t, o)
	ns := namespace(t)
	newResource(t, "d-health", ns, docs(configMapYAML("cfg", "", "1"), deploymentYAML("web", 1)))
	waitResource(t, "d-health", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	eventually(t, 30*time.Second, func() error {
		vr := getResource(t, "d-health")
		c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionHealthy)
		if vr.Status.Health != "InProgress" || c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "Deployment/"+ns+"/web") {
			return fmt.Errorf("health %q, condition %+v: want InProgress naming the Deployment", vr.Status.Health, c)
		}
		return nil
	})
	updateResourceManifest(t, "d-health", docs(configMapYAML("cfg", "", "1"), deploymentYAML("web", 0)))
	eventually(t, 30*time.Second, func() error {
		vr := getResource(t, "d-health")
		if c := meta.FindStatusCondition(vr.Status.Conditions, infrahubv1alpha1.ConditionHealthy); vr.Status.Health != "Current" || c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("health %q, condition %+v: want Current", vr.Status.Health, c)
		}
		return nil
	})
}

// waitVREvent waits for an event of a VidraResource with reason and a note containing text.
func waitVREvent(t *testing.T, vr, reason, text string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == vr && e.Reason == reason && strings.Contains(e.Note, text) {
				return nil
			}
		}
		return fmt.Errorf("no %s event of %s with %q among %d events", reason, vr, text, len(list.Items))
	})
}
