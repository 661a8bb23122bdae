package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
)

// sealAsAdmitted seals the live obj as the webhook seals what it admitted, and writes the seal.
func sealAsAdmitted(t *testing.T, s *sealing.Sealer, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	if err := s.Seal(ctx, obj, sealing.Admitted); err != nil {
		t.Fatal(err)
	}
	patch := `{"metadata":{"annotations":{"` + infrahubv1alpha1.SealAnnotation + `":"` + obj.GetAnnotations()[infrahubv1alpha1.SealAnnotation] + `"}}}`
	if err := env.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// Issue 42 finding 3: with the webhooks on, the operator trusted a writer-named ServiceAccount
// and the admitted-* annotations on every object, also on those written before the webhook
// existed or changed while it was not serving. Now it honours them only under a seal that
// verifies; an unsealed object applies nothing, says so, and says how to re-admit it.
func TestUnsealedObjectsAreNotHonoured(t *testing.T) {
	o := fastOptions()
	o.assumeSealed = false
	o.TrustAdmittedCredentials = true
	o.AllowOperatorIdentity = false
	o.DefaultServiceAccount = "delivery"
	startManager(t, o)
	ctx := context.Background()
	ns := namespace(t)
	serviceAccountWithConfigMaps(t, ns, "delivery")
	serviceAccountWithConfigMaps(t, ns, "deployer")
	seals := &sealing.Sealer{Keys: sealing.NewKeys(env.Client, env.Client, InventoryNamespace(o)), Now: time.Now}

	// A VidraResource naming a ServiceAccount, written with no webhook in the path.
	vr := newResource(t, "unsealed-sa", ns, configMapYAML("unsealed-sa", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.ServiceAccountName = "deployer"
	})
	got := waitResource(t, vr.Name, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonUnsealed, 30*time.Second)
	if !strings.Contains(got.Status.LastError, infrahubv1alpha1.ReadmitAnnotation) || !strings.Contains(got.Status.LastError, ns+"/deployer") {
		t.Errorf("lastError %q does not name the ServiceAccount and how to re-admit", got.Status.LastError)
	}
	wantNotCreated(t, []absent{{&corev1.ConfigMap{}, ns, "unsealed-sa"}})

	// Sealed, as the webhook seals what its writer had the rights for: applied.
	sealAsAdmitted(t, seals, vr)
	waitResource(t, vr.Name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "unsealed-sa"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the sealed VidraResource's ConfigMap: %v", err)
	}

	// Its manifest changed with no webhook in the path: the seal no longer holds, nothing new applied.
	// A merge patch: the controller writes this object too (a read-modify-update would race it).
	manifest, err := json.Marshal(configMapYAML("unsealed-sa", "", "1") + "---\n" + configMapYAML("planted", "", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Patch(ctx, vr.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"manifest":`+string(manifest)+`}}`))); err != nil {
		t.Fatal(err)
	}
	waitResource(t, vr.Name, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonUnsealed, 30*time.Second)
	wantNotCreated(t, []absent{{&corev1.ConfigMap{}, ns, "planted"}})

	// The admin's default identity needs no admission: applied unsealed.
	newResource(t, "unsealed-default", ns, configMapYAML("unsealed-default", "", "1"))
	waitResource(t, "unsealed-default", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	// A sync whose admitted-credentials annotation no admission sealed: nothing is sent.
	e, url := startBareInfrahub(t, "sealed-sync")
	host := strings.Split(strings.TrimPrefix(url, "http://"), ":")[0]
	creds := createSecret(t, ns, infrahubv1alpha1.InfrahubAPIURLLabel, host, loginData)
	s := newSync(t, "unsealed-creds", url, "web", ns, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Annotations = map[string]string{infrahubv1alpha1.AdmittedCredentialsAnnotation: ns + "/" + creds.Name}
	})
	gs := waitSync(t, s.Name, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonUnsealed, 30*time.Second)
	if !strings.Contains(gs.Status.LastError, creds.Name) {
		t.Errorf("sync lastError %q does not name the Secret", gs.Status.LastError)
	}
	wantNothingSent(t, e)

	// Sealed: delivered, and the VidraResources the operator writes for it carry its seal.
	sealAsAdmitted(t, seals, s)
	waitSync(t, s.Name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonSynced, 30*time.Second)
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	live2 := getSync(t, s.Name)
	n := 0
	for i := range list.Items {
		if !apply.OwnedBy(&list.Items[i], live2) {
			continue
		}
		n++
		if level, why := seals.Level(ctx, &list.Items[i]); level != sealing.Admitted {
			t.Errorf("VidraResource %s of the sealed sync: seal level %d (%s)", list.Items[i].Name, level, why)
		}
	}
	if n == 0 {
		t.Fatal("the sealed sync wrote no VidraResource")
	}

	// A VidraResource of the sync without its seal (as those written before seals existed): the
	// sync's next pass seals it again, without downloading anything.
	first := list.Items[0].DeepCopy()
	if !apply.OwnedBy(first, live2) {
		for i := range list.Items {
			if apply.OwnedBy(&list.Items[i], live2) {
				first = list.Items[i].DeepCopy()
			}
		}
	}
	unsealPatch := `{"metadata":{"annotations":{"` + infrahubv1alpha1.SealAnnotation + `":null}}}`
	if err := env.Client.Patch(ctx, first, client.RawPatch(types.MergePatchType, []byte(unsealPatch))); err != nil {
		t.Fatal(err)
	}
	downloads := e.Counters().Downloads
	patchAnnotation(t, getSync(t, s.Name), infrahubv1alpha1.RequestedAtAnnotation, time.Now().Format(time.RFC3339Nano))
	eventually(t, 30*time.Second, func() error {
		vr := &infrahubv1alpha1.VidraResource{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(first), vr); err != nil {
			return err
		}
		if level, why := seals.Level(ctx, vr); level != sealing.Admitted {
			return fmt.Errorf("VidraResource %s: seal level %d (%s)", vr.Name, level, why)
		}
		return nil
	})
	if got := e.Counters().Downloads; got != downloads {
		t.Errorf("resealing downloaded %d artifacts", got-downloads)
	}
}
