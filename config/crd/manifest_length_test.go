package crd_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// A manifest past MaxManifestLength is refused by the schema, with the bound named; one at the
// bound is stored (the bound is generous, and well under etcd's 1.5 MiB per object).
func TestManifestLengthBounded(t *testing.T) {
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata: {v: "
	fill := func(n int) string { return doc + strings.Repeat("x", n-len(doc)-1) + "}" }
	for _, tc := range []struct {
		name   string
		length int
		want   string // "" accepted
	}{
		{"at the bound", infrahubv1alpha1.MaxManifestLength, ""},
		{"past the bound", infrahubv1alpha1.MaxManifestLength + 1, "spec.manifest: Too long: may not be more than 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vr := &infrahubv1alpha1.VidraResource{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "long-manifest-"},
				Spec:       infrahubv1alpha1.VidraResourceSpec{Manifest: fill(tc.length)},
			}
			err := env.Client.Create(ctx(t), vr)
			if err == nil {
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vr) })
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("a manifest of %d characters refused: %v", tc.length, err)
			case tc.want != "" && err == nil:
				t.Fatalf("a manifest of %d characters accepted", tc.length)
			case tc.want != "" && !apierrors.IsInvalid(err):
				t.Fatalf("want Invalid, got %v", err)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("message %.300q does not say %q", err.Error(), tc.want)
			}
		})
	}
}
