package delivery

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// Issue 42, finding 3: a VidraResource written by hand with a controller reference that has the
// sync's Kind, name and UID but another apiVersion is not the sync's. The sync neither counts
// it, nor prunes it (nor holds its own prune over it), nor lends it the kubeconfig Secret bound
// to the sync.
func TestInjectedControllerReferenceIsNotTheSyncs(t *testing.T) {
	startManager(t, fastOptions())
	ns := namespace(t)
	kubeconfig, server := kubeconfigOf(t, env.Kubeconfig) // not a local name: reached as a remote cluster
	createAnnotatedSecret(t, "default", infrahubv1alpha1.ClusterKubeconfigLabel, labelFor(t, server),
		map[string]string{infrahubv1alpha1.SyncsAnnotation: "inj-sync"}, map[string]string{"kubeconfig": string(kubeconfig)})
	e, url := startInfrahub(t, nil, "inj-sync")

	// The sync's first pass finds nothing and keeps everything: the foreign VidraResources are
	// there before the pass that would count them.
	s := newSync(t, "inj-sync", url, "inj-app", ns)
	waitSync(t, "inj-sync", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonEmptyResult, 30*time.Second)
	injected := func(apiVersion string) func(*infrahubv1alpha1.VidraResource) {
		return func(vr *infrahubv1alpha1.VidraResource) {
			vr.Spec.Destination.Server = server
			vr.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: "InfrahubSync",
				Name: s.Name, UID: s.UID, Controller: ptr.To(true)}}
		}
	}
	newResource(t, "inj-other-version", ns, configMapYAML("inj-other-version", "", "1"), injected("infrahub.operators.com/v1beta1"))
	newResource(t, "inj-other-group", ns, configMapYAML("inj-other-group", "", "1"), injected("evil.example/v1"))

	// Not lent the sync's kubeconfig.
	for _, name := range []string{"inj-other-version", "inj-other-group"} {
		waitResource(t, name, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonKubeconfigNotBound, 20*time.Second)
	}
	wantNotCreated(t, []absent{{&corev1.ConfigMap{}, ns, "inj-other-version"}, {&corev1.ConfigMap{}, ns, "inj-other-group"}})

	// Neither counted nor pruned: the sync's one artifact is delivered, its prune not held.
	a, err := e.AddArtifact("", "inj-app", "", []byte(configMapYAML("inj-synced", "", "1")))
	if err != nil {
		t.Fatal(err)
	}
	requestSync(t, getSync(t, "inj-sync"))
	got := waitSync(t, "inj-sync", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	if got.Status.Resources.Total != 1 {
		t.Errorf("the sync counts %d VidraResources, want 1 (its own %s)", got.Status.Resources.Total, a.ID)
	}
	consistently(t, time.Second, func() error {
		for _, name := range []string{"inj-other-version", "inj-other-group"} {
			vr := &infrahubv1alpha1.VidraResource{}
			if err := exists(t, env.Client, vr, "", name); err != nil {
				return err
			}
			if !vr.DeletionTimestamp.IsZero() {
				return fmt.Errorf("the sync deleted %s, which is not its own", name)
			}
		}
		return nil
	})
}
