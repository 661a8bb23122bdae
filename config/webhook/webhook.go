// Package webhook embeds the ValidatingWebhookConfiguration `make manifests` generates from the
// +kubebuilder:webhook markers in internal/webhook, so that `metalhub dev` and tests register
// exactly the webhooks a cluster gets from this directory.
package webhook

import (
	_ "embed"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

//go:embed manifests.yaml
var manifests []byte

// ValidatingWebhookConfiguration returns the generated configuration, decoded. Its webhooks
// point at the Service webhook-service in namespace system, which kustomize renames.
func ValidatingWebhookConfiguration() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(manifests, cfg); err != nil {
		return nil, fmt.Errorf("decoding config/webhook/manifests.yaml: %w", err)
	}
	if len(cfg.Webhooks) == 0 {
		return nil, fmt.Errorf("config/webhook/manifests.yaml holds no webhook")
	}
	return cfg, nil
}
