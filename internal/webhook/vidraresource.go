package webhook

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery"
)

// +kubebuilder:webhook:path=/validate-infrahub-operators-com-v1alpha1-vidraresource,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrahub.operators.com,resources=vidraresources,verbs=create;update,versions=v1alpha1,name=vvidraresource.infrahub.operators.com,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// VidraResourceValidator refuses a VidraResource whose writer could not do themselves what it
// would make the operator do (delivery.Admission): act as its ServiceAccount, in its
// namespace, on its cluster; and one of a sync whose destination is not the sync's.
type VidraResourceValidator struct {
	Access *delivery.Admission
}

var _ admission.Validator[*infrahubv1alpha1.VidraResource] = VidraResourceValidator{}

// ValidateCreate checks a new VidraResource.
func (v VidraResourceValidator) ValidateCreate(ctx context.Context, vr *infrahubv1alpha1.VidraResource) (admission.Warnings, error) {
	return nil, v.check(ctx, nil, vr)
}

// ValidateUpdate checks again only when the destination changes (finalizers, labels and the
// status of an admitted VidraResource are written freely).
func (v VidraResourceValidator) ValidateUpdate(ctx context.Context, old, vr *infrahubv1alpha1.VidraResource) (admission.Warnings, error) {
	if vr.DeletionTimestamp != nil {
		return nil, nil
	}
	return nil, v.check(ctx, old, vr)
}

// ValidateDelete allows every deletion.
func (VidraResourceValidator) ValidateDelete(context.Context, *infrahubv1alpha1.VidraResource) (admission.Warnings, error) {
	return nil, nil
}

func (v VidraResourceValidator) check(ctx context.Context, old, vr *infrahubv1alpha1.VidraResource) error {
	if v.Access == nil {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if err := v.Access.CheckResource(ctx, req.UserInfo, old, vr); err != nil {
		return apierrors.NewForbidden(infrahubv1alpha1.GroupVersion.WithResource("vidraresources").GroupResource(), vr.Name, err)
	}
	return nil
}
