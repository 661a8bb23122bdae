package webhook

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-system-metal-ironcore-dev-v1alpha1-biossettings,mutating=false,failurePolicy=fail,sideEffects=None,groups=system.metal.ironcore.dev,resources=biossettings,verbs=create;update,versions=v1alpha1,name=vbiossettings.system.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-system-metal-ironcore-dev-v1alpha1-biossettingsset,mutating=false,failurePolicy=fail,sideEffects=None,groups=system.metal.ironcore.dev,resources=biossettingssets,verbs=create;update,versions=v1alpha1,name=vbiossettingsset.system.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-system-metal-ironcore-dev-v1alpha1-biosversion,mutating=false,failurePolicy=fail,sideEffects=None,groups=system.metal.ironcore.dev,resources=biosversions,verbs=create;update,versions=v1alpha1,name=vbiosversion.system.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-system-metal-ironcore-dev-v1alpha1-biosversionset,mutating=false,failurePolicy=fail,sideEffects=None,groups=system.metal.ironcore.dev,resources=biosversionsets,verbs=create;update,versions=v1alpha1,name=vbiosversionset.system.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-baseboard-metal-ironcore-dev-v1alpha1-bmcsettings,mutating=false,failurePolicy=fail,sideEffects=None,groups=baseboard.metal.ironcore.dev,resources=bmcsettings,verbs=create;update,versions=v1alpha1,name=vbmcsettings.baseboard.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-baseboard-metal-ironcore-dev-v1alpha1-bmcsettingsset,mutating=false,failurePolicy=fail,sideEffects=None,groups=baseboard.metal.ironcore.dev,resources=bmcsettingssets,verbs=create;update,versions=v1alpha1,name=vbmcsettingsset.baseboard.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-baseboard-metal-ironcore-dev-v1alpha1-bmcversion,mutating=false,failurePolicy=fail,sideEffects=None,groups=baseboard.metal.ironcore.dev,resources=bmcversions,verbs=create;update,versions=v1alpha1,name=vbmcversion.baseboard.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10
// +kubebuilder:webhook:path=/validate-baseboard-metal-ironcore-dev-v1alpha1-bmcversionset,mutating=false,failurePolicy=fail,sideEffects=None,groups=baseboard.metal.ironcore.dev,resources=bmcversionsets,verbs=create;update,versions=v1alpha1,name=vbmcversionset.baseboard.metal.ironcore.dev,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// SecretRef is a Secret a firmware object makes the operator read, and what for.
type SecretRef struct {
	Namespace, Name string
	// Why says what the object does with it (for the refusal).
	Why string
}

// FirmwareSecretsValidator refuses a firmware or settings object (or a set of them) that names
// a Secret its writer may not get: the kinds are cluster-scoped, and the operator reads any
// Secret they name with its own rights — a settings value it sends to a BMC, an image's basic
// auth it sends to a URL of the writer's choosing. The writer must be able to read the Secret
// themselves (a SubjectAccessReview with the request's user). The controllers, webhook or not,
// read firmware Secrets only from one namespace (--firmware-secret-namespace).
type FirmwareSecretsValidator[T client.Object] struct {
	// Client runs the SubjectAccessReviews.
	Client client.Client
	// Resource names the kind in refusals.
	Resource schema.GroupResource
	// Refs are the Secrets an object names; Spec is what decides them (an update that leaves
	// it as it was is not checked again: the operator's bookkeeping writes pass).
	Refs func(T) []SecretRef
	Spec func(T) any
}

// ValidateCreate checks a new object.
func (v FirmwareSecretsValidator[T]) ValidateCreate(ctx context.Context, o T) (admission.Warnings, error) {
	return nil, v.check(ctx, o)
}

// ValidateUpdate checks again when the spec changes: which values go where is the spec's.
func (v FirmwareSecretsValidator[T]) ValidateUpdate(ctx context.Context, old, o T) (admission.Warnings, error) {
	if o.GetDeletionTimestamp() != nil || reflect.DeepEqual(v.Spec(old), v.Spec(o)) {
		return nil, nil
	}
	return nil, v.check(ctx, o)
}

// ValidateDelete allows every deletion.
func (v FirmwareSecretsValidator[T]) ValidateDelete(context.Context, T) (admission.Warnings, error) {
	return nil, nil
}

func (v FirmwareSecretsValidator[T]) check(ctx context.Context, o T) error {
	refs := v.Refs(o)
	if len(refs) == 0 {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	user := req.UserInfo
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, e := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(e)
	}
	for _, r := range refs {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: r.Namespace, Name: r.Name},
		}}
		if err := v.Client.Create(ctx, sar); err != nil {
			return apierrors.NewInternalError(fmt.Errorf("asking whether %s may get Secret %s/%s: %w", user.Username, r.Namespace, r.Name, err))
		}
		if !sar.Status.Allowed {
			return apierrors.NewForbidden(v.Resource, o.GetName(),
				fmt.Errorf("user %q may not get secrets %q in namespace %s: %s", user.Username, r.Name, r.Namespace, r.Why))
		}
	}
	return nil
}

