package delivery

import (
	"context"
	"flag"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
	"github.com/metalhub/metalhub/internal/scheme"
)

// binaryDefaults are the delivery options of the operator started with no flag.
func binaryDefaults(t *testing.T) Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("metalhub", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return o
}

// tenantClient is a user with create, update, patch and delete on both delivery kinds (cluster
// wide: they are cluster-scoped) and every right on ConfigMaps, ServiceAccounts and their
// impersonation in ns alone.
func tenantClient(t *testing.T, user, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	for _, obj := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "delivery-" + user}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{infrahubv1alpha1.GroupVersion.Group}, Resources: []string{"infrahubsyncs", "vidraresources"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "delivery-" + user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "delivery-" + user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own-" + user}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps", "serviceaccounts"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own-" + user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "own-" + user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 42 acceptance, the binary's defaults half: started with no flag (no webhooks, no default
// identity, no operator identity), the operator makes nobody's writes read or write anything the
// writer could not. A tenant with the delivery kinds and one namespace tries every way in: a
// sync squatting the name a credentials Secret lists (the admin's sync not made yet), syncs and
// VidraResources naming ServiceAccounts of other namespaces and of kube-system, none, a forged
// controller reference, and patches and deletes of another's objects. Nothing reaches Infrahub
// and no object is written anywhere; each says why.
func TestTenantWithTheBinaryDefaults(t *testing.T) {
	o := binaryDefaults(t)
	if o.AdmissionWebhook || o.AllowOperatorIdentity || o.DefaultServiceAccount != "" || o.TrustAdmittedCredentials {
		t.Fatalf("the binary's defaults changed: %+v", o)
	}
	o.Settings.RequeueSyncAfter, o.Settings.RequeueResourcesAfter = 10*time.Minute, 10*time.Minute
	startManager(t, o)
	ctx := context.Background()
	own, other := namespace(t), namespace(t)
	serviceAccountWithConfigMaps(t, own, "deployer")
	serviceAccountWithConfigMaps(t, other, "deployer")
	tenant := tenantClient(t, "tenant-"+own, own)

	// The admin registered credentials for a sync "payroll-<ns>" they have not created yet.
	squat := "payroll-" + own
	e, url := startInfrahub(t, nil, squat)
	if _, err := e.AddArtifact("main", "web", "application/yaml", []byte(configMapYAML("planted-by-sync", "", "1"))); err != nil {
		t.Fatal(err)
	}

	create := func(obj client.Object) {
		t.Helper()
		if err := tenant.Create(ctx, obj); err != nil {
			t.Fatalf("tenant creating %T %s: %v", obj, obj.GetName(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	syncOf := func(name, ns, sa, saNS string) *infrahubv1alpha1.InfrahubSync {
		return &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
			Source:      infrahubv1alpha1.Source{InfrahubAPIURL: url, TargetBranch: "main", ArtefactName: "web"},
			Destination: infrahubv1alpha1.Destination{Namespace: ns, ServiceAccountName: sa, ServiceAccountNamespace: saNS}}}
	}
	resourceOf := func(name, ns, sa, saNS, cm string) *infrahubv1alpha1.VidraResource {
		return &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: infrahubv1alpha1.VidraResourceSpec{
			Destination: infrahubv1alpha1.Destination{Namespace: ns, ServiceAccountName: sa, ServiceAccountNamespace: saNS},
			Manifest:    configMapYAML(cm, "", "1")}}
	}

	create(syncOf(squat, own, "", ""))
	create(syncOf("sa-elsewhere-"+own, other, "deployer", ""))
	create(syncOf("sa-system-"+own, own, "namespace-controller", "kube-system"))
	create(syncOf("sa-own-"+own, own, "deployer", ""))
	create(resourceOf("vr-none-"+own, own, "", "", "planted-none"))
	create(resourceOf("vr-elsewhere-"+own, other, "deployer", "", "planted-elsewhere"))
	create(resourceOf("vr-system-"+own, "kube-system", "namespace-controller", "kube-system", "planted-system"))
	create(resourceOf("vr-own-"+own, own, "deployer", "", "planted-own"))
	admins := resourceOf("vr-admins-"+own, other, "", "", "admins")
	if err := env.Client.Create(ctx, admins); err != nil {
		t.Fatal(err)
	}
	adminSync := syncOf("admins-sync-"+own, other, "", "")
	if err := env.Client.Create(ctx, adminSync); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), adminSync) })
	forged := resourceOf("vr-forged-"+own, other, "", "", "planted-forged")
	forged.OwnerReferences = []metav1.OwnerReference{{APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "InfrahubSync",
		Name: adminSync.Name, UID: adminSync.UID, Controller: ptr.To(true)}}
	create(forged)

	for name, reason := range map[string]string{
		squat:                 infrahubv1alpha1.ReasonNoServiceAccount,
		"sa-elsewhere-" + own: infrahubv1alpha1.ReasonAdmissionRequired,
		"sa-system-" + own:    infrahubv1alpha1.ReasonAdmissionRequired,
		"sa-own-" + own:       infrahubv1alpha1.ReasonAdmissionRequired,
		adminSync.Name:        infrahubv1alpha1.ReasonNoServiceAccount,
	} {
		waitSync(t, name, infrahubv1alpha1.StateFailed, reason, 30*time.Second)
	}
	for name, reason := range map[string]string{
		"vr-none-" + own:      infrahubv1alpha1.ReasonNoServiceAccount,
		"vr-elsewhere-" + own: infrahubv1alpha1.ReasonAdmissionRequired,
		"vr-system-" + own:    infrahubv1alpha1.ReasonAdmissionRequired,
		"vr-own-" + own:       infrahubv1alpha1.ReasonAdmissionRequired,
		"vr-forged-" + own:    infrahubv1alpha1.ReasonNoServiceAccount,
		admins.Name:           infrahubv1alpha1.ReasonNoServiceAccount,
	} {
		waitResource(t, name, infrahubv1alpha1.StateFailed, reason, 30*time.Second)
	}
	// Another's object, patched and deleted: the cleanup has nothing to remove.
	if err := tenant.Patch(ctx, admins.DeepCopy(), client.RawPatch("application/merge-patch+json",
		[]byte(`{"spec":{"destination":{"serviceAccountName":"deployer"}}}`))); err != nil {
		t.Fatalf("the tenant's patch (her ClusterRole allows it): %v", err)
	}
	waitResource(t, admins.Name, infrahubv1alpha1.StateFailed, infrahubv1alpha1.ReasonAdmissionRequired, 30*time.Second)
	if err := tenant.Delete(ctx, admins.DeepCopy()); err != nil {
		t.Fatal(err)
	}

	if c := e.Counters(); c.Total != 0 {
		t.Errorf("%d requests reached Infrahub (%+v): a sync the tenant wrote read with credentials she may not get", c.Total, c)
	}
	var cms corev1.ConfigMapList
	if err := env.Client.List(ctx, &cms); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if len(cm.Name) >= 7 && cm.Name[:7] == "planted" || cm.Name == "admins" {
			t.Errorf("ConfigMap %s/%s was written", cm.Namespace, cm.Name)
		}
	}
	var vrs infrahubv1alpha1.VidraResourceList
	if err := env.Client.List(ctx, &vrs); err != nil {
		t.Fatal(err)
	}
	for _, vr := range vrs.Items {
		if vr.Labels[manifests.SyncLabel] == squat {
			t.Errorf("the squatting sync wrote VidraResource %s", vr.Name)
		}
	}
}
