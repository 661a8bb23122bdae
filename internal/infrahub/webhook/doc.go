// Package webhook verifies and produces the signatures of Infrahub's standard webhooks.
//
// Infrahub signs "<webhook-id>.<webhook-timestamp>.<payload>" with HMAC-SHA256 keyed by the
// webhook's shared key and sends it base64-encoded as "v1,<signature>" in webhook-signature,
// the Standard Webhooks headers. The payload it signs is not the body it sends: it signs
// Python's rendering of the payload (json.dumps with default or, newest, compact separators;
// str() of the dict in early versions) while the body is httpx's compact JSON with raw UTF-8. Verify renders the body again in each style and accepts any match.
package webhook
