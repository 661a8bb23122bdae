package target

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/sealing"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Keys read from an Infrahub credentials Secret. An API token (sent as X-INFRAHUB-KEY) needs no
// login and wins over a username/password pair; ca.crt, when present, is the only CA trusted.
var (
	tokenKeys    = []string{"token", "api-token"}
	usernameKeys = []string{"username"}
	passwordKeys = []string{"password"}
	caKeys       = []string{"ca.crt"}
)

// Credentials finds the Secret for a sync and turns it into a client configuration. The
// Secret must name the sync (SyncsAnnotation) or be the one its admission found its writer may
// read; it must be for the sync's exact scheme, host and port; and it is never sent over plain
// HTTP off the node or the cluster network (plainHTTPByDefault) unless the admin allows it.
type Credentials struct {
	Reader client.Reader // cache of Secrets labelled infrahub-api-url
	// Live reads a Secret admission bound a sync to outside the scope (its destination
	// namespace), which the cache does not hold.
	Live    client.Reader
	Scope   SecretScope
	Timeout time.Duration
	// MaxBody is the largest artifact downloaded (--delivery-max-manifest-bytes).
	MaxBody int64
	// AllowPlainHTTP sends credentials to any http:// URL (--delivery-allow-plain-http-credentials);
	// without it only to loopback and in-cluster Services.
	AllowPlainHTTP bool
	// TrustAdmitted honours AdmittedCredentialsAnnotation (--delivery-trust-admitted-credentials):
	// only safe when the admission webhook that sets it refuses it from anyone else.
	TrustAdmitted bool
	// Seals verify that admission judged the annotation (SealAnnotation).
	Seals *sealing.Sealer
}

// SyncClaimant is who a sync's credentials are looked up for.
func (c *Credentials) SyncClaimant(s *infrahubv1alpha1.InfrahubSync) Claimant {
	who := Claimant{Kind: "InfrahubSync", Name: s.Name, Syncs: []string{s.Name}}
	if c.TrustAdmitted {
		who.Admitted = strings.TrimSpace(s.Annotations[infrahubv1alpha1.AdmittedCredentialsAnnotation])
	}
	return who
}

// Config returns the client configuration for sync s. The Secret's content never appears in
// errors or logs; its name does. Every refusal happens before anything is sent.
func (c *Credentials) Config(ctx context.Context, s *infrahubv1alpha1.InfrahubSync) (infrahub.Config, error) {
	rawURL := s.Spec.Source.InfrahubAPIURL
	want, err := ParseEndpoint(rawURL)
	if err != nil {
		return infrahub.Config{}, lifecycle.WithReason(infrahubv1alpha1.ReasonCredentialsNotFound, err)
	}
	if admitted := strings.TrimSpace(s.Annotations[infrahubv1alpha1.AdmittedCredentialsAnnotation]); c.TrustAdmitted && admitted != "" {
		if v := c.Seals.View(ctx, "InfrahubSync", s); !v.Admitted() {
			return infrahub.Config{}, sealing.UnsealedError(v.Kind, v.Name, fmt.Sprintf("annotation %s names credentials Secret %s",
				infrahubv1alpha1.AdmittedCredentialsAnnotation, admitted), v.Why)
		}
	}
	who := c.SyncClaimant(s)
	var sec *corev1.Secret
	if ns, _, _ := strings.Cut(who.Admitted, "/"); who.Admitted != "" && !c.Scope.holds(ns) {
		sec, err = c.admittedOutsideScope(ctx, s, who.Admitted)
	} else {
		sec, err = FindLabelledSecret(ctx, c.Reader, c.Scope, SecretQuery{
			Key: infrahubv1alpha1.InfrahubAPIURLLabel, RawURL: rawURL, Who: who,
			NotFound: infrahubv1alpha1.ReasonCredentialsNotFound, NotBound: infrahubv1alpha1.ReasonCredentialsNotBound,
			Endpoint: func(sec *corev1.Secret) error {
				if who.isAdmitted(sec) {
					return AdmittedEndpoint(sec, rawURL)
				}
				return exactEndpoint(sec, want)
			},
		})
	}
	if err != nil {
		return infrahub.Config{}, err
	}
	if want.scheme == "http" && !c.AllowPlainHTTP && !plainHTTPByDefault(want.host) {
		return infrahub.Config{}, lifecycle.Reasonf(infrahubv1alpha1.ReasonPlainHTTPCredentials,
			"refusing to send the credentials of Secret %s/%s in the clear to %s, which is neither loopback nor an in-cluster Service (*.svc, *.svc.cluster.local); nothing was sent. Use https, or start the operator with --delivery-allow-plain-http-credentials",
			sec.Namespace, sec.Name, want)
	}
	cfg := infrahub.Config{
		URL:          rawURL,
		APIToken:     secretValue(sec, tokenKeys...),
		Username:     secretValue(sec, usernameKeys...),
		Password:     secretValue(sec, passwordKeys...),
		CABundle:     sec.Data[caKeys[0]],
		Timeout:      c.Timeout,
		MaxBodyBytes: c.MaxBody,
	}
	if cfg.APIToken == "" && (cfg.Username == "" || cfg.Password == "") {
		return infrahub.Config{}, lifecycle.WithReason(infrahubv1alpha1.ReasonCredentialsInvalid,
			errors.New("Secret "+sec.Namespace+"/"+sec.Name+" holds neither token/api-token nor username and password"))
	}
	return cfg, nil
}

