// Package sealing owns the proof the admission webhook leaves on what it admitted: the seal
// annotation (an HMAC keyed by a Secret in the operator's namespace, seal.go) and the check
// that the webhooks are in force for both delivery kinds (webhookguard.go). The reconcilers
// trust a writer-chosen ServiceAccount, kubeconfig or credentials Secret only where a seal
// verifies; the webhook (internal/webhook/rights) writes the seals.
//
// It judges no rights itself (that is internal/webhook/rights) and imports only manifests of
// the family: never the reconcilers, target, apply or the webhook.
package sealing
