// Package claimable says whether a claim may bind a server: from the server alone (its durable
// state, power, holders, pause), and by the claim's tolerations of its taints. The claim
// controller binds with it and the indexes bucket servers by it.
//
// It only answers: it writes no object and binds nothing. It imports no controller package nor the
// assembly (hack/layers.sh).
package claimable

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/metal/serverstate"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Server reports whether a claim may bind s, from the server alone: its durable state
// (never status.state) is Available, it is observed powered off, nobody holds it, its last
// release was cleaned and it is not being deleted, ignored or settings-only by its own mark (a
// BMC's mark is checked per candidate: SettingsOnly). Taints, selectors and pending maintenance depend on the claim and
// are checked per candidate.
func Server(s *metalv1alpha1.Server) bool {
	state, src := serverstate.Store.Get(s)
	return src == lifecycle.FromAnnotation && state == metalv1alpha1.ServerStateAvailable &&
		s.DeletionTimestamp.IsZero() &&
		!s.Spec.Unclaimable &&
		s.Spec.ServerClaimRef == nil &&
		s.Spec.ServerMaintenanceRef == nil &&
		s.Status.PowerState == metalv1alpha1.PowerStateOff &&
		s.Annotations[metalv1alpha1.OperationAnnotation] != metalv1alpha1.OperationIgnore &&
		s.Annotations[metalv1alpha1.OperationAnnotation] != metalv1alpha1.OperationRediscover &&
		!uncleaned(s) &&
		!lifecycle.Paused(s) &&
		!metalv1alpha1.SettingsOnly(s.Annotations)
}

// uncleaned reports a server whose last release has not been cleaned yet (its mark names a
// policy other than None).
func uncleaned(s *metalv1alpha1.Server) bool {
	v := s.Annotations[serverstate.CleaningAnnotation]
	return v != "" && v != string(metalv1alpha1.CleaningPolicyNone)
}

// WhyNot says, for a user, why Server is false.
func WhyNot(s *metalv1alpha1.Server) string {
	state, src := serverstate.Store.Get(s)
	switch {
	case !s.DeletionTimestamp.IsZero():
		return "is being deleted"
	case s.Spec.ServerClaimRef != nil:
		return fmt.Sprintf("is claimed by %s/%s", s.Spec.ServerClaimRef.Namespace, s.Spec.ServerClaimRef.Name)
	case s.Spec.ServerMaintenanceRef != nil:
		return fmt.Sprintf("is in maintenance %s/%s", s.Spec.ServerMaintenanceRef.Namespace, s.Spec.ServerMaintenanceRef.Name)
	case s.Spec.Unclaimable:
		return "is marked unclaimable"
	case metalv1alpha1.SettingsOnly(s.Annotations):
		return "is settings-only (" + metalv1alpha1.SettingsOnlyAnnotation + "): its power and boot belong to another system"
	case uncleaned(s):
		return "has not been cleaned since its last claim (policy " + s.Annotations[serverstate.CleaningAnnotation] + ")"
	case src != lifecycle.FromAnnotation || state != metalv1alpha1.ServerStateAvailable:
		return fmt.Sprintf("is %s, not Available", state)
	case s.Status.PowerState != metalv1alpha1.PowerStateOff:
		return fmt.Sprintf("is not observed powered off (power %q)", s.Status.PowerState)
	case s.Annotations[metalv1alpha1.OperationAnnotation] == metalv1alpha1.OperationIgnore:
		return "is ignored by the operator"
	case s.Annotations[metalv1alpha1.OperationAnnotation] == metalv1alpha1.OperationRediscover:
		return "is about to be discovered again"
	case lifecycle.Paused(s):
		return "is paused (" + lifecycle.PausedAnnotation + ")"
	}
	return "is claimable"
}

// BMCPaused reports whether the BMC object a server is reached through is paused: pausing a BMC
// pauses its Servers (no pass acts on them, no claim binds them).
func BMCPaused(ctx context.Context, c client.Reader, s *metalv1alpha1.Server) (bool, error) {
	b, err := bmcOf(ctx, c, s)
	return b != nil && lifecycle.Paused(b), err
}

// SettingsOnly reports whether s is settings-only (metalv1alpha1.SettingsOnlyAnnotation), by
// its own mark or its BMC object's, and says whose mark it is: a BMC's mark holds for each of
// its Servers, since whoever owns the power of a BMC's boxes owns all of them.
func SettingsOnly(ctx context.Context, c client.Reader, s *metalv1alpha1.Server) (bool, string, error) {
	if metalv1alpha1.SettingsOnly(s.Annotations) {
		return true, "server " + s.Name, nil
	}
	b, err := bmcOf(ctx, c, s)
	if err != nil {
		return false, "", fmt.Errorf("reading the BMC of server %s: %w", s.Name, err)
	}
	if b != nil && metalv1alpha1.SettingsOnly(b.Annotations) {
		return true, "BMC " + b.Name, nil
	}
	return false, "", nil
}

// bmcOf reads the BMC object s is reached through; nil for none (an inline BMC, a BMC gone).
func bmcOf(ctx context.Context, c client.Reader, s *metalv1alpha1.Server) (*metalv1alpha1.BMC, error) {
	ref := s.Spec.BMCRef
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	b := &metalv1alpha1.BMC{}
	if err := c.Get(ctx, client.ObjectKey{Name: ref.Name}, b); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return b, nil
}

// Tolerates reports whether tolerations let a claim bind a server with taints. Both effects keep
// a claim away: Evict is NoBind plus eviction of bound claims.
func Tolerates(tolerations []metalv1alpha1.Toleration, taints []metalv1alpha1.Taint) (bool, string) {
	for _, t := range taints {
		ok := false
		for _, tol := range tolerations {
			if toleratesTaint(tol, t) {
				ok = true
				break
			}
		}
		if !ok {
			return false, fmt.Sprintf("taint %s=%s:%s not tolerated", t.Key, t.Value, TaintEffect(t))
		}
	}
	return true, ""
}

// TaintEffect is t's effect, NoBind when left empty (the CRD default).
func TaintEffect(t metalv1alpha1.Taint) metalv1alpha1.TaintEffect {
	if t.Effect == "" {
		return metalv1alpha1.TaintEffectNoBind
	}
	return t.Effect
}

func toleratesTaint(tol metalv1alpha1.Toleration, t metalv1alpha1.Taint) bool {
	if tol.Effect != "" && tol.Effect != TaintEffect(t) {
		return false
	}
	if tol.Operator == metalv1alpha1.TolerationOpExists {
		return tol.Key == "" || tol.Key == t.Key
	}
	return tol.Key == t.Key && tol.Value == t.Value
}
