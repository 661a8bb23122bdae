// Package v1alpha1 holds the readiness.metal.ironcore.dev/v1alpha1 API of the IronCore stack's
// metal-maintenance-operator, as far as metalhub serves it: ServerWiring, the LLDP neighbours
// and link state each NIC of a server is expected to see (docs/servers.md, "Wiring").
//
// It holds wire types only, with defaults and validation as markers, and the condition type and
// reasons the wiring controller writes: no logic, and no import of metalhub.
//
// +kubebuilder:object:generate=true
// +groupName=readiness.metal.ironcore.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "readiness.metal.ironcore.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
