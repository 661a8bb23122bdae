package server

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/metaltest"
	"github.com/metalhub/metalhub/internal/discovery"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/testenv/suite"
)

// hideSecrets is a cache that has not caught up: Secrets are not in it yet.
type hideSecrets struct{ client.Client }

func (h hideSecrets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	return h.Client.Get(ctx, key, obj, opts...)
}

// A pass in Initial that runs before the cache has the round's Secret (created by the pass before
// it, whose Server write then lost a race) continues that round: no second round with a token
// the booting box does not carry, and no power-off of the box already booting it.
func TestInitialContinuesRoundTheCacheHasNotSeen(t *testing.T) {
	b := fleet.Take(t)
	sys := b.Systems()[0]
	sys.SetPowerState(redfish.PowerOn) // booting round r1 already
	name := "cachelag"
	s := &metalv1alpha1.Server{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{
			// A manager would leave it alone: this test runs the pass itself.
			metalv1alpha1.OperationAnnotation: metalv1alpha1.OperationIgnore}},
		Spec: metalv1alpha1.ServerSpec{SystemUUID: strings.ToLower(sys.UUID())},
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testOpts.DiscoveryNamespace, Name: discovery.ObjectName(name),
			Labels: map[string]string{discovery.ServerLabel: name, discovery.RoundLabel: "r1"}},
		Data: map[string][]byte{discovery.TokenKey: []byte("token-of-r1")},
	}
	c := metaltest.FakeClient(s, sec)

	pool, conn := suite.Connect(t, b)
	systems, err := conn.Systems(ctx())
	if err != nil || len(systems) == 0 {
		t.Fatalf("systems: %v %v", systems, err)
	}
	cached := hideSecrets{c}
	r := &Reconciler{Client: cached, APIReader: c, Pool: pool, Recorder: events.NewFakeRecorder(100), Options: testOpts, Now: time.Now}
	start := time.Now()
	rec := lifecycle.NewReconciler[*metalv1alpha1.Server](cached, func() *metalv1alpha1.Server { return &metalv1alpha1.Server{} },
		func(ctx context.Context, lp *lifecycle.Pass[*metalv1alpha1.Server]) (lifecycle.Result, error) {
			p := &serverPass{Pass: lp, c: lp.Client(), state: metalv1alpha1.ServerStateInitial, conn: conn, sysID: systems[0].ODataID}
			if p.sys, err = conn.System(ctx, p.sysID); err != nil {
				return lifecycle.Result{}, err
			}
			return r.initial(ctx, ctx, p)
		})
	if _, err := rec.Reconcile(ctx(), ctrl.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
		t.Fatal(err)
	}
	s = &metalv1alpha1.Server{}
	if err := c.Get(ctx(), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	if got, state := s.Annotations[discovery.RoundAnnotation], s.Annotations[lifecycle.StateAnnotation]; got != "r1" || state != string(metalv1alpha1.ServerStateDiscovery) {
		t.Errorf("round %q, state %q: want round r1 continued in Discovery", got, state)
	}
	if recs := suite.Since(fleet.BoxActions(b), start); len(recs) != 0 {
		t.Errorf("BMC actions on a box already booting its round: %v", suite.ResetTypes(recs))
	}
	live := &corev1.Secret{}
	if err := c.Get(ctx(), client.ObjectKeyFromObject(sec), live); err != nil || string(live.Data[discovery.TokenKey]) != "token-of-r1" {
		t.Errorf("round Secret replaced: %v %v", live.Labels, err)
	}
}
