package metal

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// InsecureAnnotation on a BMC turns TLS verification off for it. Self-signed BMCs are the norm;
// turning verification off is a per-BMC decision a user makes explicitly, never a default.
const InsecureAnnotation = "metal.metalhub.io/insecure-skip-tls-verify"

// A problem with what the user gave us (missing secret, endpoint, ...) is a
// lifecycle.ReasonError (accessErr): it gets a condition reason and a slow retry, and recovers by
// itself when the object appears (watched).
func accessErr(reason, format string, args ...any) error {
	return lifecycle.Reasonf(reason, format, args...)
}

// isAccessError reports whether err is a problem with what the user gave us.
func isAccessError(err error) bool { _, ok := lifecycle.ReasonOf(err); return ok }

// reasonOf gives the condition reason of any error of this package or of internal/bmc.
func reasonOf(err error) string {
	if reason, ok := lifecycle.ReasonOf(err); ok {
		return reason
	}
	return bmc.ReasonString(err)
}

// credentials reads username and password from a BMCSecret.
func credentials(ctx context.Context, c client.Reader, name string) (string, string, error) {
	if name == "" {
		return "", "", accessErr(metalv1alpha1.ReasonSecretNotFound, "no bmcSecretRef")
	}
	s := &metalv1alpha1.BMCSecret{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", accessErr(metalv1alpha1.ReasonSecretNotFound, "BMCSecret %q not found", name)
		}
		return "", "", fmt.Errorf("reading BMCSecret %q: %w", name, err)
	}
	user, okU := s.Value(metalv1alpha1.BMCSecretUsernameKey)
	pass, okP := s.Value(metalv1alpha1.BMCSecretPasswordKey)
	if !okU || !okP || user == "" {
		return "", "", accessErr(metalv1alpha1.ReasonSecretInvalid, "BMCSecret %q needs %q and %q", name, metalv1alpha1.BMCSecretUsernameKey, metalv1alpha1.BMCSecretPasswordKey)
	}
	return user, pass, nil
}

// bmcHost returns the host of a BMC: inline access or its Endpoint.
func bmcHost(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC) (string, error) {
	if b.Spec.Access != nil {
		if b.Spec.Access.IP == "" {
			return "", accessErr(metalv1alpha1.ReasonEndpointInvalid, "spec.access.ip is empty")
		}
		return b.Spec.Access.IP, nil
	}
	if b.Spec.EndpointRef == nil || b.Spec.EndpointRef.Name == "" {
		return "", accessErr(metalv1alpha1.ReasonEndpointInvalid, "neither spec.access nor spec.endpointRef is set")
	}
	ep := &metalv1alpha1.Endpoint{}
	if err := c.Get(ctx, client.ObjectKey{Name: b.Spec.EndpointRef.Name}, ep); err != nil {
		if apierrors.IsNotFound(err) {
			return "", accessErr(metalv1alpha1.ReasonEndpointNotFound, "Endpoint %q not found", b.Spec.EndpointRef.Name)
		}
		return "", fmt.Errorf("reading Endpoint %q: %w", b.Spec.EndpointRef.Name, err)
	}
	if ep.Spec.IP == "" {
		return "", accessErr(metalv1alpha1.ReasonEndpointInvalid, "Endpoint %q has no IP", ep.Name)
	}
	return ep.Spec.IP, nil
}

// bmcEndpoint resolves everything needed to talk to a BMC object.
func bmcEndpoint(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC) (bmc.Endpoint, error) {
	host, err := bmcHost(ctx, c, b)
	if err != nil {
		return bmc.Endpoint{}, err
	}
	user, pass, err := credentials(ctx, c, b.Spec.BMCSecretRef.Name)
	if err != nil {
		return bmc.Endpoint{}, err
	}
	return bmc.Endpoint{
		Address:            index.Address(b.Spec.Protocol, host),
		Username:           user,
		Password:           pass,
		InsecureSkipVerify: b.Annotations[InsecureAnnotation] == "true",
	}, nil
}

