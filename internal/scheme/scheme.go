// Package scheme builds the runtime.Scheme every metalhub component uses: the core Kubernetes
// kinds, CustomResourceDefinitions and every metalhub API group (metal, maintenance, system,
// baseboard, infrahub, readiness).
//
// It only registers types: it imports no metalhub package but the api/* groups, and adds no
// defaulting or conversion of its own.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	baseboardv1alpha1 "github.com/metalhub/metalhub/api/baseboard/v1alpha1"
	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	readinessv1alpha1 "github.com/metalhub/metalhub/api/readiness/v1alpha1"
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
)

// New returns a fresh scheme with every kind metalhub reads or writes.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(metalv1alpha1.AddToScheme(s))
	utilruntime.Must(maintenancev1alpha1.AddToScheme(s))
	utilruntime.Must(systemv1alpha1.AddToScheme(s))
	utilruntime.Must(baseboardv1alpha1.AddToScheme(s))
	utilruntime.Must(infrahubv1alpha1.AddToScheme(s))
	utilruntime.Must(readinessv1alpha1.AddToScheme(s))
	return s
}
