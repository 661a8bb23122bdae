// Package rights is the admission webhook's judge of the delivery kinds: with the rights of
// whoever writes an InfrahubSync or a VidraResource (SubjectAccessReviews), it decides what the
// write may make the operator do (Admission.CheckSync, CheckResource), binds a sync to the
// credentials Secret its writer may read (binding.go), counts objects per writer (quota.go) and
// seals what it admitted (admission_seal.go, through delivery/sealing).
//
// Only the webhook uses it; the reconcilers never import it, they trust the seals it leaves
// (delivery/sealing). It imports delivery (Options), target, apply and sealing, and nothing of
// internal/webhook.
package rights
