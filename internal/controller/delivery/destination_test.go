package delivery

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/apply"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/scheme"
)

// deployerIn creates ServiceAccount "deployer" in ns with the rights on ConfigMaps there, and
// returns its RoleBinding (a test takes the rights away by deleting it).
func deployerIn(t *testing.T, ns string) *rbacv1.RoleBinding {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "deployer"}}}
	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "create", "patch", "update", "delete"}}}},
		rb,
	} {
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return rb.DeepCopy()
}

// asUser is a client of the test cluster that impersonates user.
func asUser(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// perDestinationDeployer: every destination namespace acts as its own "deployer", so moving a
// VidraResource to another namespace changes the identity it acts as.
func perDestinationDeployer() Options {
	o := fastOptions()
	o.AllowOperatorIdentity = false
	o.DefaultServiceAccount = "deployer"
	o.Policy.AllowedNamespaces = []string{"*"} // RBAC is the fence here
	return o
}

// Issue 42 finding 6: moving a VidraResource to another namespace, where another
// ServiceAccount acts for it, prunes what it applied in the old one as the identity that applied
// it; the new identity may not even read there, and that must not count as "gone".
func TestDestinationNamespaceChangePrunesAsTheOldIdentity(t *testing.T) {
	startManager(t, perDestinationDeployer())
	ta, tb := namespace(t), namespace(t)
	deployerIn(t, ta)
	deployerIn(t, tb)
	newResource(t, "d-ns-move", ta, configMapYAML("moving", "", "1"))
	waitResource(t, "d-ns-move", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	patchObject(t, env.Client, getResource(t, "d-ns-move"), func(vr *infrahubv1alpha1.VidraResource) { vr.Spec.Destination.Namespace = tb })
	eventually(t, 20*time.Second, func() error {
		if err := exists(t, env.Client, &corev1.ConfigMap{}, tb, "moving"); err != nil {
			return fmt.Errorf("not applied in the new namespace: %w", err)
		}
		if exists(t, env.Client, &corev1.ConfigMap{}, ta, "moving") == nil {
			return fmt.Errorf("left behind in the old namespace %s", ta)
		}
		return nil
	})
	waitResource(t, "d-ns-move", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)
	inv := inventoryFor(t, "d-ns-move")
	if want := []string{"/v1/ConfigMap/" + tb + "/moving"}; !slices.Equal(inv.Objects, want) || inv.As != target.ServiceAccountUser(tb, "deployer") {
		t.Fatalf("inventory after the move: %+v; want %v as %s", inv, want, target.ServiceAccountUser(tb, "deployer"))
	}
}

// The same move when the old identity has lost its rights: nothing can prune the old objects,
// and that is said loudly (PruneFailed, a Warning event), the old inventory is kept, and the
// prune goes through once the rights are back.
func TestDestinationChangeWithoutTheOldRightsFailsLoudly(t *testing.T) {
	startManager(t, perDestinationDeployer())
	ta, tb := namespace(t), namespace(t)
	rb := deployerIn(t, ta)
	deployerIn(t, tb)
	newResource(t, "d-ns-lost", ta, configMapYAML("stranded", "", "1"))
	waitResource(t, "d-ns-lost", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 30*time.Second)

	if err := env.Client.Delete(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
	old := asUser(t, target.ServiceAccountUser(ta, "deployer"))
	eventually(t, 10*time.Second, func() error { // the authorizer has seen the RoleBinding go
		if err := old.Get(context.Background(), client.ObjectKey{Namespace: ta, Name: "stranded"}, &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
			return fmt.Errorf("the old identity still reads %s: %v", ta, err)
		}
		return nil
	})
	patchObject(t, env.Client, getResource(t, "d-ns-lost"), func(vr *infrahubv1alpha1.VidraResource) { vr.Spec.Destination.Namespace = tb })
	waitResource(t, "d-ns-lost", infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonPruneFailed, 20*time.Second)
	waitVREvent(t, "d-ns-lost", infrahubv1alpha1.ReasonPruneFailed, "stranded")
	if err := exists(t, env.Client, &corev1.ConfigMap{}, ta, "stranded"); err != nil {
		t.Fatal(err)
	}
	inv := inventoryFor(t, "d-ns-lost")
	if !slices.Contains(inv.Objects, "/v1/ConfigMap/"+ta+"/stranded") || inv.As != target.ServiceAccountUser(ta, "deployer") {
		t.Fatalf("the old inventory was not kept: %+v", inv)
	}

	rb.ResourceVersion = ""
	if err := env.Client.Create(context.Background(), rb); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if exists(t, env.Client, &corev1.ConfigMap{}, ta, "stranded") == nil {
			return fmt.Errorf("still in the old namespace once the rights are back")
		}
		return exists(t, env.Client, &corev1.ConfigMap{}, tb, "stranded")
	})
	waitResource(t, "d-ns-lost", infrahubv1alpha1.StateSucceeded, infrahubv1alpha1.ReasonDeployed, 15*time.Second)
}

// inventoryFor reads a VidraResource's inventory where the controller keeps it (the tests'
// managers run outside a cluster: the default namespace).
func inventoryFor(t *testing.T, name string) apply.Inventory {
	t.Helper()
	s := &apply.InventoryStore{Client: env.Client, Reader: env.Client, Namespace: metav1.NamespaceDefault}
	st, err := s.Load(context.Background(), getResource(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return st.Inventory
}
