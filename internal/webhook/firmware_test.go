package webhook_test

import (
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/testenv"
)

// Issue 41, finding 5: the firmware kinds are cluster-scoped and the operator reads the Secrets
// they name with its own rights. A writer may name only Secrets they may read themselves.
func TestFirmwareSecretsOnlyTheWriterMayRead(t *testing.T) {
	user, ns, as := tenant(t, "fw-writer")
	mustCreate(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "firmware-writer-" + user},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{systemv1alpha1.GroupVersion.Group},
			Resources: []string{"biossettings", "biosversions"}, Verbs: []string{"create", "get", "update"}}}})
	mustCreate(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "firmware-writer-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "firmware-writer-" + user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})
	attrs := authorizationv1.ResourceAttributes{Verb: "create", Group: systemv1alpha1.GroupVersion.Group, Resource: "biossettings"}
	testenv.Eventually(t, 10*time.Second, "the firmware binding in effect", func() (bool, string) {
		r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
		if err := as.Create(ctx(t), r); err != nil {
			return false, err.Error()
		}
		return r.Status.Allowed, "not allowed yet"
	})
	createAs := func(obj client.Object) error {
		err := as.Create(ctx(t), obj)
		if err == nil {
			t.Cleanup(func() { _ = env.Client.Delete(ctx(t), obj) })
		}
		return err
	}
	mustCreate(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bios-admin-" + user}, StringData: map[string]string{"pw": "x"}})
	settings := func(name, secretNS, secret string) *systemv1alpha1.BIOSSettings {
		return &systemv1alpha1.BIOSSettings{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: systemv1alpha1.BIOSSettingsSpec{ServerRef: &corev1.LocalObjectReference{Name: "any"},
				BIOSSettingsTemplate: systemv1alpha1.BIOSSettingsTemplate{Version: "1",
					SettingsFlow: []systemv1alpha1.SettingsFlowItem{{Name: "s", Priority: 1, Settings: map[string]string{"NumaNodesPerSocket": "$(v)"}}},
					Variables: []systemv1alpha1.Variable{{Key: "v", ValueFrom: systemv1alpha1.VariableSource{
						SecretKeyRef: &systemv1alpha1.KeyRef{Namespace: secretNS, Name: secret, Key: "pw"}}}}}}}
	}

	// Someone else's Secret: the "not a number" error would have told its value.
	forbidden(t, createAs(settings("theirs-"+user, "default", "bios-admin-"+user)),
		fmt.Sprintf(`user %q may not get secrets "bios-admin-%s" in namespace default: variable v would send its key pw to the BMC`, user, user))
	// Their own: admitted (edit in their namespace reads Secrets).
	own := settings("own-"+user, ns, "mine")
	if err := createAs(own); err != nil {
		t.Fatalf("settings naming the writer's own Secret refused: %v", err)
	}
	// A label passes; pointing the admitted object at another's Secret does not.
	fresh := &systemv1alpha1.BIOSSettings{}
	if err := as.Get(ctx(t), client.ObjectKeyFromObject(own), fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Labels = map[string]string{"team": "a"}
	if err := as.Update(ctx(t), fresh); err != nil {
		t.Fatalf("a label refused: %v", err)
	}
	fresh.Spec.Variables[0].ValueFrom.SecretKeyRef.Namespace, fresh.Spec.Variables[0].ValueFrom.SecretKeyRef.Name = "default", "bios-admin-"+user
	forbidden(t, as.Update(ctx(t), fresh), "may not get secrets")

	// An image's basic auth, sent to a URL of the writer's choosing.
	v := &systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: "image-" + user},
		Spec: systemv1alpha1.BIOSVersionSpec{ServerRef: &corev1.LocalObjectReference{Name: "any"},
			BIOSVersionTemplate: systemv1alpha1.BIOSVersionTemplate{Version: "2", Image: systemv1alpha1.ImageSpec{URI: "https://collector.example/x.bin",
				SecretRef: &corev1.SecretReference{Namespace: "default", Name: "bios-admin-" + user}}}}}
	forbidden(t, createAs(v), "its username and password would be sent to fetch https://collector.example/x.bin")

	// The admin may name any.
	mustCreate(t, settings("admin-"+user, "default", "bios-admin-"+user))
}
