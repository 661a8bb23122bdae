package webhook

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// +kubebuilder:webhook:path=/validate-infrahub-operators-com-v1alpha1-infrahubsync,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrahub.operators.com,resources=infrahubsyncs,verbs=create;update,versions=v1alpha1,name=vinfrahubsync.infrahub.operators.com,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// InfrahubSyncValidator refuses a spec.source.targetDate that Infrahub would misread or refuse
// (now+2h, now-2d, a date without a time, ...), with the same explanation the sync controller
// would put in the status — it is the controller's own parser — and, with Access, a sync whose
// writer could not do themselves what it would make the operator do (delivery.Admission). The
// URLs, the namespace and the artefact name are checked by the CRD schema (CEL and patterns).
type InfrahubSyncValidator struct {
	// Access decides with the writer's rights; nil checks the target date only.
	Access *delivery.Admission
}

var _ admission.Validator[*infrahubv1alpha1.InfrahubSync] = InfrahubSyncValidator{}

// ValidateCreate checks a new sync.
func (v InfrahubSyncValidator) ValidateCreate(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	if err := syncError(s, ValidateInfrahubSyncSpec(&s.Spec)); err != nil {
		return nil, err
	}
	return nil, v.access(ctx, nil, s)
}

// ValidateUpdate checks the target date only when it changes, and the writer's rights only when
// the destination or the source URL changes, so that a sync admitted before the webhook existed
// can still be updated and deleted (the controller reports its bad date).
func (v InfrahubSyncValidator) ValidateUpdate(ctx context.Context, old, s *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	if s.DeletionTimestamp != nil {
		return nil, nil
	}
	if old.Spec.Source.TargetDate != s.Spec.Source.TargetDate {
		if err := syncError(s, ValidateInfrahubSyncSpec(&s.Spec)); err != nil {
			return nil, err
		}
	}
	return nil, v.access(ctx, old, s)
}

func (v InfrahubSyncValidator) access(ctx context.Context, old, s *infrahubv1alpha1.InfrahubSync) error {
	if v.Access == nil {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if err := v.Access.CheckSync(ctx, req.UserInfo, old, s); err != nil {
		return apierrors.NewForbidden(infrahubv1alpha1.GroupVersion.WithResource("infrahubsyncs").GroupResource(), s.Name, err)
	}
	return nil
}

// ValidateDelete allows every deletion.
func (InfrahubSyncValidator) ValidateDelete(context.Context, *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	return nil, nil
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
