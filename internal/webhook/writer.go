package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/webhook/rights"
)

// +kubebuilder:webhook:path=/mutate-infrahub-operators-com-v1alpha1-infrahubsync,mutating=true,failurePolicy=fail,sideEffects=None,groups=infrahub.operators.com,resources=infrahubsyncs,verbs=create;update,versions=v1alpha1,name=minfrahubsync.infrahub.operators.com,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10,reinvocationPolicy=IfNeeded
// +kubebuilder:webhook:path=/mutate-infrahub-operators-com-v1alpha1-vidraresource,mutating=true,failurePolicy=fail,sideEffects=None,groups=infrahub.operators.com,resources=vidraresources,verbs=create;update,versions=v1alpha1,name=mvidraresource.infrahub.operators.com,admissionReviewVersions=v1,matchPolicy=Equivalent,timeoutSeconds=10,reinvocationPolicy=IfNeeded

// WriterLabeler records who created an InfrahubSync or a VidraResource in
// infrahubv1alpha1.WriterLabel, so that the validating webhook can count a writer's objects
// (--delivery-max-objects-per-writer): on create the writer's, none for the operator's own; on
// update the label the object had, whatever the writer sent.
type WriterLabeler[T client.Object] struct {
	Access *rights.Admission
}

// Default sets the writer label.
func (w WriterLabeler[T]) Default(ctx context.Context, obj T) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	switch req.Operation {
	case admissionv1.Create:
		isOp, err := w.Access.IsOperator(ctx, req.UserInfo)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if isOp {
			delete(labels, infrahubv1alpha1.WriterLabel)
		} else {
			labels[infrahubv1alpha1.WriterLabel] = rights.WriterLabelValue(req.UserInfo.Username)
		}
	case admissionv1.Update:
		var old struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("decoding the old object: %v", err))
		}
		if v, ok := old.Metadata.Labels[infrahubv1alpha1.WriterLabel]; ok {
			labels[infrahubv1alpha1.WriterLabel] = v
		} else {
			delete(labels, infrahubv1alpha1.WriterLabel)
		}
	default:
		return nil
	}
	if len(labels) == 0 {
		labels = nil
	}
	obj.SetLabels(labels)
	return nil
}
