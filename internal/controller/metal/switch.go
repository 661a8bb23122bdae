package metal

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/bmcaccess"
	"github.com/metalhub/metalhub/internal/controller/metal/bmccontroller"
	"github.com/metalhub/metalhub/internal/controller/metal/claim"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/controller/metal/maintenance"
	"github.com/metalhub/metalhub/internal/controller/metal/server"
)

// What "metalhub migrate plan" asks of the metal family: the same rules the controllers apply,
// read without acting.

// BMCAddress is the base URL the controllers use for b.
func BMCAddress(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC) (string, error) {
	host, err := bmcaccess.Host(ctx, c, b)
	if err != nil {
		return "", err
	}
	return index.Address(b.Spec.Protocol, host), nil
}

// Finalizers are the finalizers the metal family sets and removes (the reference operator's
// names for the same objects).
func Finalizers() []string {
	return []string{bmccontroller.Finalizer, server.Finalizer, claim.Finalizer, maintenance.Finalizer}
}
