// Package bmcaccess is how a metal object reaches its BMC: the address and credentials of a BMC or
// a Server (read with the caller's client, and so with its rights), the connection pool the metal
// and firmware controllers share, and the proofs that what answers is the machine expected (a
// Server's identity; a BMC's Servers among its systems), with what the controllers share around
// them (a new password, the backoff after a failure). A problem with what the user gave is an
// input error with a condition reason.
//
// It writes no object and decides no action on a BMC: it connects and proves, and the caller acts.
// It imports no controller package nor the assembly (hack/layers.sh).
package bmcaccess

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"math/big"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/bmc"
	"github.com/metalhub/metalhub/internal/controller/metal/index"
	"github.com/metalhub/metalhub/internal/lifecycle"
	"github.com/metalhub/metalhub/internal/registry"
)

// InsecureAnnotation on a BMC turns TLS verification off for it. Self-signed BMCs are the norm;
// turning verification off is a per-BMC decision a user makes explicitly, never a default.
const InsecureAnnotation = "metal.metalhub.io/insecure-skip-tls-verify"

// A problem with what the user gave us (missing secret, endpoint, ...) is a
// lifecycle.ReasonError (Errorf): it gets a condition reason and a slow retry, and recovers by
// itself when the object appears (watched).
func Errorf(reason, format string, args ...any) error {
	return lifecycle.Reasonf(reason, format, args...)
}

// IsInputError reports whether err is a problem with what the user gave us.
func IsInputError(err error) bool { _, ok := lifecycle.ReasonOf(err); return ok }

// ReasonOf gives the condition reason of any error of this package or of internal/bmc.
func ReasonOf(err error) string {
	if reason, ok := lifecycle.ReasonOf(err); ok {
		return reason
	}
	return bmc.ReasonString(err)
}

// Credentials reads username and password from a BMCSecret.
func Credentials(ctx context.Context, c client.Reader, name string) (string, string, error) {
	if name == "" {
		return "", "", Errorf(metalv1alpha1.ReasonSecretNotFound, "no bmcSecretRef")
	}
	s := &metalv1alpha1.BMCSecret{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", Errorf(metalv1alpha1.ReasonSecretNotFound, "BMCSecret %q not found", name)
		}
		return "", "", fmt.Errorf("reading BMCSecret %q: %w", name, err)
	}
	user, okU := s.Value(metalv1alpha1.BMCSecretUsernameKey)
	pass, okP := s.Value(metalv1alpha1.BMCSecretPasswordKey)
	if !okU || !okP || user == "" {
		return "", "", Errorf(metalv1alpha1.ReasonSecretInvalid, "BMCSecret %q needs %q and %q", name, metalv1alpha1.BMCSecretUsernameKey, metalv1alpha1.BMCSecretPasswordKey)
	}
	return user, pass, nil
}

// Host returns the host of a BMC: inline access or its Endpoint.
func Host(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC) (string, error) {
	if b.Spec.Access != nil {
		if b.Spec.Access.IP == "" {
			return "", Errorf(metalv1alpha1.ReasonEndpointInvalid, "spec.access.ip is empty")
		}
		return b.Spec.Access.IP, nil
	}
	if b.Spec.EndpointRef == nil || b.Spec.EndpointRef.Name == "" {
		return "", Errorf(metalv1alpha1.ReasonEndpointInvalid, "neither spec.access nor spec.endpointRef is set")
	}
	ep := &metalv1alpha1.Endpoint{}
	if err := c.Get(ctx, client.ObjectKey{Name: b.Spec.EndpointRef.Name}, ep); err != nil {
		if apierrors.IsNotFound(err) {
			return "", Errorf(metalv1alpha1.ReasonEndpointNotFound, "Endpoint %q not found", b.Spec.EndpointRef.Name)
		}
		return "", fmt.Errorf("reading Endpoint %q: %w", b.Spec.EndpointRef.Name, err)
	}
	if ep.Spec.IP == "" {
		return "", Errorf(metalv1alpha1.ReasonEndpointInvalid, "Endpoint %q has no IP", ep.Name)
	}
	return ep.Spec.IP, nil
}

