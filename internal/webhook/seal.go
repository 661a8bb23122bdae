package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/webhook/rights"
)

// oldObject decodes the object an update replaces into old; it reports false on create.
func oldObject(req admission.Request, old client.Object) (bool, error) {
	if req.Operation != admissionv1.Update || len(req.OldObject.Raw) == 0 {
		return false, nil
	}
	if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
		return false, apierrors.NewBadRequest(fmt.Sprintf("decoding the object before the update: %v", err))
	}
	return true, nil
}

// sealSync is the last step of the InfrahubSync mutating webhook (rights.Admission.SealSync).
func sealSync(ctx context.Context, access *rights.Admission, s *infrahubv1alpha1.InfrahubSync) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil
	}
	var old *infrahubv1alpha1.InfrahubSync
	prev := &infrahubv1alpha1.InfrahubSync{}
	if ok, err := oldObject(req, prev); err != nil {
		return err
	} else if ok {
		old = prev
	}
	if err := access.SealSync(ctx, req.UserInfo, old, s); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("sealing InfrahubSync %s: %w", s.Name, err))
	}
	return nil
}

// VidraResourceDefaulter is the one mutating webhook of VidraResources: it labels the writer
// (whom the quota counts), then seals what the writer may ask for (rights.Admission.SealResource).
type VidraResourceDefaulter struct {
	Access *rights.Admission
}

var _ admission.Defaulter[*infrahubv1alpha1.VidraResource] = VidraResourceDefaulter{}

// Default labels vr's writer and seals it.
func (d VidraResourceDefaulter) Default(ctx context.Context, vr *infrahubv1alpha1.VidraResource) error {
	if err := (WriterLabeler[*infrahubv1alpha1.VidraResource]{Access: d.Access}).Default(ctx, vr); err != nil {
		return err
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return nil
	}
	var old *infrahubv1alpha1.VidraResource
	prev := &infrahubv1alpha1.VidraResource{}
	if ok, err := oldObject(req, prev); err != nil {
		return err
	} else if ok {
		old = prev
	}
	if err := d.Access.SealResource(ctx, req.UserInfo, old, vr); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("sealing VidraResource %s: %w", vr.Name, err))
	}
	return nil
}
