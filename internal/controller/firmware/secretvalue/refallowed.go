package secretvalue

import (
	systemv1alpha1 "github.com/metalhub/metalhub/api/system/v1alpha1"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// RefAllowed refuses a Secret outside ns, the one namespace firmware Secrets are read
// from: whoever may write a cluster-scoped settings or version object must not make the operator
// read, show or send any Secret of the cluster.
func RefAllowed(what, namespace, name, ns string) error {
	if namespace == ns {
		return nil
	}
	return lifecycle.Reasonf(systemv1alpha1.ReasonSecretRefNotAllowed,
		"%s names Secret %s/%s: firmware Secrets are read only from namespace %s (--firmware-secret-namespace)", what, namespace, name, ns)
}