// Endpoint resolves everything needed to talk to a BMC object.
func Endpoint(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC) (bmc.Endpoint, error) {
	host, err := Host(ctx, c, b)
	if err != nil {
		return bmc.Endpoint{}, err
	}
	user, pass, err := Credentials(ctx, c, b.Spec.BMCSecretRef.Name)
	if err != nil {
		return bmc.Endpoint{}, err
	}
	ep := bmc.Endpoint{
		Address:            index.Address(b.Spec.Protocol, host),
		Username:           user,
		Password:           pass,
		InsecureSkipVerify: b.Annotations[InsecureAnnotation] == "true",
	}
	if ca := PinnedCA(b); ca != nil {
		// The certificate metalhub installed is served: verified against its CA alone,
		// whatever the insecure annotation says.
		ep.CACert, ep.InsecureSkipVerify = ca, false
	}
	return ep, nil
}

// ServerEndpoint resolves the BMC of a Server: its BMC object, or inline access, read with c
// (and so with c's rights; tools that reach the BMC beside Redfish use it too, as the serial
// console does over SSH).
func ServerEndpoint(ctx context.Context, c client.Reader, s *metalv1alpha1.Server) (bmc.Endpoint, error) {
	if s.Spec.BMCRef != nil && s.Spec.BMCRef.Name != "" {
		b := &metalv1alpha1.BMC{}
		if err := c.Get(ctx, client.ObjectKey{Name: s.Spec.BMCRef.Name}, b); err != nil {
			if apierrors.IsNotFound(err) {
				return bmc.Endpoint{}, Errorf(metalv1alpha1.ReasonBMCNotFound, "BMC %q not found", s.Spec.BMCRef.Name)
			}
			return bmc.Endpoint{}, fmt.Errorf("reading BMC %q: %w", s.Spec.BMCRef.Name, err)
		}
		return Endpoint(ctx, c, b)
	}
	if s.Spec.BMC != nil {
		user, pass, err := Credentials(ctx, c, s.Spec.BMC.BMCSecretRef.Name)
		if err != nil {
			return bmc.Endpoint{}, err
		}
		return bmc.Endpoint{Address: index.Address(s.Spec.BMC.Protocol, s.Spec.BMC.Address), Username: user, Password: pass}, nil
	}
	return bmc.Endpoint{}, Errorf(metalv1alpha1.ReasonBMCNotFound, "server has neither spec.bmcRef nor spec.bmc")
}

// ServerBMC returns a client for s's BMC bound to s's machine (bmc.Expect: every call on the
// system proves it is that machine before anything is sent) and the system's ID, for the
// controllers of other groups that act on a Server's box (firmware, settings).
func ServerBMC(ctx context.Context, c client.Reader, pool *bmc.Pool, s *metalv1alpha1.Server) (bmc.BMC, string, error) {
	ep, err := ServerEndpoint(ctx, c, s)
	if err != nil {
		return nil, "", err
	}
	conn, err := pool.Get(ep)
	if err != nil {
		return nil, "", err
	}
	bound := bmc.Expect(conn, Identity(s))
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
	return nil, "", Errorf(string(bmc.ReasonNotFound), "no system with UUID %s on the BMC", s.Spec.SystemUUID)
}

// NewPool makes the BMC connection pool the metal family and the firmware controllers share,
// logged out of every BMC when the manager stops.
func NewPool(mgr ctrl.Manager, o bmc.Options) (*bmc.Pool, error) {
	o.Logger = mgr.GetLogger().WithName("bmc")
	pool := bmc.NewPool(o)
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
	ep, err := Endpoint(ctx, c, b)
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
	if err := Prove(ctx, c, b, systems); err != nil {
		return nil, err
	}
	return conn, nil
}

// Identity is the machine a Server expects at its address. While a replaced board is
// being accepted (AcceptSystemUUIDAnnotation) it is the accepted UUID alone: the serial in
// status is still the old board's until the inventory is read anew.
func Identity(s *metalv1alpha1.Server) bmc.Identity {
	if acc := s.Annotations[metalv1alpha1.AcceptSystemUUIDAnnotation]; strings.TrimSpace(acc) != "" {
		return bmc.Identity{UUID: acc}
	}
	return bmc.Identity{UUID: s.Spec.SystemUUID, SerialNumber: s.Status.SerialNumber}
}

