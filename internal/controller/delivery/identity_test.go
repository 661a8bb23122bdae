package delivery

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	webhookconfig "github.com/metalhub/metalhub/config/webhook"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

func TestServiceAccountFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d                infrahubv1alpha1.Destination
		defaultSA        string
		wantNS, wantName string
	}{
		{infrahubv1alpha1.Destination{Namespace: "apps", ServiceAccountName: "deployer"}, "", "apps", "deployer"},
		{infrahubv1alpha1.Destination{Namespace: "apps", ServiceAccountName: "deployer", ServiceAccountNamespace: "ci"}, "x", "ci", "deployer"},
		{infrahubv1alpha1.Destination{Namespace: "apps"}, "delivery", "apps", "delivery"},
		{infrahubv1alpha1.Destination{Namespace: "apps"}, "platform/delivery", "platform", "delivery"},
		{infrahubv1alpha1.Destination{}, "delivery", "default", "delivery"},
		{infrahubv1alpha1.Destination{Namespace: "apps"}, "", "", ""},
	} {
		ns, name := target.ServiceAccountFor(tc.d, tc.defaultSA)
		if ns != tc.wantNS || name != tc.wantName {
			t.Errorf("ServiceAccountFor(%+v, %q) = %s/%s, want %s/%s", tc.d, tc.defaultSA, ns, name, tc.wantNS, tc.wantName)
		}
	}
}

// Issue 24, finding 1: with no ServiceAccount and no default, a VidraResource used to apply as
// the operator. Without --delivery-allow-operator-identity it is refused and says why, and
// nothing is applied.
func TestNoServiceAccountAppliesNothing(t *testing.T) {
	o := fastOptions()
	o.AllowOperatorIdentity = false
	startManager(t, o)
	ns := namespace(t)
	newResource(t, "no-sa", ns, configMapYAML("no-sa", "", "1"))
	vr := waitResource(t, "no-sa", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonNoServiceAccount, 30*time.Second)
	if !strings.Contains(vr.Status.LastError, "--delivery-allow-operator-identity") {
		t.Fatalf("lastError %q does not say how to allow it", vr.Status.LastError)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "no-sa"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the ConfigMap was applied, or reading it failed: %v", err)
	}
}

