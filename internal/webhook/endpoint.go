package webhook

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-metal-ironcore-dev-v1alpha1-endpoint,mutating=false,failurePolicy=fail,sideEffects=None,groups=metal.ironcore.dev,resources=endpoints,verbs=create;update,versions=v1alpha1,name=vendpoint.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// The MAC check lists Endpoints from the API server itself (not the cache), so that an Endpoint
// created a moment ago is seen.
// +kubebuilder:rbac:groups=metal.ironcore.dev,resources=endpoints,verbs=list

// EndpointValidator refuses an Endpoint whose MAC address another Endpoint already has: the BMC
// registered from an Endpoint is found by its MAC, so two Endpoints with one MAC would make two
// BMC objects for one BMC. MACs are compared case- and separator-insensitively.
//
// Two Endpoints created concurrently with the same MAC may both pass (each list precedes the
// other's write); the check catches every sequential duplicate, which is what users make.
type EndpointValidator struct {
	// Reader lists Endpoints; the manager's API reader (uncached).
	Reader client.Reader
}

var _ admission.Validator[*metalv1alpha1.Endpoint] = &EndpointValidator{}

// ValidateCreate checks the MAC of a new Endpoint.
func (v *EndpointValidator) ValidateCreate(ctx context.Context, ep *metalv1alpha1.Endpoint) (admission.Warnings, error) {
	return nil, v.validate(ctx, ep)
}

// ValidateUpdate checks the MAC only when it changes, so that an Endpoint admitted before the
// webhook existed can still be updated (finalizers removed, labels changed) and deleted.
func (v *EndpointValidator) ValidateUpdate(ctx context.Context, old, ep *metalv1alpha1.Endpoint) (admission.Warnings, error) {
	if ep.DeletionTimestamp != nil || NormalizeMAC(old.Spec.MACAddress) == NormalizeMAC(ep.Spec.MACAddress) {
		return nil, nil
	}
	return nil, v.validate(ctx, ep)
}

// ValidateDelete allows every deletion.
func (v *EndpointValidator) ValidateDelete(context.Context, *metalv1alpha1.Endpoint) (admission.Warnings, error) {
	return nil, nil
}

func (v *EndpointValidator) validate(ctx context.Context, ep *metalv1alpha1.Endpoint) error {
	if NormalizeMAC(ep.Spec.MACAddress) == "" {
		return nil
	}
	list := &metalv1alpha1.EndpointList{}
	if err := v.Reader.List(ctx, list); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("listing Endpoints to check the MAC address: %w", err))
	}
	if errs := ValidateUniqueMAC(ep, list.Items); len(errs) > 0 {
		return apierrors.NewInvalid(metalv1alpha1.GroupVersion.WithKind("Endpoint").GroupKind(), ep.Name, errs)
	}
	return nil
}

// ValidateUniqueMAC reports ep's MAC address as a duplicate when another of others (by name)
// has the same one after normalisation.
func ValidateUniqueMAC(ep *metalv1alpha1.Endpoint, others []metalv1alpha1.Endpoint) field.ErrorList {
	mac := NormalizeMAC(ep.Spec.MACAddress)
	if mac == "" {
		return nil
	}
	for i := range others {
		o := &others[i]
		if o.Name == ep.Name || NormalizeMAC(o.Spec.MACAddress) != mac {
			continue
		}
		e := field.Duplicate(field.NewPath("spec", "macAddress"), ep.Spec.MACAddress)
		e.Detail = fmt.Sprintf("MAC address %s is already used by Endpoint %q", mac, o.Name)
		return field.ErrorList{e}
	}
	return nil
}

// NormalizeMAC returns a MAC address as lower-case colon-separated hex (aa:bb:cc:dd:ee:ff),
// whatever its case and separators (':', '-', '.' or none); other strings are returned trimmed
// and lower-cased, and an empty one stays empty.
func NormalizeMAC(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	hex := strings.NewReplacer(":", "", "-", "", ".", "").Replace(s)
	if len(hex) != 12 || strings.Trim(hex, "0123456789abcdef") != "" {
		return s
	}
	var b strings.Builder
	for i := 0; i < 12; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(hex[i : i+2])
	}
	return b.String()
}
