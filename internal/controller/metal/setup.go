// Package metal holds the reconcilers of the metal.ironcore.dev family: BMCs, Servers, claims,
// boot configurations and maintenance. One reconciler per file.
package metal

import ctrl "sigs.k8s.io/controller-runtime"

// Options configure the metal family.
type Options struct{}

// Setup registers the family's reconcilers with mgr. The reconcilers themselves arrive with the
// lifecycle work; until then the family only claims its place in the manager.
func Setup(mgr ctrl.Manager, _ Options) error {
	_ = mgr
	return nil
}
