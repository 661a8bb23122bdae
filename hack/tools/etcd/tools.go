//go:build tools

// Package tools pins the etcd server built for envtest and `metalhub dev`.
package tools

import _ "go.etcd.io/etcd/server/v3"
