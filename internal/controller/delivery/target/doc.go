// Package target owns how the delivery family reaches where it writes: a destination
// cluster (this one, or a remote one through the kubeconfig Secret that names the object:
// clusters.go, with its own RESTMapper, metadata watches and drift tokens: target.go), the
// identity it acts as there (the operator or an impersonated ServiceAccount, only where
// admission sealed it: identity.go), the Infrahub credentials Secret of a sync
// (credentials.go, plainhttp.go) and how Secrets are found by host label (secrets.go).
//
// It applies, prunes and judges nothing: apply writes through a Target, the reconcilers
// choose one. It imports manifests and sealing of the family, never apply, policy, the
// reconcilers or the webhook.
package target