// serviceAccountWithConfigMaps creates ServiceAccount ns/name allowed to manage ConfigMaps in ns.
func serviceAccountWithConfigMaps(t *testing.T, ns, name string) {
	t.Helper()
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}},
	} {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 42, finding 1: with the webhooks off (the binary's default) nothing checks that the
// writer may impersonate the ServiceAccount she names, so the operator acts only as the admin's
// default identity. A VidraResource or sync naming another ServiceAccount applies nothing and
// says the webhook is needed; one naming none, or the default itself, applies as the default.
func TestWriterNamedServiceAccountNeedsAdmission(t *testing.T) {
	o := fastOptions()
	o.admission, o.AdmissionWebhook = nil, false
	o.AllowOperatorIdentity = false
	o.DefaultServiceAccount = "delivery"
	o.Policy.AllowedNamespaces = []string{"*"}
	startManager(t, o)
	own, other := namespace(t), namespace(t)
	serviceAccountWithConfigMaps(t, own, "delivery")
	serviceAccountWithConfigMaps(t, other, "deployer") // whose rights the tenant has not

	newResource(t, "elsewhere", other, configMapYAML("planted", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.ServiceAccountName = "deployer"
	})
	vr := waitResource(t, "elsewhere", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonAdmissionRequired, 30*time.Second)
	if !strings.Contains(vr.Status.LastError, "--enable-webhooks") || !strings.Contains(vr.Status.LastError, other+"/deployer") {
		t.Errorf("lastError %q does not say which ServiceAccount needs the webhook", vr.Status.LastError)
	}
	waitVREvent(t, "elsewhere", infrahubv1alpha1.ReasonAdmissionRequired, "admission webhook")
	wantNotCreated(t, []absent{{&corev1.ConfigMap{}, other, "planted"}})

	// The admin's default, implicitly or by name: applied.
	newResource(t, "default-implicit", own, configMapYAML("implicit", "", "1"))
	newResource(t, "default-named", own, configMapYAML("named", "", "1"), func(vr *infrahubv1alpha1.VidraResource) {
		vr.Spec.Destination.ServiceAccountName = "delivery"
	})
	for _, name := range []string{"default-implicit", "default-named"} {
		waitResource(t, name, infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)
	}

	// A sync naming another ServiceAccount fails before it queries, and writes no VidraResource.
	s := newSync(t, "elsewhere-sync", "http://127.0.0.1:1", "a", other, func(s *infrahubv1alpha1.InfrahubSync) {
		s.Spec.Destination.ServiceAccountName = "deployer"
	})
	got := waitSync(t, "elsewhere-sync", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonAdmissionRequired, 30*time.Second)
	if !strings.Contains(got.Status.LastError, "--enable-webhooks") {
		t.Errorf("sync lastError %q does not say the webhook is needed", got.Status.LastError)
	}
	var list infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for _, vr := range list.Items {
		if apply.OwnedBy(&vr, s) {
			t.Errorf("the refused sync wrote VidraResource %s", vr.Name)
		}
	}
}

// The identity decision, with the webhook guard and the operator's own user as given.
func TestIdentityActAs(t *testing.T) {
	t.Parallel()
	serving := func(context.Context) error { return nil }
	notServing := func(context.Context) error { return errors.New("no configuration") }
	self := &target.SelfUser{Name: "system:serviceaccount:metalhub-system:metalhub-controller-manager"}
	for _, tc := range []struct {
		name      string
		d         infrahubv1alpha1.Destination
		defaultSA string
		operator  bool
		admission func(context.Context) error
		unsealed  bool
		want      string
		reason    string
	}{
		{name: "named, guarded", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "x"}, admission: serving, want: "system:serviceaccount:a:x"},
		{name: "named, guarded, unsealed", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "x"}, admission: serving, unsealed: true, reason: infrahubv1alpha1.ReasonUnsealed},
		{name: "none, default, unsealed", d: infrahubv1alpha1.Destination{Namespace: "a"}, defaultSA: "d", unsealed: true, want: "system:serviceaccount:a:d"},
		{name: "the default by name, unsealed", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "d", ServiceAccountNamespace: "p"}, defaultSA: "p/d", unsealed: true, want: "system:serviceaccount:p:d"},
		{name: "named, webhooks off", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "x"}, reason: infrahubv1alpha1.ReasonAdmissionRequired},
		{name: "named, not configured", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "x"}, admission: notServing, reason: infrahubv1alpha1.ReasonAdmissionRequired},
		{name: "none, default", d: infrahubv1alpha1.Destination{Namespace: "a"}, defaultSA: "d", want: "system:serviceaccount:a:d"},
		{name: "the default by name", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "d", ServiceAccountNamespace: "p"}, defaultSA: "p/d", want: "system:serviceaccount:p:d"},
		{name: "default's name elsewhere", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "d", ServiceAccountNamespace: "q"}, defaultSA: "p/d", reason: infrahubv1alpha1.ReasonAdmissionRequired},
		{name: "none, operator allowed", d: infrahubv1alpha1.Destination{Namespace: "a"}, operator: true, want: ""},
		{name: "none, no default", d: infrahubv1alpha1.Destination{Namespace: "a"}, reason: infrahubv1alpha1.ReasonNoServiceAccount},
		{name: "the operator's own, guarded", d: infrahubv1alpha1.Destination{Namespace: "a", ServiceAccountName: "metalhub-controller-manager", ServiceAccountNamespace: "metalhub-system"},
			admission: serving, reason: infrahubv1alpha1.ReasonOperatorServiceAccount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := &target.Identity{DefaultSA: tc.defaultSA, AllowOperator: tc.operator, Admission: tc.admission, Self: self}
			seal := sealing.View{Kind: "VidraResource", Name: "r", Level: sealing.Admitted}
			if tc.unsealed {
				seal.Level, seal.Why = sealing.Unsealed, "it carries no seal"
			}
			got, err := id.ActAs(context.Background(), tc.d, seal)
			reason, _ := lifecycle.ReasonOf(err)
			if got != tc.want || reason != tc.reason {
				t.Errorf("actAs = %q, %v; want %q, reason %q", got, err, tc.want, tc.reason)
			}
		})
	}
}

// The generated configuration guards both kinds; one that leaves out deletes, fails open or
// exempts objects does not.
func TestWebhooksGuard(t *testing.T) {
	t.Parallel()
	gen, err := webhookconfig.ValidatingWebhookConfiguration()
	if err != nil {
		t.Fatal(err)
	}
	if err := sealing.WebhooksGuard(nil, ""); err == nil || !strings.Contains(err.Error(), "infrahubsyncs and vidraresources") {
		t.Errorf("no configuration: %v", err)
	}
	for _, tc := range []struct {
		name   string
		edit   func(w *admissionregistrationv1.ValidatingWebhook)
		ns     string
		passes bool
	}{
		{"generated", func(*admissionregistrationv1.ValidatingWebhook) {}, "system", true},
		{"another namespace's", func(*admissionregistrationv1.ValidatingWebhook) {}, "metalhub-system", false},
		{"local URL", func(w *admissionregistrationv1.ValidatingWebhook) {
			url := "https://127.0.0.1:9443" + *w.ClientConfig.Service.Path
			w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
		}, "metalhub-system", true},
		{"no deletes", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
		}, "system", false},
		{"fails open", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		}, "system", false},
		{"object selector", func(w *admissionregistrationv1.ValidatingWebhook) {
			w.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"checked": "yes"}}
		}, "system", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := gen.DeepCopy()
			for i := range cfg.Webhooks {
				if strings.Contains(cfg.Webhooks[i].Name, "infrahub.operators.com") {
					tc.edit(&cfg.Webhooks[i])
				}
			}
			if err := sealing.WebhooksGuard([]admissionregistrationv1.ValidatingWebhookConfiguration{*cfg}, tc.ns); (err == nil) != tc.passes {
				t.Errorf("WebhooksGuard = %v; want passing %v", err, tc.passes)
			}
		})
	}
	// Live: this package's control plane has no webhook configuration.
	g := &sealing.WebhookGuard{Reader: env.Client, Interval: time.Minute, Now: time.Now}
	if err := g.Check(context.Background()); err == nil {
		t.Error("the guard passed with no webhook configuration installed")
	}
}
