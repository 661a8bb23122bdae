package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/depends"
	"github.com/metalhub/metalhub/internal/controller/delivery/healthexpr"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/webhook/rights"
)

// +kubebuilder:webhook:path=/validate-infrahub-operators-com-v1alpha1-infrahubsync,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrahub.operators.com,resources=infrahubsyncs,verbs=create;update;delete,versions=v1alpha1,name=vinfrahubsync.infrahub.operators.com,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// InfrahubSyncValidator refuses a spec.source.targetDate that Infrahub would misread or refuse
// (now+2h, now-2d, a date without a time, ...), with the same explanation the sync controller
// would put in the status — it is the controller's own parser — and, with Access, a sync whose
// writer could not do themselves what it would make the operator do (rights.Admission). The
// URLs, the namespace and the artefact name are checked by the CRD schema (CEL and patterns).
type InfrahubSyncValidator struct {
	// Access decides with the writer's rights; nil checks the target date only.
	Access *rights.Admission
	// Reader reads the other syncs to refuse a spec.dependsOn that leads back to the sync (a
	// cycle); nil checks no cycle (the controller reports one all the same).
	Reader client.Reader
}

var _ admission.Validator[*infrahubv1alpha1.InfrahubSync] = InfrahubSyncValidator{}

// ValidateCreate checks a new sync.
func (v InfrahubSyncValidator) ValidateCreate(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	if err := syncError(s, append(ValidateInfrahubSyncSpec(&s.Spec), HealthExpressionErrors(s.Spec.HealthExpressions)...)); err != nil {
		return nil, err
	}
	if err := v.cycle(ctx, s); err != nil {
		return nil, err
	}
	return nil, v.access(ctx, nil, s, false)
}

// cycle refuses a spec.dependsOn that leads back to s, naming the cycle.
func (v InfrahubSyncValidator) cycle(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) error {
	if v.Reader == nil || len(s.Spec.DependsOn) == 0 {
		return nil
	}
	g, err := depends.Load(ctx, v.Reader)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if c := g.Cycle(s.Name, s.Spec.DependsOn); c != nil {
		return syncError(s, field.ErrorList{field.Invalid(field.NewPath("spec", "dependsOn"), dependencyNames(s.Spec.DependsOn),
			"leads back to this sync: "+depends.Describe(c))})
	}
	return nil
}

func dependencyNames(deps []infrahubv1alpha1.Dependency) []string {
	out := make([]string, len(deps))
	for i, d := range deps {
		out[i] = d.Name
	}
	return out
}

// ValidateUpdate checks the target date only when it changes (a sync admitted before the
// webhook existed keeps its bad date, which the controller reports), and the writer's rights
// whenever the update changes what the sync makes the operator do (rights.Admission.CheckSync).
func (v InfrahubSyncValidator) ValidateUpdate(ctx context.Context, old, s *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	if old.Spec.Source.TargetDate != s.Spec.Source.TargetDate {
		if err := syncError(s, ValidateInfrahubSyncSpec(&s.Spec)); err != nil {
			return nil, err
		}
	}
	// Only when they change, as the date: a sync admitted before keeps working.
	if !slices.Equal(old.Spec.HealthExpressions, s.Spec.HealthExpressions) {
		if err := syncError(s, HealthExpressionErrors(s.Spec.HealthExpressions)); err != nil {
			return nil, err
		}
	}
	if !slices.Equal(old.Spec.DependsOn, s.Spec.DependsOn) {
		if err := v.cycle(ctx, s); err != nil {
			return nil, err
		}
	}
	return nil, v.access(ctx, old, s, false)
}

func (v InfrahubSyncValidator) access(ctx context.Context, old, s *infrahubv1alpha1.InfrahubSync, deleting bool) error {
	if v.Access == nil {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	check := func() error { return v.Access.CheckSync(ctx, req.UserInfo, old, s) }
	if deleting {
		check = func() error { return v.Access.CheckSyncDelete(ctx, req.UserInfo, s) }
	}
	if err := check(); err != nil {
		return apierrors.NewForbidden(infrahubv1alpha1.GroupVersion.WithResource("infrahubsyncs").GroupResource(), s.Name, err)
	}
	return nil
}

// ValidateDelete requires the writer to be allowed what the deletion makes the operator do:
// remove the sync's objects as its ServiceAccount (rights.Admission.CheckSyncDelete).
func (v InfrahubSyncValidator) ValidateDelete(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	return nil, v.access(ctx, nil, s, true)
}

func syncError(s *infrahubv1alpha1.InfrahubSync, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(infrahubv1alpha1.GroupVersion.WithKind("InfrahubSync").GroupKind(), s.Name, errs)
}

// ValidateInfrahubSyncSpec reports what the schema cannot: a target date Infrahub reads
// differently from what it says.
func ValidateInfrahubSyncSpec(spec *infrahubv1alpha1.InfrahubSyncSpec) field.ErrorList {
	var errs field.ErrorList
	if err := infrahub.ValidateTargetDate(spec.Source.TargetDate); err != nil {
		detail := err.Error()
		var ie *infrahub.Error
		if errors.As(err, &ie) && ie.Err != nil {
			detail = ie.Err.Error()
		}
		errs = append(errs, field.Invalid(field.NewPath("spec", "source", "targetDate"), spec.Source.TargetDate, detail))
	}
	return errs
}

// HealthExpressionErrors refuses spec.healthExpressions entries whose CEL does not compile,
// naming the entry, its kind and what CEL found: the controller would otherwise report the
// objects of that kind Failed until the spec is corrected.
func HealthExpressionErrors(list []infrahubv1alpha1.HealthExpression) field.ErrorList {
	var errs field.ErrorList
	for _, p := range healthexpr.Validate(list) {
		h := list[p.Index]
		errs = append(errs, field.Invalid(field.NewPath("spec", "healthExpressions").Index(p.Index).Child(p.Field), p.Expr,
			fmt.Sprintf("the expression for %s %s does not compile: %v", h.APIVersion, h.Kind, p.Err)))
	}
	return errs
}
