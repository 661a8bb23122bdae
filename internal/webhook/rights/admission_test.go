package rights

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// Which updates admission judges again with the writer's rights (issue 42, finding 2).
func TestInstructs(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "infrahub.operators.com/v1alpha1", Kind: "InfrahubSync", Name: "s", UID: "u1", Controller: ptr.To(true)}
	other := metav1.OwnerReference{APIVersion: "infrahub.operators.com/v1alpha1", Kind: "InfrahubSync", Name: "t", UID: "u2"}
	base := metav1.ObjectMeta{Labels: map[string]string{"team": "a"}, OwnerReferences: []metav1.OwnerReference{owner},
		Annotations: map[string]string{infrahubv1alpha1.RequestedAtAnnotation: "1", "example.com/note": "x"}}
	for _, tc := range []struct {
		name        string
		edit        func(*metav1.ObjectMeta)
		specChanged bool
		want        bool
	}{
		{"nothing", func(*metav1.ObjectMeta) {}, false, false},
		{"spec", func(*metav1.ObjectMeta) {}, true, true},
		{"label", func(m *metav1.ObjectMeta) { m.Labels["team"] = "b" }, false, false},
		{"finalizer", func(m *metav1.ObjectMeta) { m.Finalizers = []string{"x"} }, false, false},
		{"foreign annotation", func(m *metav1.ObjectMeta) { m.Annotations["example.com/note"] = "y" }, false, false},
		{"our annotation changed", func(m *metav1.ObjectMeta) { m.Annotations[infrahubv1alpha1.RequestedAtAnnotation] = "2" }, false, true},
		{"our annotation removed", func(m *metav1.ObjectMeta) { delete(m.Annotations, infrahubv1alpha1.RequestedAtAnnotation) }, false, true},
		{"subdomain annotation added", func(m *metav1.ObjectMeta) { m.Annotations[infrahubv1alpha1.AdoptOrphansAnnotation] = "x" }, false, true},
		{"look-alike domain", func(m *metav1.ObjectMeta) { m.Annotations["notinfrahub.operators.com/x"] = "x" }, false, false},
		{"owner added", func(m *metav1.ObjectMeta) { m.OwnerReferences = append(m.OwnerReferences, other) }, false, true},
		{"owner replaced", func(m *metav1.ObjectMeta) { m.OwnerReferences = []metav1.OwnerReference{other} }, false, true},
		{"controller flag moved", func(m *metav1.ObjectMeta) { m.OwnerReferences[0].Controller = nil }, false, true},
		{"owner removed (orphaned)", func(m *metav1.ObjectMeta) { m.OwnerReferences = nil }, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upd := base.DeepCopy()
			tc.edit(upd)
			if got := instructs(&base, upd, tc.specChanged); got != tc.want {
				t.Errorf("instructs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFrozen(t *testing.T) {
	now := metav1.Now()
	a, b := infrahubv1alpha1.VidraResourceSpec{Manifest: "a"}, infrahubv1alpha1.VidraResourceSpec{Manifest: "b"}
	if frozen(nil, a, b) != nil || frozen(&now, a, a) != nil {
		t.Error("refused a spec change outside deletion, or an unchanged spec during it")
	}
	if frozen(&now, a, b) == nil {
		t.Error("admitted a spec change during deletion")
	}
}

func TestHandoverSet(t *testing.T) {
	with := func(v ...string) *infrahubv1alpha1.VidraResource {
		vr := &infrahubv1alpha1.VidraResource{}
		if len(v) > 0 {
			vr.Annotations = map[string]string{infrahubv1alpha1.HandoverAnnotation: v[0]}
		}
		return vr
	}
	for _, tc := range []struct {
		name     string
		old, upd *infrahubv1alpha1.VidraResource
		want     bool
	}{
		{"created with it", nil, with("a:1"), true},
		{"created with it empty", nil, with(""), true},
		{"created without", nil, with(), false},
		{"added", with(), with("a:1"), true},
		{"changed", with("a:1"), with("b:2"), true},
		{"kept", with("a:1"), with("a:1"), false},
		{"removed", with("a:1"), with(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := handoverSet(tc.old, tc.upd); got != tc.want {
				t.Errorf("handoverSet = %v, want %v", got, tc.want)
			}
		})
	}
}
