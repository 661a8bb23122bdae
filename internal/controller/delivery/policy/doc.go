// Package policy owns what the admin allows and bounds: the kinds and namespaces an artifact
// may hold (Policy), what one sync may cost everyone else (Limits: artifacts, bytes, writes,
// pass time; the per-host gate of fairness.go) and the settings ConfigMap that overrides the
// flags (Settings).
//
// It decides and reports; it applies nothing and reaches no cluster. It imports only
// manifests of the family.
package policy