// exactEndpoint refuses a Secret that is not for exactly the endpoint want (scheme, host, port).
func exactEndpoint(sec *corev1.Secret, want endpoint) error {
	have, how, err := SecretEndpoint(sec)
	if err != nil {
		return lifecycle.Reasonf(infrahubv1alpha1.ReasonCredentialsInvalid, "Secret %s/%s: %s: %v", sec.Namespace, sec.Name, how, err)
	}
	if why := EndpointMismatch(have, want); why != "" {
		return lifecycle.Reasonf(infrahubv1alpha1.ReasonCredentialsURLMismatch,
			"Secret %s/%s holds credentials for %s (%s), not for the sync's %s (%s); nothing was sent. Set the Secret's annotation %s to the exact URL, or fix spec.source.infrahubAPIURL",
			sec.Namespace, sec.Name, have, how, want, why, infrahubv1alpha1.URLAnnotation)
	}
	return nil
}

// admittedOutsideScope reads the Secret ref (namespace/name) admission bound sync s to when it
// lies outside the Secret scope, which BindCredentials looks beyond only into the sync's
// destination namespace: anywhere else it is not honoured. Such Secrets are not cached, so they
// are read live, each pass. It must still be labelled for the sync's host.
func (c *Credentials) admittedOutsideScope(ctx context.Context, s *infrahubv1alpha1.InfrahubSync, ref string) (*corev1.Secret, error) {
	ns, name, _ := strings.Cut(ref, "/")
	rawURL := s.Spec.Source.InfrahubAPIURL
	if dest := DestinationNamespace(s.Spec.Destination); ns != dest || name == "" || c.Live == nil {
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonCredentialsNotBound,
			"annotation %s names Secret %s, outside %s and the sync's destination namespace %s; nothing was sent",
			infrahubv1alpha1.AdmittedCredentialsAnnotation, ref, c.Scope, dest)
	}
	sec := &corev1.Secret{}
	if err := c.Live.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec); apierrors.IsNotFound(err) {
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonCredentialsNotFound, "Secret %s, which the sync was admitted with (annotation %s), does not exist",
			ref, infrahubv1alpha1.AdmittedCredentialsAnnotation)
	} else if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", ref, err)
	}
	if !labelledFor(sec, rawURL) {
		return nil, lifecycle.Reasonf(infrahubv1alpha1.ReasonCredentialsNotBound, "Secret %s, which the sync was admitted with, is not labelled %s for %s; nothing was sent",
			ref, infrahubv1alpha1.InfrahubAPIURLLabel, hostOf(rawURL))
	}
	if err := AdmittedEndpoint(sec, rawURL); err != nil {
		return nil, err
	}
	return sec, nil
}
