package target

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// ServiceAccountFor is the ServiceAccount a destination acts as: its own, else the default
// (--delivery-default-service-account: "name" in the destination namespace, or
// "namespace/name"); name "" means none (the operator itself, where that is allowed).
func ServiceAccountFor(d infrahubv1alpha1.Destination, defaultSA string) (namespace, name string) {
	name, namespace = d.ServiceAccountName, d.ServiceAccountNamespace
	if name == "" {
		if defaultSA == "" {
			return "", ""
		}
		namespace, name, _ = strings.Cut(defaultSA, "/")
		if name == "" {
			namespace, name = "", namespace
		}
	}
	return cmp.Or(namespace, DestinationNamespace(d)), name
}

// DestinationNamespace is where a destination's objects go when they name no namespace.
func DestinationNamespace(d infrahubv1alpha1.Destination) string {
	return cmp.Or(d.Namespace, metav1.NamespaceDefault)
}

// ServiceAccountUser is the user name of a ServiceAccount.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Identity decides whom a destination's reads, applies and prunes act as. A ServiceAccount the
// writer named in spec.destination is used only while admission checks that the writer may
// impersonate it: the two kinds are cluster-scoped, so without the webhook anyone who may create
// a VidraResource could name any ServiceAccount of the cluster. What the admin set (the default
// ServiceAccount, the operator itself with --delivery-allow-operator-identity) needs no webhook.
// The operator's own ServiceAccount is never acted as on a writer's behalf.
type Identity struct {
	// DefaultSA is --delivery-default-service-account: "name" (in the destination namespace)
	// or "namespace/name"; "" none.
	DefaultSA string
	// AllowOperator is --delivery-allow-operator-identity: with no ServiceAccount, apply as
	// the operator itself.
	AllowOperator bool
	// Admission says whether the admission webhook guards both kinds (nil: it does not).
	Admission func(context.Context) error
	// Self learns the operator's own user name.
	Self *SelfUser
}

// ActAs is the user for d, of the object seal describes: a ServiceAccount's, or "" for the
// operator itself.
func (id *Identity) ActAs(ctx context.Context, d infrahubv1alpha1.Destination, seal sealing.View) (string, error) {
	ns, name := ServiceAccountFor(d, id.DefaultSA)
	if name == "" {
		if id.AllowOperator {
			return "", nil
		}
		return "", lifecycle.Reasonf(infrahubv1alpha1.ReasonNoServiceAccount,
			"spec.destination.serviceAccountName is empty and there is no --delivery-default-service-account; "+
				"the operator applies as itself only with --delivery-allow-operator-identity")
	}
	user := ServiceAccountUser(ns, name)
	if d.ServiceAccountName == "" {
		return user, nil // the admin's default
	}
	if id.Self != nil {
		op, err := id.Self.Get(ctx)
		if err != nil {
			return "", lifecycle.WithReason(infrahubv1alpha1.ReasonInternal, err)
		}
		if user == op {
			return "", lifecycle.Reasonf(infrahubv1alpha1.ReasonOperatorServiceAccount,
				"spec.destination names ServiceAccount %s/%s, the operator's own: it never acts as itself on a writer's behalf; name a ServiceAccount of the destination", ns, name)
		}
	}
	plain := d
	plain.ServiceAccountName, plain.ServiceAccountNamespace = "", ""
	if dns, dname := ServiceAccountFor(plain, id.DefaultSA); dns == ns && dname == name {
		return user, nil // named, but the default it would have anyway
	}
	err := errors.New("this operator does not serve the admission webhooks (--enable-webhooks is off)")
	if id.Admission != nil {
		err = id.Admission(ctx)
	}
	if err != nil {
		return "", lifecycle.Reasonf(infrahubv1alpha1.ReasonAdmissionRequired,
			"spec.destination names ServiceAccount %s/%s, which the operator acts as only while its admission webhook checks that the writer "+
				"may impersonate it, and %v; nothing applied. Name no ServiceAccount to apply as the default (--delivery-default-service-account), "+
				"or run the operator with --enable-webhooks and its ValidatingWebhookConfiguration installed", ns, name, err)
	}
	if !seal.Admitted() {
		return "", sealing.UnsealedError(seal.Kind, seal.Name, fmt.Sprintf("spec.destination names ServiceAccount %s/%s", ns, name), seal.Why)
	}
	return user, nil
}

// SelfUser is the operator's own user name, learnt once with a SelfSubjectReview.
type SelfUser struct {
	Client client.Client
	mu     sync.Mutex
	Name   string
}

// Get returns the name, asking the API server the first time.
func (s *SelfUser) Get(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Name != "" {
		return s.Name, nil
	}
	r := &authenticationv1.SelfSubjectReview{}
	if err := s.Client.Create(ctx, r); err != nil {
		return "", fmt.Errorf("learning the operator's own user (SelfSubjectReview): %w", err)
	}
	if r.Status.UserInfo.Username == "" {
		return "", errors.New("the SelfSubjectReview named no user")
	}
	s.Name = r.Status.UserInfo.Username
	return s.Name, nil
}
