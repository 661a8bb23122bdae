// Package rollout is the controller of the four *Set kinds (BIOSVersionSet, BIOSSettingsSet,
// BMCVersionSet, BMCSettingsSet): one generic SetReconciler rolls a set out over the targets it
// selects in waves (canary, maxUnavailable, failure threshold, pause), one per-target object
// each, planned from those objects' records, never from status. It only creates and deletes the
// per-target objects: it must not import their controllers (version, settings) nor the assembly.
package rollout
