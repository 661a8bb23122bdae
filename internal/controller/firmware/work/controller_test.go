package work

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/scheme"
)

// A Server's change wakes exactly the objects that name it, found through the index.
func TestServerRequestsAreTheObjectsNamingTheServer(t *testing.T) {
	const index = "spec.serverRef.name"
	v := func(name, server string) *systemv1alpha1.BIOSVersion {
		o := &systemv1alpha1.BIOSVersion{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if server != "" {
			o.Spec.ServerRef = &corev1.LocalObjectReference{Name: server}
		}
		return o
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).
		WithObjects(v("a", "s1"), v("b", "s2"), v("c", "s1"), v("d", "")).
		WithIndex(&systemv1alpha1.BIOSVersion{}, index, func(o client.Object) []string {
			if ref := o.(*systemv1alpha1.BIOSVersion).Spec.ServerRef; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}).Build()
	mapFn := ServerRequests(c, func() client.ObjectList { return &systemv1alpha1.BIOSVersionList{} }, index)
	var got []string
	for _, r := range mapFn(context.Background(), &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s1"}}) {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("requests for s1: %v, want [a c]", got)
	}
	if reqs := mapFn(context.Background(), &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "s3"}}); len(reqs) != 0 {
		t.Fatalf("requests for a server nobody names: %v", reqs)
	}
}