// serverEndpoint resolves the BMC of a Server: its BMC object, or inline access.
func serverEndpoint(ctx context.Context, c client.Reader, s *metalv1alpha1.Server) (bmc.Endpoint, error) {
	if s.Spec.BMCRef != nil && s.Spec.BMCRef.Name != "" {
		b := &metalv1alpha1.BMC{}
		if err := c.Get(ctx, client.ObjectKey{Name: s.Spec.BMCRef.Name}, b); err != nil {
			if apierrors.IsNotFound(err) {
				return bmc.Endpoint{}, accessErr(metalv1alpha1.ReasonBMCNotFound, "BMC %q not found", s.Spec.BMCRef.Name)
			}
			return bmc.Endpoint{}, fmt.Errorf("reading BMC %q: %w", s.Spec.BMCRef.Name, err)
		}
		return bmcEndpoint(ctx, c, b)
	}
	if s.Spec.BMC != nil {
		user, pass, err := credentials(ctx, c, s.Spec.BMC.BMCSecretRef.Name)
		if err != nil {
			return bmc.Endpoint{}, err
		}
		return bmc.Endpoint{Address: index.Address(s.Spec.BMC.Protocol, s.Spec.BMC.Address), Username: user, Password: pass}, nil
	}
	return bmc.Endpoint{}, accessErr(metalv1alpha1.ReasonBMCNotFound, "server has neither spec.bmcRef nor spec.bmc")
}

// ServerEndpoint returns where s's BMC is and its credentials, read with c (and so with c's
// rights): for tools that reach the BMC beside Redfish, as the serial console does over SSH.
func ServerEndpoint(ctx context.Context, c client.Reader, s *metalv1alpha1.Server) (bmc.Endpoint, error) {
	return serverEndpoint(ctx, c, s)
}

// ServerBMC returns a client for s's BMC bound to s's machine (bmc.Expect: every call on the
// system proves it is that machine before anything is sent) and the system's ID, for the
// controllers of other groups that act on a Server's box (firmware, settings).
func ServerBMC(ctx context.Context, c client.Reader, pool *bmc.Pool, s *metalv1alpha1.Server) (bmc.BMC, string, error) {
	ep, err := serverEndpoint(ctx, c, s)
	if err != nil {
		return nil, "", err
	}
	conn, err := pool.Get(ep)
	if err != nil {
		return nil, "", err
	}
	bound := bmc.Expect(conn, serverIdentity(s))
	if s.Spec.SystemURI != "" {
		return bound, s.Spec.SystemURI, nil
	}
	systems, err := bound.Systems(ctx)
	if err != nil {
		return nil, "", err
	}
	for _, sys := range systems {
		if strings.EqualFold(sys.UUID, s.Spec.SystemUUID) {
			return bound, sys.ODataID, nil
		}
	}
	return nil, "", accessErr(string(bmc.ReasonNotFound), "no system with UUID %s on the BMC", s.Spec.SystemUUID)
}

// NewPool makes the BMC connection pool the metal family and the firmware controllers share,
// logged out of every BMC when the manager stops.
func NewPool(mgr ctrl.Manager, o Options) (*bmc.Pool, error) {
	pool := bmc.NewPool(bmc.Options{
		MaxConcurrentRequests: o.BMCMaxConcurrentRequests,
		RequestTimeout:        o.BMCRequestTimeout,
		UserAgent:             o.BMCUserAgent,
		Logger:                mgr.GetLogger().WithName("bmc"),
	})
	// BMCs cap their sessions.
	if err := mgr.Add(poolCloser{pool}); err != nil {
		return nil, err
	}
	return pool, nil
}

// ProvenBMC returns a client for b's BMC once what answers at its address is proven to be it
// (its systems are b's Servers' machines), for the controllers of other groups that act on the
// BMC itself (its firmware, its settings).
func ProvenBMC(ctx context.Context, c client.Reader, pool *bmc.Pool, b *metalv1alpha1.BMC) (bmc.BMC, error) {
	ep, err := bmcEndpoint(ctx, c, b)
	if err != nil {
		return nil, err
	}
	conn, err := pool.Get(ep)
	if err != nil {
		return nil, err
	}
	systems, err := conn.Systems(ctx)
	if err != nil {
		return nil, err
	}
	if err := proveBMC(ctx, c, b, systems); err != nil {
		return nil, err
	}
	return conn, nil
}
