// Package v1alpha1 holds the infrahub.operators.com/v1alpha1 API: the same group, kinds and field
// names as the Vidra operator, so that existing InfrahubSync manifests keep working.
//
// It holds wire types only, with defaults and validation as markers: no logic, and no import of a
// metalhub package.
//
// +kubebuilder:object:generate=true
// +groupName=infrahub.operators.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "infrahub.operators.com", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
