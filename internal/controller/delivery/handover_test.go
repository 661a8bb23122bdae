package delivery

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
)

// Issue 42, finding 3: handover-from is honoured only between VidraResources of one sync. A
// VidraResource written by hand into a namespace the sync delivers to, naming the sync's
// VidraResource, does not take its objects over: it fails saying why, and the object keeps its
// content and its owner.
func TestHandoverOnlyWithinOneSync(t *testing.T) {
	startManager(t, fastOptions())
	e, url := startInfrahub(t, nil, "ho-sync")
	ns := namespace(t)
	a, err := e.AddArtifact("", "ho-app", "", []byte(configMapYAML("ho-target", "", "theirs")))
	if err != nil {
		t.Fatal(err)
	}
	newSync(t, "ho-sync", url, "ho-app", ns)
	victim := waitResource(t, a.ID, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	newResource(t, "ho-thief", ns, configMapYAML("ho-target", "", "stolen"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Annotations = map[string]string{infrahubv1alpha1.HandoverAnnotation: victim.Name + ":" + string(victim.UID)}
	})
	got := waitResource(t, "ho-thief", infrahubv1alpha1.StateFailed, "", 20*time.Second)
	c := meta.FindStatusCondition(got.Status.Conditions, infrahubv1alpha1.ConditionReady)
	if c.Reason != infrahubv1alpha1.ReasonHandoverRefused || !strings.Contains(got.Status.LastError, infrahubv1alpha1.HandoverAnnotation) {
		t.Errorf("the refused handover reads %s: %q; want %s naming the annotation", c.Reason, got.Status.LastError, infrahubv1alpha1.ReasonHandoverRefused)
	}
	waitVREvent(t, "ho-thief", infrahubv1alpha1.ReasonHandoverRefused, "ConfigMap/"+ns+"/ho-target")
	consistently(t, time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := exists(t, env.Client, cm, ns, "ho-target"); err != nil {
			return err
		}
		if cm.Data["value"] != "theirs" || strings.Join(target.OwnersOf(cm), ",") != a.ID {
			return fmt.Errorf("taken over by a hand-made handover: data %v, owned-by %v", cm.Data, target.OwnersOf(cm))
		}
		return nil
	})
}