// Prove checks, before an account is changed on a BMC, that the BMC answering at its address
// is this one: one of the systems it reports is the machine of one of its Servers. A BMC with no
// Servers yet proves nothing, and gets nothing.
func Prove(ctx context.Context, c client.Reader, b *metalv1alpha1.BMC, systems []bmc.SystemSummary) error {
	own := &metalv1alpha1.ServerList{}
	if err := c.List(ctx, own, client.MatchingFields{index.ServerBMC: b.Name}); err != nil {
		return fmt.Errorf("listing the Servers of BMC %s: %w", b.Name, err)
	}
	if len(own.Items) == 0 || len(systems) == 0 {
		return lifecycle.Reasonf(metalv1alpha1.ReasonIdentityMismatch, "BMC %s has no Servers (or reports no systems) yet: what answers at its address is not proven to be it", b.Name)
	}
	return SameMachines(own.Items, systems)
}

// SameMachines fails with IdentityMismatch when a BMC that holds Servers answers with none of
// their systems: its address reaches other machines now (a lease or IPAM swap, an edited
// address), and what answers is not its to register. Compared by UUID only: every vendor's
// first system has the same path. A chassis that gains a blade still shows its other systems.
func SameMachines(own []metalv1alpha1.Server, systems []bmc.SystemSummary) error {
	if len(own) == 0 || len(systems) == 0 {
		return nil
	}
	held := map[string]bool{}
	names := make([]string, 0, len(own))
	for i := range own {
		held[registry.NormalizeUUID(own[i].Spec.SystemUUID)] = true
		names = append(names, own[i].Name)
	}
	answering := make([]string, 0, len(systems))
	for _, sys := range systems {
		if held[registry.NormalizeUUID(cmp.Or(sys.UUID, sys.ID))] {
			return nil
		}
		answering = append(answering, cmp.Or(sys.UUID, sys.ID))
	}
	return lifecycle.Reasonf(metalv1alpha1.ReasonIdentityMismatch,
		"none of the systems at this address (UUIDs %s) is a machine of this BMC's Servers (%s): the address reaches another machine; nothing is registered from it",
		strings.Join(answering, ", "), strings.Join(names, ", "))
}

// poolCloser logs out of every BMC when the manager stops.
type poolCloser struct{ pool *bmc.Pool }

func (p poolCloser) Start(ctx context.Context) error {
	<-ctx.Done()
	p.pool.Close()
	return nil
}

// NewPassword is 16 random characters with a lower and an upper case letter, a digit and a
// symbol, which the password policies of common BMCs accept (iDRAC allows 20 at most).
func NewPassword() (string, error) {
	classes := []string{"abcdefghijkmnopqrstuvwxyz", "ABCDEFGHJKLMNPQRSTUVWXYZ", "23456789", "-_."}
	all := classes[0] + classes[1] + classes[2] + classes[3]
	pick := func(set string) (byte, error) {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(set))))
		if err != nil {
			return 0, fmt.Errorf("generating a password: %w", err)
		}
		return set[n.Int64()], nil
	}
	out := make([]byte, 16)
	for i := range out {
		set := all
		if i < len(classes) {
			set = classes[i]
		}
		c, err := pick(set)
		if err != nil {
			return "", err
		}
		out[i] = c
	}
	// Shuffle so the classes are not always in front.
	for i := len(out) - 1; i > 0; i-- {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(i+1)))
		if err != nil {
			return "", fmt.Errorf("generating a password: %w", err)
		}
		j := n.Int64()
		out[i], out[j] = out[j], out[i]
	}
	return string(out), nil
}

// FailureBackoff is the look after the n-th consecutive failure: base doubling per failure up
// to limit, and never before a BMC that is failing fast is tried again (looking earlier would
// only fail fast again).
func FailureBackoff(base, limit time.Duration, n int, err error) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, max(base, limit))
	if at, ok := bmc.RetryAt(err); ok {
		d = max(d, time.Until(at))
	}
	return d
}
