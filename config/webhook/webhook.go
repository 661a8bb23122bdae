// Package webhook embeds the webhook configurations `make manifests` generates from the
// +kubebuilder:webhook markers in internal/webhook, so that `metalhub dev` and tests register
// exactly the webhooks a cluster gets from this directory.
package webhook

import (
	"bytes"
	_ "embed"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

//go:embed manifests.yaml
var manifests []byte

// document is the manifests' document of kind, strictly decoded into out.
func document(kind string, out any) error {
	for _, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return fmt.Errorf("decoding config/webhook/manifests.yaml: %w", err)
		}
		if head.Kind != kind {
			continue
		}
		if err := yaml.UnmarshalStrict(doc, out); err != nil {
			return fmt.Errorf("decoding the %s of config/webhook/manifests.yaml: %w", kind, err)
		}
		return nil
	}
	return fmt.Errorf("config/webhook/manifests.yaml holds no %s", kind)
}

// ValidatingWebhookConfiguration returns the generated validating configuration, decoded. Its
// webhooks point at the Service webhook-service in namespace system, which kustomize renames.
func ValidatingWebhookConfiguration() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := document("ValidatingWebhookConfiguration", cfg); err != nil {
		return nil, err
	}
	if len(cfg.Webhooks) == 0 {
		return nil, fmt.Errorf("config/webhook/manifests.yaml holds no validating webhook")
	}
	return cfg, nil
}

// MutatingWebhookConfiguration returns the generated mutating configuration (the writer label
// the validating webhooks count by), decoded, pointing where the validating one does.
func MutatingWebhookConfiguration() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := document("MutatingWebhookConfiguration", cfg); err != nil {
		return nil, err
	}
	if len(cfg.Webhooks) == 0 {
		return nil, fmt.Errorf("config/webhook/manifests.yaml holds no mutating webhook")
	}
	return cfg, nil
}
