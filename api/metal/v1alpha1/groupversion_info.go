// Package v1alpha1 holds the metal.ironcore.dev/v1alpha1 API: the same group, kinds and field
// names as the IronCore metal-operator, so that its manifests, tools and the IronCore
// boot-operator work against metalhub unchanged.
//
// It holds wire types only (and BMCSecret's accessors of its own data), with defaults and
// validation as markers: no controller logic, and no import of a metalhub package.
//
// +kubebuilder:object:generate=true
// +groupName=metal.ironcore.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "metal.ironcore.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
