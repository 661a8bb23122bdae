package rights

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/target"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// BindCredentials records in AdmittedCredentialsAnnotation of sync s, written by user (old is nil
// on create), the credentials Secret (namespace/name) it is bound to, if it names none. It
// is how Vidra's manifests work unchanged (issue 42 finding 7): Vidra finds a sync's credentials
// by the label infrahub-api-url alone, and so does this, once, at admission — where the writer
// is known — so that the validating webhook then admits the sync only if the writer may `get`
// that Secret (CheckSync), and the controller later uses that Secret and no other. A Secret
// labelled afterwards never serves the sync on its own.
//
// Where: the Secret scope (the operator's namespace first), then the sync's destination
// namespace, where Vidra users keep them (its writers already control what lands there).
// Nothing is recorded for the operator's own writes (it may read every Secret and would lend
// that to syncs written before the webhook existed), for an update that changes nothing the sync
// makes the operator do, for a sync that already names a Secret (admitted-credentials, or a
// Secret whose syncs annotation lists it), or when no Secret is labelled for the host. An update
// that moves the sync to another host or destination namespace and leaves the annotation as it
// was is bound afresh. Two Secrets on one step of the precedence are an error, never a choice.
func (a *Admission) BindCredentials(ctx context.Context, user authenticationv1.UserInfo, old, s *infrahubv1alpha1.InfrahubSync) error {
	ref, err := a.credentialsBinding(ctx, user, old, s)
	if err != nil || ref == "" {
		return err
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[infrahubv1alpha1.AdmittedCredentialsAnnotation] = ref
	return nil
}

func (a *Admission) credentialsBinding(ctx context.Context, user authenticationv1.UserInfo, old, s *infrahubv1alpha1.InfrahubSync) (string, error) {
	if old != nil && !instructs(&old.ObjectMeta, &s.ObjectMeta, !equality.Semantic.DeepEqual(old.Spec, s.Spec)) {
		return "", nil
	}
	if op, err := a.operatorUser(ctx); err != nil {
		return "", err
	} else if user.Username == op {
		return "", nil
	}
	const key = infrahubv1alpha1.AdmittedCredentialsAnnotation
	if old != nil && s.Annotations[key] != "" && old.Annotations[key] == s.Annotations[key] &&
		(target.HostKey(old.Spec.Source.InfrahubAPIURL) != target.HostKey(s.Spec.Source.InfrahubAPIURL) ||
			target.DestinationNamespace(old.Spec.Destination) != target.DestinationNamespace(s.Spec.Destination)) {
		delete(s.Annotations, key) // bound for where the sync no longer goes
	}
	if strings.TrimSpace(s.Annotations[key]) != "" {
		return "", nil
	}
	scope := a.scope()
	own := target.Claimant{Kind: "InfrahubSync", Name: s.Name, Syncs: []string{s.Name}}
	_, err := target.FindLabelledSecret(ctx, a.Reader, scope, target.SecretQuery{Key: infrahubv1alpha1.InfrahubAPIURLLabel,
		RawURL: s.Spec.Source.InfrahubAPIURL, Who: own,
		NotFound: infrahubv1alpha1.ReasonCredentialsNotFound, NotBound: infrahubv1alpha1.ReasonCredentialsNotBound})
	if err == nil || !noCredentials(err) {
		return "", err // a Secret names the sync (nothing to record), or the lookup failed
	}
	scopes := []target.SecretScope{scope}
	if dest := target.DestinationNamespace(s.Spec.Destination); !scope.Any && dest != scope.Own {
		scopes = append(scopes, target.SecretScope{Own: dest})
	}
	for _, sc := range scopes {
		sec, err := target.FindLabelledSecret(ctx, a.Reader, sc, target.SecretQuery{Key: infrahubv1alpha1.InfrahubAPIURLLabel,
			RawURL: s.Spec.Source.InfrahubAPIURL, Who: target.Claimant{Kind: "InfrahubSync", Name: s.Name, Labelled: true},
			NotFound: infrahubv1alpha1.ReasonCredentialsNotFound, NotBound: infrahubv1alpha1.ReasonCredentialsNotBound,
			Endpoint: func(sec *corev1.Secret) error { return target.AdmittedEndpoint(sec, s.Spec.Source.InfrahubAPIURL) },
		})
		switch {
		case err == nil:
			return sec.Namespace + "/" + sec.Name, nil
		case !noCredentials(err):
			return "", fmt.Errorf("binding the sync's Infrahub credentials: %w", err)
		}
	}
	return "", nil
}

// noCredentials: the lookup found no Secret for the claimant (none labelled for the host, none
// serving it, or only ones for another endpoint), as opposed to failing.
func noCredentials(err error) bool {
	reason, _ := lifecycle.ReasonOf(err)
	switch reason {
	case infrahubv1alpha1.ReasonCredentialsNotFound, infrahubv1alpha1.ReasonCredentialsNotBound, infrahubv1alpha1.ReasonCredentialsURLMismatch:
		return true
	}
	return false
}
