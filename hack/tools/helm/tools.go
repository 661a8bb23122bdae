//go:build tools

// Package tools pins helm, which renders charts/metalhub in the chart tests.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
