//go:build tools

// Package tools pins promtool, which unit-tests the Prometheus alert rules in config/prometheus.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
