package webhook_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controlplane"
	"github.com/metalhub/metalhub/internal/testenv"
	"github.com/metalhub/metalhub/internal/webhook"
)

var env *testenv.Env

// One control plane for the package, with the webhooks served from this process (self-signed
// certificate generated into an empty directory) and registered with it.
func TestMain(m *testing.M) {
	// With kube-controller-manager: its role aggregation gives the built-in edit role its rules,
	// which the tenancy tests bind.
	os.Exit(testenv.MainWith(m, &env, controlplane.Options{ControllerManager: true}, func(m *testing.M) int {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		dir, err := os.MkdirTemp("", "metalhub-webhook-certs-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		o := webhook.DefaultOptions()
		o.Enabled, o.Host, o.Port, o.CertDir = true, "127.0.0.1", 0, filepath.Join(dir, "certs")
		// Syncs in these tests name no ServiceAccount: the operator applies as itself.
		o.Delivery.AllowOperatorIdentity = true
		// Low, so that the quota test reaches it; the operator's (the admin's here) writes are
		// not counted.
		o.Delivery.Limits.MaxObjectsPerWriter = 3
		done, err := webhook.StartLocal(ctx, env.Config, o, logr.Discard())
		if err != nil {
			panic(err)
		}
		code := m.Run()
		cancel()
		if err := <-done; err != nil {
			panic(err)
		}
		return code
	}))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func create(t *testing.T, obj client.Object) error {
	t.Helper()
	err := env.Client.Create(ctx(t), obj)
	if err == nil {
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	return err
}

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := create(t, obj); err != nil {
		t.Fatalf("%T %s refused: %v", obj, obj.GetName(), err)
	}
}

// refused asserts that err is the API server's Invalid answer saying want.
func refused(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want refused with %q", want)
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v; want Invalid saying %q", err, want)
	}
}

func TestEndpointMACsUnique(t *testing.T) {
	first := &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "rack1-bmc"}, Spec: metalv1alpha1.EndpointSpec{MACAddress: "52:54:00:AA:BB:10", IP: "10.0.0.10"}}
	mustCreate(t, first)

	// Same MAC in lower case with dashes: refused, naming the Endpoint that has it.
	second := &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "rack1-bmc-again"}, Spec: metalv1alpha1.EndpointSpec{MACAddress: "52-54-00-aa-bb-10", IP: "10.0.0.11"}}
	refused(t, create(t, second),
		`Endpoint.metal.ironcore.dev "rack1-bmc-again" is invalid: spec.macAddress: Duplicate value: "52-54-00-aa-bb-10": MAC address 52:54:00:aa:bb:10 is already used by Endpoint "rack1-bmc"`)

	// Another MAC is fine; changing it to the taken one is not.
	other := &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "rack2-bmc"}, Spec: metalv1alpha1.EndpointSpec{MACAddress: "52:54:00:aa:bb:11", IP: "10.0.0.12"}}
	mustCreate(t, other)
	other.Spec.MACAddress = "52:54:00:aa:bb:10"
	refused(t, env.Client.Update(ctx(t), other), `already used by Endpoint "rack1-bmc"`)

	// The first one's own updates (same MAC, another spelling; a label) pass.
	first.Spec.MACAddress = "52:54:00:aa:bb:10"
	first.Labels = map[string]string{"rack": "1"}
	if err := env.Client.Update(ctx(t), first); err != nil {
		t.Fatalf("update keeping the MAC refused: %v", err)
	}
	// Once the first is gone, its MAC is free.
	if err := env.Client.Delete(ctx(t), first); err != nil {
		t.Fatal(err)
	}
	second.ResourceVersion = ""
	mustCreate(t, second)
}

func TestServerClaimSelector(t *testing.T) {
	claim := func(name string, sel *metav1.LabelSelector, ref string) *metalv1alpha1.ServerClaim {
		c := &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: "img", ServerSelector: sel}}
		if ref != "" {
			c.Spec.ServerRef = &corev1.LocalObjectReference{Name: ref}
		}
		return c
	}
	refused(t, create(t, claim("in-no-values", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: metav1.LabelSelectorOpIn}}}, "")),
		`ServerClaim.metal.ironcore.dev "in-no-values" is invalid: spec.serverSelector.matchExpressions[0].values: Required value: must be specified when `+"`operator`"+` is 'In' or 'NotIn'`)
	refused(t, create(t, claim("bad-op", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "rack", Operator: "Equals", Values: []string{"r1"}}}}, "")),
		`spec.serverSelector.matchExpressions[0].operator: Invalid value: "Equals": not a valid selector operator`)
	refused(t, create(t, claim("bad-label", &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "row 1"}}, "")),
		`spec.serverSelector.matchLabels: Invalid value: "row 1"`)

	// A valid selector, with or without a serverRef, is admitted; it cannot be broken later.
	good := claim("by-selector", &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "gpu", Operator: metav1.LabelSelectorOpExists}}}, "")
	mustCreate(t, good)
	mustCreate(t, claim("by-both", &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}}, "server-1"))
	good.Spec.ServerSelector.MatchExpressions[0].Values = []string{"yes"}
	refused(t, env.Client.Update(ctx(t), good), "spec.serverSelector.matchExpressions[0].values: Forbidden")
}

func TestInfrahubSync(t *testing.T) {
	sync := func(name, url, date string) *infrahubv1alpha1.InfrahubSync {
		return &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
			Source: infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", TargetDate: date, ArtefactName: "a"}}}
	}
	// URLs: the CRD's rules (CEL), no webhook needed.
	refused(t, create(t, sync("relative-url", "infrahub.example/api", "")), "spec.source.infrahubAPIURL")
	refused(t, create(t, sync("ftp-url", "ftp://infrahub.example", "")), "must be an absolute http or https URL with a host")
	refused(t, create(t, sync("bad-port", "https://infrahub.example:70000", "")), "port must be between 1 and 65535")
	// The target date: the webhook, with the controller's explanation.
	refused(t, create(t, sync("days", "https://infrahub.example", "now-2d")),
		`InfrahubSync.infrahub.operators.com "days" is invalid: spec.source.targetDate: Invalid value: "now-2d": Infrahub does not understand day or week units; use hours, e.g. now-48h`)
	ok := sync("good", "http://127.0.0.1:8300", "2025-04-09T00:00:00Z")
	mustCreate(t, ok)
	ok.Spec.Source.TargetDate = "now+1h"
	refused(t, env.Client.Update(ctx(t), ok), "Infrahub reads now+1h as 1h in the past")
}

func TestBMCSecretImmutable(t *testing.T) {
	frozen := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "frozen"}, Immutable: ptr.To(true),
		Data: map[string][]byte{"username": []byte("admin"), "password": []byte("old")}}
	mustCreate(t, frozen)
	frozen.Data["password"] = []byte("new")
	refused(t, env.Client.Update(ctx(t), frozen), "data is immutable because immutable is true")

	// Not marked immutable: a password rotation passes.
	rotating := &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "rotating"},
		StringData: map[string]string{"username": "admin", "password": "old"}}
	mustCreate(t, rotating)
	rotating.StringData["password"] = "new"
	if err := env.Client.Update(ctx(t), rotating); err != nil {
		t.Fatalf("rotation refused: %v", err)
	}
}
