// Package delivery holds the reconcilers of the infrahub.operators.com family: InfrahubSync and
// VidraResource. One reconciler per file.
package delivery

import ctrl "sigs.k8s.io/controller-runtime"

// Options configure the delivery family.
type Options struct{}

// Setup registers the family's reconcilers with mgr. The reconcilers themselves arrive with the
// delivery work; until then the family only claims its place in the manager.
func Setup(mgr ctrl.Manager, _ Options) error {
	_ = mgr
	return nil
}