// variableRefs are the Secrets settings variables read.
func variableRefs(vars []systemv1alpha1.Variable) []SecretRef {
	var out []SecretRef
	for _, v := range vars {
		if r := v.ValueFrom.SecretKeyRef; r != nil {
			out = append(out, SecretRef{Namespace: r.Namespace, Name: r.Name,
				Why: fmt.Sprintf("variable %s would send its key %s to the BMC", v.Key, r.Key)})
		}
	}
	return out
}

// imageRefs are the Secrets whose credentials fetch the images.
func imageRefs(img systemv1alpha1.ImageSpec, path []systemv1alpha1.VersionStep) []SecretRef {
	var out []SecretRef
	for _, im := range append([]systemv1alpha1.ImageSpec{img}, stepImages(path)...) {
		if r := im.SecretRef; r != nil {
			out = append(out, SecretRef{Namespace: r.Namespace, Name: r.Name,
				Why: fmt.Sprintf("its username and password would be sent to fetch %s", im.URI)})
		}
	}
	return out
}

func stepImages(path []systemv1alpha1.VersionStep) []systemv1alpha1.ImageSpec {
	out := make([]systemv1alpha1.ImageSpec, len(path))
	for i := range path {
		out[i] = path[i].Image
	}
	return out
}

// firmwareValidator is the validator of one kind.
func firmwareValidator[T client.Object](c client.Client, gr schema.GroupResource, refs func(T) []SecretRef, spec func(T) any) FirmwareSecretsValidator[T] {
	return FirmwareSecretsValidator[T]{Client: c, Resource: gr, Refs: refs, Spec: spec}
}

func register[T client.Object](mgr ctrl.Manager, obj T, v admission.Validator[T]) error {
	if err := ctrl.NewWebhookManagedBy(mgr, obj).WithValidator(v).Complete(); err != nil {
		return fmt.Errorf("registering the %T webhook: %w", obj, err)
	}
	return nil
}

// setupFirmware registers the validators of the firmware and settings kinds and their sets.
func setupFirmware(mgr ctrl.Manager) error {
	c := mgr.GetClient()
	sys := func(r string) schema.GroupResource {
		return systemv1alpha1.GroupVersion.WithResource(r).GroupResource()
	}
	bb := func(r string) schema.GroupResource {
		return baseboardv1alpha1.GroupVersion.WithResource(r).GroupResource()
	}
	return errors.Join(
		register(mgr, &systemv1alpha1.BIOSSettings{}, firmwareValidator(c, sys("biossettings"),
			func(o *systemv1alpha1.BIOSSettings) []SecretRef { return variableRefs(o.Spec.Variables) },
			func(o *systemv1alpha1.BIOSSettings) any { return o.Spec })),
		register(mgr, &systemv1alpha1.BIOSSettingsSet{}, firmwareValidator(c, sys("biossettingssets"),
			func(o *systemv1alpha1.BIOSSettingsSet) []SecretRef {
				return variableRefs(o.Spec.BIOSSettingsTemplate.Variables)
			},
			func(o *systemv1alpha1.BIOSSettingsSet) any { return o.Spec })),
		register(mgr, &systemv1alpha1.BIOSVersion{}, firmwareValidator(c, sys("biosversions"),
			func(o *systemv1alpha1.BIOSVersion) []SecretRef { return imageRefs(o.Spec.Image, o.Spec.UpgradePath) },
			func(o *systemv1alpha1.BIOSVersion) any { return o.Spec })),
		register(mgr, &systemv1alpha1.BIOSVersionSet{}, firmwareValidator(c, sys("biosversionsets"),
			func(o *systemv1alpha1.BIOSVersionSet) []SecretRef {
				return imageRefs(o.Spec.BIOSVersionTemplate.Image, o.Spec.BIOSVersionTemplate.UpgradePath)
			},
			func(o *systemv1alpha1.BIOSVersionSet) any { return o.Spec })),
		register(mgr, &baseboardv1alpha1.BMCSettings{}, firmwareValidator(c, bb("bmcsettings"),
			func(o *baseboardv1alpha1.BMCSettings) []SecretRef { return variableRefs(o.Spec.Variables) },
			func(o *baseboardv1alpha1.BMCSettings) any { return o.Spec })),
		register(mgr, &baseboardv1alpha1.BMCSettingsSet{}, firmwareValidator(c, bb("bmcsettingssets"),
			func(o *baseboardv1alpha1.BMCSettingsSet) []SecretRef {
				return variableRefs(o.Spec.BMCSettingsTemplate.Variables)
			},
			func(o *baseboardv1alpha1.BMCSettingsSet) any { return o.Spec })),
		register(mgr, &baseboardv1alpha1.BMCVersion{}, firmwareValidator(c, bb("bmcversions"),
			func(o *baseboardv1alpha1.BMCVersion) []SecretRef { return imageRefs(o.Spec.Image, o.Spec.UpgradePath) },
			func(o *baseboardv1alpha1.BMCVersion) any { return o.Spec })),
		register(mgr, &baseboardv1alpha1.BMCVersionSet{}, firmwareValidator(c, bb("bmcversionsets"),
			func(o *baseboardv1alpha1.BMCVersionSet) []SecretRef {
				return imageRefs(o.Spec.BMCVersionTemplate.Image, o.Spec.BMCVersionTemplate.UpgradePath)
			},
			func(o *baseboardv1alpha1.BMCVersionSet) any { return o.Spec })),
	)
}
