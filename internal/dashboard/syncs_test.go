package dashboard

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
)

// A sync (cluster-scoped, as its VidraResources) lists the VidraResources it owns or that carry its label, with their health, and
// follows their changes.
func TestSyncsWithResourceHealth(t *testing.T) {
	s := start(t, Options{})
	sync := &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "sy-1"},
		Spec: infrahubv1alpha1.InfrahubSyncSpec{Source: infrahubv1alpha1.Source{InfrahubAPIURL: "https://infrahub.invalid", TargetBranch: "main", ArtefactName: "cfg"}}}
	create(t, sync)
	sync.Status.SyncState = "Failed"
	sync.Status.LastError = "artifact cfg-2 failed"
	if err := env.Client.Status().Update(ctx(), sync); err != nil {
		t.Fatal(err)
	}
	owned := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "sy-1-a",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync", Name: "sy-1", UID: sync.UID, Controller: new(true)}}}}
	labelled := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "sy-1-b", Labels: map[string]string{syncLabel: "sy-1"}}}
	other := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "sy-other", Labels: map[string]string{syncLabel: "sy-2"}}}
	owned.Spec.Manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\n"
	create(t, owned, labelled, other)
	labelled.Status.Health = "Failed"
	labelled.Status.LastError = "apply failed"
	labelled.Status.Conditions = []metav1.Condition{{Type: infrahubv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ApplyFailed", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx(), labelled); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "sync with its two resources' health", func() (bool, string) {
		var snap Snapshot
		getJSON(t, s.URL()+"api/snapshot", &snap)
		for _, raw := range snap.Items[collSyncs] {
			var it SyncItem
			_ = json.Unmarshal(raw, &it)
			if it.Name != "sy-1" {
				continue
			}
			got := fmt.Sprint(it.State, " ", it.LastError, " ", it.Resources)
			return got == "Failed artifact cfg-2 failed [{sy-1-a    } {sy-1-b  Failed False (ApplyFailed) apply failed}]", got + fmt.Sprint(snap.Access)
		}
		return false, fmt.Sprint("no sy-1 ", snap.Access)
	})
	// The informer holds no manifest (a few hundred of 1 MiB would fill the process).
	for _, o := range s.watch.resources.GetStore().List() {
		if r := o.(*infrahubv1alpha1.VidraResource); r.Spec.Manifest != "" || len(r.ManagedFields) > 0 {
			t.Errorf("VidraResource %s held with its manifest (%d bytes) or managed fields", r.Name, len(r.Spec.Manifest))
		}
	}
}

// An idle stream carries a comment now and then, so nothing in between times it out.
func TestStreamHeartbeat(t *testing.T) {
	old := heartbeat
	heartbeat = 50 * time.Millisecond
	t.Cleanup(func() { heartbeat = old })
	s := start(t, Options{})
	resp, err := http.Get(s.URL() + "api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReader(resp.Body)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, ": heartbeat") {
			return
		}
	}
	t.Fatal("no heartbeat")
}
