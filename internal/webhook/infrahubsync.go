package webhook

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/infrahub"
)

// +kubebuilder:webhook:path=/validate-infrahub-operators-com-v1alpha1-infrahubsync,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrahub.operators.com,resources=infrahubsyncs,verbs=create;update,versions=v1alpha1,name=vinfrahubsync.infrahub.operators.com,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// InfrahubSyncValidator refuses a spec.source.targetDate that Infrahub would misread or refuse
// (now+2h, now-2d, a date without a time, ...), with the same explanation the sync controller
// would put in the status — it is the controller's own parser. The URLs, the namespace and the
// artefact name are checked by the CRD schema (CEL and patterns), which needs no webhook.
type InfrahubSyncValidator struct{}

var _ admission.Validator[*infrahubv1alpha1.InfrahubSync] = InfrahubSyncValidator{}

// ValidateCreate checks a new sync.
func (InfrahubSyncValidator) ValidateCreate(_ context.Context, s *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	return nil, syncError(s, ValidateInfrahubSyncSpec(&s.Spec))
}

// ValidateUpdate checks the target date only when it changes, so that a sync admitted before the
// webhook existed can still be updated and deleted (the controller reports its bad date).
func (InfrahubSyncValidator) ValidateUpdate(_ context.Context, old, s *infrahubv1alpha1.InfrahubSync) (admission.Warnings, error) {
	if s.DeletionTimestamp != nil || old.Spec.Source.TargetDate == s.Spec.Source.TargetDate {
		return nil, nil
	}
	return nil, syncError(s, ValidateInfrahubSyncSpec(&s.Spec))
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
