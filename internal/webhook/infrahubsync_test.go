package webhook

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

func sync(targetDate string) *infrahubv1alpha1.InfrahubSync {
	return &infrahubv1alpha1.InfrahubSync{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: infrahubv1alpha1.InfrahubSyncSpec{
		Source: infrahubv1alpha1.Source{InfrahubAPIURL: "http://infrahub:8000", TargetBranch: "main", ArtefactName: "a", TargetDate: targetDate}}}
}

func TestValidateInfrahubSyncSpec(t *testing.T) {
	tests := []struct{ date, want string }{
		{date: ""},
		{date: "now"},
		{date: "2025-04-09T00:00:00Z"},
		{date: "2025-04-09T00:00:00.5+02:00"},
		{date: "now-2h"},
		{date: "now-1h30m"},
		{date: "now-2d", want: `spec.source.targetDate: Invalid value: "now-2d": Infrahub does not understand day or week units; use hours, e.g. now-48h`},
		{date: "now+2h", want: "Infrahub reads now+2h as 2h in the past"},
		{date: "2025-04-09", want: "a date without a time is read by Infrahub as 12:00 UTC"},
		{date: "yesterday", want: "expected an RFC 3339 timestamp"},
	}
	for _, tc := range tests {
		t.Run(tc.date, func(t *testing.T) {
			checkRefusal(t, ValidateInfrahubSyncSpec(&sync(tc.date).Spec), tc.want)
		})
	}
}

func TestInfrahubSyncValidatorUpdates(t *testing.T) {
	ctx := context.Background()
	v := InfrahubSyncValidator{}
	if _, err := v.ValidateCreate(ctx, sync("now-2d")); !apierrors.IsInvalid(err) {
		t.Fatalf("create with bad date: %v", err)
	}
	// Unchanged bad date (admitted before the webhook): other changes pass.
	old, upd := sync("now-2d"), sync("now-2d")
	upd.Spec.Source.ArtefactName = "b"
	if _, err := v.ValidateUpdate(ctx, old, upd); err != nil {
		t.Fatalf("unchanged date refused: %v", err)
	}
	if _, err := v.ValidateUpdate(ctx, sync("now-2h"), sync("now+2h")); !apierrors.IsInvalid(err) {
		t.Fatalf("date broken by an update: %v", err)
	}
}

// A spec.dependsOn that leads back to the sync is refused with the cycle named, on create and
// when an update changes it; one that does not, or an update that leaves it, passes.
func TestInfrahubSyncValidatorRefusesCycles(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	if err := infrahubv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	on := func(s *infrahubv1alpha1.InfrahubSync, name string, deps ...string) *infrahubv1alpha1.InfrahubSync {
		s.Name = name
		for _, d := range deps {
			s.Spec.DependsOn = append(s.Spec.DependsOn, infrahubv1alpha1.Dependency{Name: d})
		}
		return s
	}
	r := fake.NewClientBuilder().WithScheme(scheme).WithObjects(on(sync(""), "crds"), on(sync(""), "apps", "crds")).Build()
	v := InfrahubSyncValidator{Reader: r}
	if _, err := v.ValidateCreate(ctx, on(sync(""), "db", "crds")); err != nil {
		t.Fatalf("no cycle refused: %v", err)
	}
	_, err := v.ValidateUpdate(ctx, on(sync(""), "crds"), on(sync(""), "crds", "apps"))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "leads back to this sync: crds → apps → crds") {
		t.Fatalf("cycle by update: %v", err)
	}
	if _, err := v.ValidateCreate(ctx, on(sync(""), "self", "self")); !apierrors.IsInvalid(err) {
		t.Fatalf("a sync depending on itself: %v", err)
	}
	// A cycle already stored (made without the webhook) does not block unrelated updates.
	r = fake.NewClientBuilder().WithScheme(scheme).WithObjects(on(sync(""), "x", "y"), on(sync(""), "y", "x")).Build()
	v = InfrahubSyncValidator{Reader: r}
	old, upd := on(sync(""), "x", "y"), on(sync(""), "x", "y")
	upd.Spec.Source.ArtefactName = "b"
	if _, err := v.ValidateUpdate(ctx, old, upd); err != nil {
		t.Fatalf("an update leaving dependsOn alone refused: %v", err)
	}
}

// healthExpressions whose CEL does not compile are refused on both kinds, naming the entry,
// its kind and CEL's complaint; on update only when they change.
func TestHealthExpressionsMustCompile(t *testing.T) {
	ctx := context.Background()
	good := []infrahubv1alpha1.HealthExpression{{APIVersion: "example.com/v1", Kind: "Widget", Current: "status.ready == true", Failed: "has(status.error)"}}
	bad := []infrahubv1alpha1.HealthExpression{good[0], {APIVersion: "example.com/v1", Kind: "Gadget", Current: "true", InProgress: "status.phase =="}}
	const want = `spec.healthExpressions[1].inProgress: Invalid value: "status.phase ==": the expression for example.com/v1 Gadget does not compile: ERROR:`

	sv := InfrahubSyncValidator{}
	s := sync("")
	s.Spec.HealthExpressions = good
	if _, err := sv.ValidateCreate(ctx, s); err != nil {
		t.Fatalf("sync with good expressions refused: %v", err)
	}
	s.Spec.HealthExpressions = bad
	_, err := sv.ValidateCreate(ctx, s)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("sync create: %v; want Invalid with %q", err, want)
	}
	old := sync("")
	old.Spec.HealthExpressions = good
	if _, err := sv.ValidateUpdate(ctx, old, s); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("sync update: %v", err)
	}
	// Unchanged (admitted before the webhook): other changes pass.
	kept := s.DeepCopy()
	kept.Spec.Source.ArtefactName = "b"
	if _, err := sv.ValidateUpdate(ctx, s, kept); err != nil {
		t.Fatalf("unchanged expressions refused: %v", err)
	}

	vv := VidraResourceValidator{}
	vr := &infrahubv1alpha1.VidraResource{ObjectMeta: metav1.ObjectMeta{Name: "vr"}, Spec: infrahubv1alpha1.VidraResourceSpec{HealthExpressions: good}}
	if _, err := vv.ValidateCreate(ctx, vr); err != nil {
		t.Fatalf("VidraResource with good expressions refused: %v", err)
	}
	broken := vr.DeepCopy()
	broken.Spec.HealthExpressions = bad
	if _, err := vv.ValidateCreate(ctx, broken); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("VidraResource create: %v", err)
	}
	if _, err := vv.ValidateUpdate(ctx, vr, broken); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("VidraResource update: %v", err)
	}
}
