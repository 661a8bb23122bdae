package flash

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/metalhub/metalhub/internal/controller/firmware/record"
)

var (
	// upgradesTotal counts upgrades (and failed attempts) as they end, by kind and outcome.
	upgradesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalhub_firmware_upgrades_total",
		Help: "Firmware upgrades ended, by kind and outcome (completed, failed, retried).",
	}, []string{"kind", "outcome"})
	// taskDuration is how long the BMCs' update tasks ran, from acceptance to their end.
	taskDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metalhub_firmware_task_duration_seconds",
		Help:    "Duration of firmware update tasks on the BMCs, from acceptance to their end.",
		Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 1200, 2400, 3600},
	}, []string{"kind"})
)

func init() { ctrlmetrics.Registry.MustRegister(upgradesTotal, taskDuration) }

// UpgradesFinished counts an upgrade that ended or an attempt that failed.
func UpgradesFinished(kind string, rec record.Record) {
	switch rec.Phase {
	case record.PhaseCompleted:
		upgradesTotal.WithLabelValues(kind, "completed").Inc()
	case record.PhaseFailed:
		upgradesTotal.WithLabelValues(kind, "failed").Inc()
	default:
		upgradesTotal.WithLabelValues(kind, "retried").Inc()
	}
}
