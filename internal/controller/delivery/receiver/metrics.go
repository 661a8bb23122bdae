package receiver

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalhub_infrahub_webhook_deliveries_total",
		Help: "Infrahub webhook deliveries by result: accepted, ignored (not an artifact event), unsigned, bad_signature, stale, replayed, malformed, no_key.",
	}, []string{"result"})
	wakes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "metalhub_infrahub_webhook_wakes_total",
		Help: "InfrahubSyncs woken by Infrahub webhook deliveries.",
	})
	coalesced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "metalhub_infrahub_webhook_wakes_skipped_total",
		Help: "Wakes not made because the sync had already delivered every checksum the events named.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(deliveries, wakes, coalesced)
	for _, r := range []string{"accepted", "ignored", "unsigned", "bad_signature", "stale", "replayed", "malformed", "no_key"} {
		deliveries.WithLabelValues(r)
	}
}
