package delivery

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	emu "github.com/metalhub/metalhub/internal/emulator/infrahub"
)

// tenantIntact fails once any of the ConfigMaps <prefix>-0 … <prefix>-(n-1) in ns is gone.
func tenantIntact(t *testing.T, ns, prefix string, n int) func() error {
	return func() error {
		for i := range n {
			if err := exists(t, env.Client, &corev1.ConfigMap{}, ns, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
				return fmt.Errorf("the tenant's objects were pruned: %w", err)
			}
		}
		return nil
	}
}

// Issue 42 finding 6: a compromised Infrahub re-issues every artifact under a new id, emptied of
// the tenant's objects (a manifest of none is refused, so a decoy stands in) and with the old
// checksum claimed. Each new VidraResource "takes over" its predecessor's objects by applying
// none of them, and the predecessors went as handed over, which the guard did not count: the
// tenant was wiped. The guard counts the objects a pass would
// remove, handed-over ones included, and holds.
func TestReissuedEmptyArtifactsDoNotWipeTheTenant(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "pg-reissue")
	ns := namespace(t)
	arts := addArtifacts(t, e, "pg-reissue", "pgr", 4)
	newSync(t, "pg-reissue", url, "pg-reissue", ns)
	waitSync(t, "pg-reissue", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 60*time.Second)
	waitSyncResources(t, "pg-reissue", 4, 10*time.Second)

	for i, a := range arts {
		if err := e.DeleteArtifact("", a.ID); err != nil {
			t.Fatal(err)
		}
		decoy := []byte(configMapYAML(fmt.Sprintf("decoy-%d", i), "", "1"))
		if _, err := e.Apply(emu.Change{Name: a.Name, Content: decoy, Checksum: a.Checksum}); err != nil {
			t.Fatal(err)
		}
	}
	requestSync(t, getSync(t, "pg-reissue"))
	s := waitSync(t, "pg-reissue", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonPruneHeld, 30*time.Second)
	if !strings.Contains(s.Status.LastError, "4 of 4 objects") {
		t.Errorf("PruneHeld does not count the objects: %q", s.Status.LastError)
	}
	waitVREvent(t, "pg-reissue", infrahubv1alpha1.ReasonPruneHeld, "objects")
	consistently(t, 3*time.Second, tenantIntact(t, ns, "pgr", 4))

	// The admin's override: the exact token releases exactly this prune.
	annotateSync(t, "pg-reissue", infrahubv1alpha1.ConfirmPruneAnnotation, heldToken(t, "pg-reissue"))
	eventually(t, 30*time.Second, func() error {
		if tenantIntact(t, ns, "pgr", 4)() == nil {
			return fmt.Errorf("the confirmed prune did not go through")
		}
		return nil
	})
	waitSync(t, "pg-reissue", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
}

// Issue 42 finding 6, in place: a compromised Infrahub keeps every artifact's id and replaces
// its content with a decoy that names none of the tenant's objects. Each VidraResource took its
// new manifest and pruned what the old one applied; the guard never saw a deletion. A content
// update that drops applied objects is weighed as the prune it is, and held with the rest.
func TestContentEmptiedInPlaceDoesNotWipeTheTenant(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "pg-inplace")
	ns := namespace(t)
	arts := addArtifacts(t, e, "pg-inplace", "pgi", 4)
	newSync(t, "pg-inplace", url, "pg-inplace", ns)
	waitSync(t, "pg-inplace", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 60*time.Second)
	waitSyncResources(t, "pg-inplace", 4, 10*time.Second)
	eventually(t, 30*time.Second, tenantIntact(t, ns, "pgi", 4))

	for i, a := range arts {
		if _, err := e.UpdateArtifact("", a.ID, []byte(configMapYAML(fmt.Sprintf("decoy-%d", i), "", "1"))); err != nil {
			t.Fatal(err)
		}
	}
	requestSync(t, getSync(t, "pg-inplace"))
	s := waitSync(t, "pg-inplace", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonPruneHeld, 30*time.Second)
	if !strings.Contains(s.Status.LastError, "4 of 4 objects") || !strings.Contains(s.Status.LastError, "new content dropping 4 objects") {
		t.Errorf("PruneHeld does not count what the new content drops: %q", s.Status.LastError)
	}
	consistently(t, 3*time.Second, tenantIntact(t, ns, "pgi", 4))
	wantNotCreated(t, []absent{{&corev1.ConfigMap{}, ns, "decoy-0"}})

	annotateSync(t, "pg-inplace", infrahubv1alpha1.ConfirmPruneAnnotation, heldToken(t, "pg-inplace"))
	eventually(t, 30*time.Second, func() error {
		if tenantIntact(t, ns, "pgi", 4)() == nil {
			return fmt.Errorf("the confirmed update did not go through")
		}
		return exists(t, env.Client, &corev1.ConfigMap{}, ns, "decoy-3")
	})
	waitSync(t, "pg-inplace", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
}
