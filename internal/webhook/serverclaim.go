package webhook

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-metal-ironcore-dev-v1alpha1-serverclaim,mutating=false,failurePolicy=fail,sideEffects=None,groups=metal.ironcore.dev,resources=serverclaims,verbs=create;update,versions=v1alpha1,name=vserverclaim.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// ServerClaimValidator refuses a claim whose spec.serverSelector is not a valid label selector
// (unknown operator, In/NotIn without values, Exists/DoesNotExist with values, invalid label keys
// or values): the claim controller could never use it and would only report it in a condition.
// A claim may name a server (serverRef) and carry a selector at once.
type ServerClaimValidator struct{}

var _ admission.Validator[*metalv1alpha1.ServerClaim] = ServerClaimValidator{}

// ValidateCreate checks the selector of a new claim.
func (ServerClaimValidator) ValidateCreate(_ context.Context, c *metalv1alpha1.ServerClaim) (admission.Warnings, error) {
	return nil, claimError(c, ValidateServerSelector(c.Spec.ServerSelector, field.NewPath("spec", "serverSelector")))
}

// ValidateUpdate checks the selector only when it changes: a claim admitted before the webhook
// existed must still let the controller write its finalizer and binding, and be deleted.
func (ServerClaimValidator) ValidateUpdate(_ context.Context, old, c *metalv1alpha1.ServerClaim) (admission.Warnings, error) {
	if c.DeletionTimestamp != nil || equality.Semantic.DeepEqual(old.Spec.ServerSelector, c.Spec.ServerSelector) {
		return nil, nil
	}
	return nil, claimError(c, ValidateServerSelector(c.Spec.ServerSelector, field.NewPath("spec", "serverSelector")))
}

// ValidateDelete allows every deletion.
func (ServerClaimValidator) ValidateDelete(context.Context, *metalv1alpha1.ServerClaim) (admission.Warnings, error) {
	return nil, nil
}

func claimError(c *metalv1alpha1.ServerClaim, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(metalv1alpha1.GroupVersion.WithKind("ServerClaim").GroupKind(), c.Name, errs)
}

// ValidateServerSelector refuses exactly the selectors metav1.LabelSelectorAsSelector (what the
// claim controller uses) cannot convert. The messages name the offending field
// (matchExpressions[i].operator, .values, .key, matchLabels) where the API machinery's selector
// validation can tell; otherwise the conversion's own message is given for the whole selector.
func ValidateServerSelector(sel *metav1.LabelSelector, path *field.Path) field.ErrorList {
	if sel == nil {
		return nil
	}
	_, err := metav1.LabelSelectorAsSelector(sel)
	if err == nil {
		return nil
	}
	if errs := metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, path); len(errs) > 0 {
		return errs
	}
	return field.ErrorList{field.Invalid(path, sel.String(), err.Error())}
}
