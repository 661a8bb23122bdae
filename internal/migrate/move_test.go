package migrate

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/scheme"
)

// moveSource is a source cluster with one BMC per rack and its Server, plus the given claims.
func moveSource(claims ...*metalv1alpha1.ServerClaim) client.Client {
	objs := []client.Object{}
	for _, rack := range []string{"r1", "r2"} {
		objs = append(objs,
			&metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "bmc-" + rack, Labels: map[string]string{"rack": rack}}},
			&metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "srv-" + rack, Labels: map[string]string{"rack": rack}},
				Spec: metalv1alpha1.ServerSpec{SystemUUID: "u-" + rack, BMCRef: &corev1.LocalObjectReference{Name: "bmc-" + rack}}})
	}
	for _, c := range claims {
		objs = append(objs, c)
	}
	return fakeCluster(objs...)
}

func fakeCluster(objs ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(objs...).
		WithStatusSubresource(&metalv1alpha1.BMC{}, &metalv1alpha1.Server{}, &metalv1alpha1.ServerClaim{}).Build()
}

func unboundClaim(name string, sel map[string]string) *metalv1alpha1.ServerClaim {
	c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if sel != nil {
		c.Spec.ServerSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return c
}

// A selective move refuses while an unbound claim that stays behind could bind a moving server;
// one whose selector excludes the selection does not hold it up.
func TestSelectiveMoveRefusesStrayClaims(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"rack": "r1"})
	for _, tc := range []struct {
		name   string
		claim  *metalv1alpha1.ServerClaim
		refuse bool
	}{
		{"any server", unboundClaim("any", nil), true},
		{"selects the moving rack", unboundClaim("r1", map[string]string{"rack": "r1"}), true},
		{"selects the other rack", unboundClaim("r2", map[string]string{"rack": "r2"}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := moveSource(tc.claim), moveSource()
			var out bytes.Buffer
			err := Move(context.Background(), src, dst, MoveOptions{Selector: sel, DryRun: true, Out: &out})
			if tc.refuse != (err != nil && strings.Contains(err.Error(), "ns/"+tc.claim.Name)) {
				t.Fatalf("move: %v (refusal wanted: %v)", err, tc.refuse)
			}
		})
	}
}

// Without acknowledgements from the source's manager the move stops before copying anything,
// naming what did not answer; the source stays paused.
func TestMoveWaitsForTheSourceToAcknowledge(t *testing.T) {
	src, dst := moveSource(), fakeCluster()
	var out bytes.Buffer
	err := Move(context.Background(), src, dst, MoveOptions{Out: &out, PauseTimeout: 1})
	if err == nil || !strings.Contains(err.Error(), "did not acknowledge") || !strings.Contains(err.Error(), "Server srv-r1") {
		t.Fatalf("move without acknowledgements: %v", err)
	}
	if err := dst.Get(context.Background(), client.ObjectKey{Name: "srv-r1"}, &metalv1alpha1.Server{}); err == nil {
		t.Fatal("a copy was made without the source's acknowledgement")
	}
	s := &metalv1alpha1.Server{}
	if err := src.Get(context.Background(), client.ObjectKey{Name: "srv-r1"}, s); err != nil || !lifecycle.Paused(s) {
		t.Fatalf("the source is not left paused: %v %v", err, s.Annotations)
	}
	// A source declared stopped moves without them, and is then marked moved: not run again.
	if err := Move(context.Background(), src, dst, MoveOptions{Out: &out, SourceStopped: true}); err != nil {
		t.Fatalf("move with --source-stopped: %v", err)
	}
	if err := dst.Get(context.Background(), client.ObjectKey{Name: "srv-r1"}, &metalv1alpha1.Server{}); err != nil {
		t.Fatalf("no copy after the move: %v", err)
	}
	if err := Move(context.Background(), src, dst, MoveOptions{Out: &out, SourceStopped: true}); err == nil || !strings.Contains(err.Error(), "moved already") {
		t.Fatalf("a finished move run again: %v", err)
	}
}
