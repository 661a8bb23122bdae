// Package manifests owns what the delivery family reads from a VidraResource and the marks it
// writes on objects: decoding spec.manifest (multi-document YAML, JSON or a v1 List), its
// digests, the manager's cache of VidraResources without their manifest (CacheByObject;
// manifests.Of reads one live), and the labels, annotations and field manager of the family
// (names.go).
//
// It is the bottom layer of the family: it imports no other delivery package and knows
// nothing of clusters, seals or reconcilers.
package manifests
