package metal

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// What "metalhub migrate plan" asks of the metal family: the same rules the controllers apply,
// read without acting.

// StateOnStart is the state the Server controller starts s in, and where it comes from: our
// annotation, derived from refs and markers, adopted from another operator's status, or Initial.
func StateOnStart(s *metalv1alpha1.Server) (metalv1alpha1.ServerState, lifecycle.Source) {
	return serverStore.Get(s)
}

// ValidServerState reports whether st is a state of the API.
func ValidServerState(st metalv1alpha1.ServerState) bool { return validServerState(st) }

// DiscoveryOfOurs reports whether s in Discovery runs a discovery round of metalhub's (one
// without is the reference's, discovered again once the server is Off and unclaimed).
func DiscoveryOfOurs(s *metalv1alpha1.Server) bool {
	return s.Annotations[discovery.RoundAnnotation] != ""
}

// BMCAddress is the base URL the controllers use for b.
func BMCAddress(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC) (string, error) {
	host, err := bmcHost(ctx, c, b)
	if err != nil {
		return "", err
	}
	return bmcAddress(b.Spec.Protocol, host), nil
}

// Finalizers are the finalizers the metal family sets and removes (the reference operator's
// names for the same objects).
func Finalizers() []string {
	return []string{BMCFinalizer, ServerFinalizer, ServerClaimFinalizer, ServerMaintenanceFinalizer}
}
