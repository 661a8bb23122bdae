// Package v1alpha1 holds the baseboard.metal.ironcore.dev/v1alpha1 API of the IronCore stack's
// metal-maintenance-operator, served by metalhub field for field: BMC firmware versions per BMC
// and their sets over a label selector, with rollout fields of metalhub's own.
//
// It holds wire types only, with defaults and validation as markers: no logic, and no import of
// metalhub beyond the other api groups.
//
// +kubebuilder:object:generate=true
// +groupName=baseboard.metal.ironcore.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "baseboard.metal.ironcore.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
