// Package webhook embeds the webhook configurations `make manifests` generates from the
// +kubebuilder:webhook markers in internal/webhook, so that `metalhub dev` and tests register
// exactly the webhooks a cluster gets from this directory: the validating ones, and the
// mutating one that binds an InfrahubSync to its credentials Secret.
package webhook

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed manifests.yaml
var manifests []byte

// document returns the one document of manifests of kind.
func document(kind string) ([]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("config/webhook/manifests.yaml holds no %s", kind)
		}
		if err != nil {
			return nil, fmt.Errorf("reading config/webhook/manifests.yaml: %w", err)
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("decoding config/webhook/manifests.yaml: %w", err)
		}
		if head.Kind == kind {
			return doc, nil
		}
	}
}

// ValidatingWebhookConfiguration returns the generated validating configuration, decoded. Its
// webhooks point at the Service webhook-service in namespace system, which kustomize renames.
func ValidatingWebhookConfiguration() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	doc, err := document("ValidatingWebhookConfiguration")
	if err != nil {
		return nil, err
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(doc, cfg); err != nil {
		return nil, fmt.Errorf("decoding config/webhook/manifests.yaml: %w", err)
	}
	if len(cfg.Webhooks) == 0 {
		return nil, fmt.Errorf("config/webhook/manifests.yaml holds no validating webhook")
	}
	return cfg, nil
}

// MutatingWebhookConfiguration returns the generated mutating configuration, decoded, pointing
// at the same Service.
func MutatingWebhookConfiguration() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	doc, err := document("MutatingWebhookConfiguration")
	if err != nil {
		return nil, err
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(doc, cfg); err != nil {
		return nil, fmt.Errorf("decoding config/webhook/manifests.yaml: %w", err)
	}
	if len(cfg.Webhooks) == 0 {
		return nil, fmt.Errorf("config/webhook/manifests.yaml holds no mutating webhook")
	}
	return cfg, nil
}
