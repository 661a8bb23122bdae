package sealing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
)

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;list

// webhookPaths are the paths the admission webhook of each delivery kind is served at
// (internal/webhook's markers), by resource.
var webhookPaths = map[string]string{
	"infrahubsyncs":  "/validate-infrahub-operators-com-v1alpha1-infrahubsync",
	"vidraresources": "/validate-infrahub-operators-com-v1alpha1-vidraresource",
}

// guardedOps are the operations admission must see: each can make the operator act.
var guardedOps = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}

// WebhooksGuard says whether cfgs send every create, update and delete of both delivery kinds,
// with no exception and failing closed, to this operator's webhook: served at webhookPaths by a
// Service in operatorNamespace (any namespace when it is ""), or at a URL with that path (a
// local run). It says what is missing.
func WebhooksGuard(cfgs []admissionregistrationv1.ValidatingWebhookConfiguration, operatorNamespace string) error {
	var missing []string
	for _, resource := range []string{"infrahubsyncs", "vidraresources"} {
		if !guarded(cfgs, resource, operatorNamespace) {
			missing = append(missing, resource)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no ValidatingWebhookConfiguration sends every create, update and delete of %s.%s to this operator's webhook (%s), failing closed",
			strings.Join(missing, " and "), infrahubv1alpha1.GroupVersion.Group, describePaths(missing))
	}
	return nil
}

func describePaths(resources []string) string {
	var out []string
	for _, r := range resources {
		out = append(out, webhookPaths[r])
	}
	return strings.Join(out, ", ")
}

func guarded(cfgs []admissionregistrationv1.ValidatingWebhookConfiguration, resource, operatorNamespace string) bool {
	for _, cfg := range cfgs {
		for _, w := range cfg.Webhooks {
			if pointsAtUs(w.ClientConfig, webhookPaths[resource], operatorNamespace) && exceptionless(w) && coversAll(w.Rules, resource) {
				return true
			}
		}
	}
	return false
}

func pointsAtUs(cc admissionregistrationv1.WebhookClientConfig, path, operatorNamespace string) bool {
	switch {
	case cc.Service != nil:
		return cc.Service.Path != nil && *cc.Service.Path == path && (operatorNamespace == "" || cc.Service.Namespace == operatorNamespace)
	case cc.URL != nil:
		return strings.HasSuffix(*cc.URL, path)
	}
	return false
}

// exceptionless: the webhook fails closed and selects every object of the kind.
func exceptionless(w admissionregistrationv1.ValidatingWebhook) bool {
	if w.FailurePolicy != nil && *w.FailurePolicy != admissionregistrationv1.Fail {
		return false
	}
	if len(w.MatchConditions) > 0 {
		return false
	}
	if s := w.ObjectSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
		return false
	}
	return true
}

// coversAll: together, the rules that match the resource cover every guarded operation.
func coversAll(rules []admissionregistrationv1.RuleWithOperations, resource string) bool {
	ops := map[admissionregistrationv1.OperationType]bool{}
	for _, r := range rules {
		if !matches(r.APIGroups, infrahubv1alpha1.GroupVersion.Group) || !matches(r.APIVersions, infrahubv1alpha1.GroupVersion.Version) ||
			!matches(r.Resources, resource) {
			continue
		}
		if r.Scope != nil && *r.Scope != admissionregistrationv1.AllScopes && *r.Scope != admissionregistrationv1.ClusterScope {
			continue
		}
		for _, op := range r.Operations {
			if op == admissionregistrationv1.OperationAll {
				return true
			}
			ops[op] = true
		}
	}
	for _, op := range guardedOps {
		if !ops[op] {
			return false
		}
	}
	return true
}

func matches(list []string, want string) bool {
	return slices.Contains(list, want) || slices.Contains(list, "*")
}

// WebhookGuard asks the API server, at most once per interval while the answer is yes, whether
// the webhooks guard both kinds (WebhooksGuard). A no is not remembered: the configuration is
// often installed just after the operator starts.
type WebhookGuard struct {
	Reader            client.Reader // live reads
	OperatorNamespace string
	Interval          time.Duration
	Now               func() time.Time

	mu sync.Mutex
	ok time.Time // when the guard was last seen in place
}

func (g *WebhookGuard) Check(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.ok.IsZero() && g.Now().Sub(g.ok) < g.Interval {
		return nil
	}
	var list admissionregistrationv1.ValidatingWebhookConfigurationList
	if err := g.Reader.List(ctx, &list); err != nil {
		return fmt.Errorf("the webhook configurations cannot be read: %w", err)
	}
	if err := WebhooksGuard(list.Items, g.OperatorNamespace); err != nil {
		g.ok = time.Time{}
		return err
	}
	g.ok = g.Now()
	return nil
}
