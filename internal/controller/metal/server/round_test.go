package server

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// noLiveReads fails any read past the cache.
type noLiveReads struct{ t *testing.T }

func (n noLiveReads) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	n.t.Errorf("live read of %T %s", obj, key)
	return fmt.Errorf("no live reads in this pass")
}

func (n noLiveReads) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	n.t.Errorf("live list of %T", list)
	return fmt.Errorf("no live reads in this pass")
}

// roundObjects are a server's round Secret and boot configuration, labelled with purpose
// ("" for discovery).
func roundObjects(name, round, purpose string) (*corev1.Secret, *metalv1alpha1.ServerBootConfiguration) {
	labels := map[string]string{discovery.ServerLabel: name, discovery.RoundLabel: round}
	if purpose != "" {
		labels[discovery.PurposeLabel] = purpose
	}
	meta := metav1.ObjectMeta{Namespace: testOpts.DiscoveryNamespace, Name: discovery.ObjectName(name), Labels: labels}
	return &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{discovery.TokenKey: []byte("token-of-" + round)}},
		&metalv1alpha1.ServerBootConfiguration{ObjectMeta: *meta.DeepCopy(), Spec: metalv1alpha1.ServerBootConfigurationSpec{
			ServerRef: corev1.LocalObjectReference{Name: name}, Image: "img", IgnitionSecretRef: &corev1.LocalObjectReference{Name: meta.Name}}}
}

func roundGone(t *testing.T, c client.Client, name string) {
	t.Helper()
	key := client.ObjectKey{Namespace: testOpts.DiscoveryNamespace, Name: discovery.ObjectName(name)}
	if err := c.Get(ctx(), key, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("round Secret: %v, want it gone", err)
	}
	if err := c.Get(ctx(), key, &metalv1alpha1.ServerBootConfiguration{}); !apierrors.IsNotFound(err) {
		t.Errorf("round boot configuration: %v, want it gone", err)
	}
}

// The pass that takes a reported server to Available removes its round, so the first pass in
// Available has nothing to delete and reads nothing past the cache.
func TestDiscoveryEndsWithItsRound(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOn)
	name := "round-ends"
	s := cleaningServer(name, sys.UUID(), map[string]string{
		discovery.RoundAnnotation:    "r1",
		discovery.ReportedAnnotation: "r1",
		lifecycle.StateAnnotation:    string(metalv1alpha1.ServerStateDiscovery),
	})
	sec, sbc := roundObjects(name, "r1", "")
	c := metaltest.FakeClient(s, sec, sbc)
	s, acts := onePass(t, b, c, testOpts, name, metalv1alpha1.ServerStateDiscovery,
		func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
			return r.discovery(bctx, ctx, p)
		})
	if st := s.Annotations[lifecycle.StateAnnotation]; st != string(metalv1alpha1.ServerStateAvailable) {
		t.Fatalf("state %s, want Available", st)
	}
	if fmt.Sprint(acts) != "[ForceOff]" {
		t.Errorf("BMC actions %v, want the power-off", acts)
	}
	roundGone(t, c, name)

	sys.SetPowerState(redfish.PowerOff)
	s, acts = onePassReading(t, b, c, noLiveReads{t}, testOpts, name, metalv1alpha1.ServerStateAvailable,
		func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
			return r.available(bctx, ctx, p)
		})
	if st := s.Annotations[lifecycle.StateAnnotation]; st != string(metalv1alpha1.ServerStateAvailable) || len(acts) != 0 {
		t.Errorf("first pass in Available: state %s, BMC actions %v", st, acts)
	}
}

// A round an Available server still has (a cleaning's, which ends with the move to Available)
// is removed by its first pass there, found through the cached boot configuration.
func TestAvailableRemovesALeftRound(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOff)
	name := "round-left"
	s := cleaningServer(name, sys.UUID(), map[string]string{lifecycle.StateAnnotation: string(metalv1alpha1.ServerStateAvailable)})
	sec, sbc := roundObjects(name, "r2", discovery.PurposeCleaning)
	c := metaltest.FakeClient(s, sec, sbc)
	_, acts := onePassReading(t, b, c, noLiveReads{t}, testOpts, name, metalv1alpha1.ServerStateAvailable,
		func(r *Reconciler, bctx, ctx context.Context, p *serverPass) (lifecycle.Result, error) {
			return r.available(bctx, ctx, p)
		})
	if len(acts) != 0 {
		t.Errorf("BMC actions %v on a box already off", acts)
	}
	roundGone(t, c, name)
}
