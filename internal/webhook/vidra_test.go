package webhook_test

import (
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/scheme"
	"github.com/metalhub/metalhub/internal/testenv"
)

// clusterAdmin is a user bound to cluster-admin, other than the one the webhooks run as (whose
// own writes are the operator's bookkeeping).
func clusterAdmin(t *testing.T) (string, client.Client) {
	t.Helper()
	user := fmt.Sprintf("vidra-admin-%d", tenantSeq.Add(1))
	mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the admin's binding in effect", func() (bool, string) {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "get", Resource: "secrets", Namespace: "default"}}}
		if err := c.Create(ctx(t), r); err != nil {
			return false, err.Error()
		}
		return r.Status.Allowed, "get secrets not allowed yet"
	})
	return user, c
}

// vidraSecret is a credentials Secret as Vidra users have them: labelled with the bare host,
// no annotation.
func vidraSecret(t *testing.T, ns, name, host string, annotations map[string]string) {
	t.Helper()
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{infrahubv1alpha1.InfrahubAPIURLLabel: host}, Annotations: annotations},
		StringData: map[string]string{"username": "admin", "password": "infrahub"}})
}

func admitted(t *testing.T, name string) string {
	t.Helper()
	s := &infrahubv1alpha1.InfrahubSync{}
	if err := env.Client.Get(ctx(t), client.ObjectKey{Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s.Annotations[infrahubv1alpha1.AdmittedCredentialsAnnotation]
}

// Issue 42, finding 7: a sync that names no credentials Secret is bound at admission to the one
// labelled infrahub-api-url for its host, as Vidra finds it, if its writer may get it; a writer
// who may not is refused with the right named. The binding is recorded on the sync.
func TestVidraCredentialsBoundAtAdmission(t *testing.T) {
	_, asAdmin := clusterAdmin(t)
	tenantA, nsA, asA := tenant(t, "vidra-tenant")
	createAs := func(c client.Client, obj client.Object) error {
		err := c.Create(ctx(t), obj)
		if err == nil {
			t.Cleanup(func() { _ = env.Client.Delete(ctx(t), obj) })
		}
		return err
	}
	host := func(what string) string { return fmt.Sprintf("infrahub-%s-%s.infrahub.svc", what, nsA) }
	own := infrahubv1alpha1.Destination{Namespace: nsA, ServiceAccountName: "deployer"}

	// The admin's Vidra manifests: the Secret in the operator's Secret namespace (here default),
	// a sync over http naming neither Secret nor ServiceAccount.
	vidraSecret(t, "default", "creds-"+nsA, host("admin"), nil)
	s := syncTo("admin-"+nsA, "http://"+host("admin")+":8000", infrahubv1alpha1.Destination{Namespace: nsA})
	if err := createAs(asAdmin, s); err != nil {
		t.Fatalf("the admin's Vidra sync refused: %v", err)
	}
	if got, want := admitted(t, s.Name), "default/creds-"+nsA; got != want {
		t.Fatalf("admin's sync bound to %q, want %q", got, want)
	}

	// A tenant whose sync would use it, without the right to read it: refused, the right named.
	forbidden(t, createAs(asA, syncTo("tenant-"+nsA, "http://"+host("admin")+":8000", own)),
		fmt.Sprintf(`user %q may not get secrets "creds-%s" in namespace default: the sync names it as its Infrahub credentials`, tenantA, nsA))

	// The tenant's own Secret in her destination namespace: bound, as Vidra would find it.
	vidraSecret(t, nsA, "mine", host("tenant"), nil)
	mine := syncTo("mine-"+nsA, "http://"+host("tenant")+":8000", own)
	if err := createAs(asA, mine); err != nil {
		t.Fatalf("the tenant's sync over her own Secret refused: %v", err)
	}
	if got, want := admitted(t, mine.Name), nsA+"/mine"; got != want {
		t.Fatalf("tenant's sync bound to %q, want %q", got, want)
	}
	// Moved to another host: bound afresh (here to nothing: no Secret is labelled for it).
	fresh := &infrahubv1alpha1.InfrahubSync{}
	if err := asA.Get(ctx(t), client.ObjectKeyFromObject(mine), fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Spec.Source.InfrahubAPIURL = "http://" + host("nobody") + ":8000"
	if err := asA.Update(ctx(t), fresh); err != nil {
		t.Fatalf("moving the sync to another host refused: %v", err)
	}
	if got := admitted(t, mine.Name); got != "" {
		t.Fatalf("moved sync still bound to %q", got)
	}

	// A Secret in the Secret namespace that names the sync binds it as before: nothing recorded.
	vidraSecret(t, "default", "named-"+nsA, host("named"), map[string]string{infrahubv1alpha1.SyncsAnnotation: "named-" + nsA})
	named := syncTo("named-"+nsA, "http://"+host("named")+":8000", infrahubv1alpha1.Destination{Namespace: nsA})
	if err := createAs(asAdmin, named); err != nil {
		t.Fatalf("sync named by its Secret refused: %v", err)
	}
	if got := admitted(t, named.Name); got != "" {
		t.Fatalf("sync named by its Secret also bound to %q", got)
	}

	// Two Secrets for the host on one step: refused, naming both, never a choice.
	vidraSecret(t, nsA, "twin-1", host("twin"), nil)
	vidraSecret(t, nsA, "twin-2", host("twin"), nil)
	forbidden(t, createAs(asA, syncTo("twin-"+nsA, "http://"+host("twin")+":8000", own)),
		fmt.Sprintf("%s/twin-1, %s/twin-2", nsA, nsA))

	// The operator's own writes never bind (it may read every Secret).
	op := syncTo("operator-"+nsA, "http://"+host("admin")+":8000", infrahubv1alpha1.Destination{Namespace: nsA})
	mustCreate(t, op)
	if got := admitted(t, op.Name); got != "" {
		t.Fatalf("a sync the operator wrote was bound to %q", got)
	}
	// An existing sync (Vidra's, before the switch) is bound by an admin's update that instructs
	// the operator, as docs/migration.md says; a label binds nothing.
	label := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`))
	if err := asAdmin.Patch(ctx(t), op.DeepCopy(), label); err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, op.Name); got != "" {
		t.Fatalf("a label bound the sync to %q", got)
	}
	pass := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+infrahubv1alpha1.RequestedAtAnnotation+`":"2026-01-01T00:00:00Z"}}}`))
	if err := asAdmin.Patch(ctx(t), op.DeepCopy(), pass); err != nil {
		t.Fatal(err)
	}
	if got, want := admitted(t, op.Name), "default/creds-"+nsA; got != want {
		t.Fatalf("after the admin asked for a pass the sync is bound to %q, want %q", got, want)
	}
}
