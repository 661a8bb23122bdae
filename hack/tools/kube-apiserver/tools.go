//go:build tools

// Package tools pins the Kubernetes control-plane binaries built for envtest and `metalhub dev`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
