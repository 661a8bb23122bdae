package webhook

import (
	"context"
	"slices"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/webhook/rights"
)

// +kubebuilder:webhook:path=/validate-infrahub-operators-com-v1alpha1-vidraresource,mutating=false,failurePolicy=fail,sideEffects=None,groups=infrahub.operators.com,resources=vidraresources,verbs=create;update;delete,versions=v1alpha1,name=vvidraresource.infrahub.operators.com,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// VidraResourceValidator refuses a VidraResource whose writer could not do themselves what it
// would make the operator do (rights.Admission): act as its ServiceAccount, in its
// namespace, on its cluster; one of a sync whose destination is not the sync's; and
// healthExpressions that do not compile.
type VidraResourceValidator struct {
	Access *rights.Admission
}

var _ admission.Validator[*infrahubv1alpha1.VidraResource] = VidraResourceValidator{}

// ValidateCreate checks a new VidraResource.
func (v VidraResourceValidator) ValidateCreate(ctx context.Context, vr *infrahubv1alpha1.VidraResource) (admission.Warnings, error) {
	if err := resourceError(vr, HealthExpressionErrors(vr.Spec.HealthExpressions)); err != nil {
		return nil, err
	}
	return nil, v.check(ctx, nil, vr)
}

// ValidateUpdate checks the writer's rights for the resulting VidraResource whenever the update
// changes what it makes the operator do (spec, owner references, infrahub.operators.com
// annotations); labels and finalizers are written freely, and the spec of one being deleted not
// at all (rights.Admission.CheckResource).
func (v VidraResourceValidator) ValidateUpdate(ctx context.Context, old, vr *infrahubv1alpha1.VidraResource) (admission.Warnings, error) {
	if !slices.Equal(old.Spec.HealthExpressions, vr.Spec.HealthExpressions) {
		if err := resourceError(vr, HealthExpressionErrors(vr.Spec.HealthExpressions)); err != nil {
			return nil, err
		}
	}
	return nil, v.check(ctx, old, vr)
}

func resourceError(vr *infrahubv1alpha1.VidraResource, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(infrahubv1alpha1.GroupVersion.WithKind("VidraResource").GroupKind(), vr.Name, errs)
}

// ValidateDelete requires the writer to be allowed what the deletion makes the operator do:
// remove the applied objects as the VidraResource's ServiceAccount.
func (v VidraResourceValidator) ValidateDelete(ctx context.Context, vr *infrahubv1alpha1.VidraResource) (admission.Warnings, error) {
	return nil, v.checkWith(ctx, vr, func(user authenticationv1.UserInfo) error { return v.Access.CheckResourceDelete(ctx, user, vr) })
}

func (v VidraResourceValidator) check(ctx context.Context, old, vr *infrahubv1alpha1.VidraResource) error {
	return v.checkWith(ctx, vr, func(user authenticationv1.UserInfo) error { return v.Access.CheckResource(ctx, user, old, vr) })
}

func (v VidraResourceValidator) checkWith(ctx context.Context, vr *infrahubv1alpha1.VidraResource, check func(authenticationv1.UserInfo) error) error {
	if v.Access == nil {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if err := check(req.UserInfo); err != nil {
		return apierrors.NewForbidden(infrahubv1alpha1.GroupVersion.WithResource("vidraresources").GroupResource(), vr.Name, err)
	}
	return nil
}
