package webhook

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/webhook/rights"
)

// InfrahubSyncCredentialsBinder records on a sync that names no credentials Secret the one
// labelled infrahub-api-url for its host (rights.Admission.BindCredentials), as Vidra finds
// it, in the annotation admitted-credentials. It runs before InfrahubSyncValidator, which then
// admits the sync only if its writer may get that Secret: an admin's Vidra manifests work as
// written, and a tenant without that right is refused with the right named.
type InfrahubSyncCredentialsBinder struct {
	Access *rights.Admission
}

var _ admission.Defaulter[*infrahubv1alpha1.InfrahubSync] = InfrahubSyncCredentialsBinder{}

// Default binds s.
func (b InfrahubSyncCredentialsBinder) Default(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) error {
	if b.Access == nil {
		return nil
	}
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var old *infrahubv1alpha1.InfrahubSync
	prev := &infrahubv1alpha1.InfrahubSync{}
	if ok, err := oldObject(req, prev); err != nil {
		return err
	} else if ok {
		old = prev
	}
	if err := b.Access.BindCredentials(ctx, req.UserInfo, old, s); err != nil {
		return apierrors.NewForbidden(infrahubv1alpha1.GroupVersion.WithResource("infrahubsyncs").GroupResource(), s.Name, err)
	}
	return nil
}

// InfrahubSyncDefaulter is the one mutating webhook of InfrahubSyncs (one path per kind): it
// labels the writer (whom the quota counts), binds the credentials Secret, then seals what the
// writer may ask for (rights.Admission.SealSync).
type InfrahubSyncDefaulter struct {
	Access *rights.Admission
}

var _ admission.Defaulter[*infrahubv1alpha1.InfrahubSync] = InfrahubSyncDefaulter{}

// Default labels s's writer and binds its credentials.
func (d InfrahubSyncDefaulter) Default(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) error {
	if err := (WriterLabeler[*infrahubv1alpha1.InfrahubSync]{Access: d.Access}).Default(ctx, s); err != nil {
		return err
	}
	if err := (InfrahubSyncCredentialsBinder{Access: d.Access}).Default(ctx, s); err != nil {
		return err
	}
	if d.Access == nil {
		return nil
	}
	return sealSync(ctx, d.Access, s)
}
