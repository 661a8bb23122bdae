package registry

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of a report, the label of reportsTotal.
const (
	resultAccepted      = "accepted"       // written; the round is now reported
	resultDuplicate     = "duplicate"      // the round was already reported; nothing written
	resultMalformed     = "malformed"      // 400: not JSON, or fails validation
	resultUnauthorized  = "unauthorized"   // 401: no, wrong, or stale token
	resultUnknownServer = "unknown_server" // 404: no Server with the UUID
	resultAmbiguous     = "ambiguous"      // 409: several Servers claim the UUID
	resultWrongMachine  = "wrong_machine"  // 403: the report's DMI system UUID is not the Server's
	resultTooLarge      = "too_large"      // 413
	resultError         = "error"          // 503: the API server failed us
)

var reportsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "metalhub_discovery_reports_total",
	Help: "Discovery reports received by the registry, by result (accepted, duplicate, malformed, unauthorized, unknown_server, ambiguous, wrong_machine, too_large, error).",
}, []string{"result"})

var cleaningReportsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "metalhub_cleaning_reports_total",
	Help: "Cleaning reports received by the registry, by result (accepted, duplicate, malformed, unauthorized, unknown_server, ambiguous, wrong_machine, too_large, error).",
}, []string{"result"})

func init() {
	// Served on the manager's /metrics endpoint. Every result starts at 0 so that rate() and
	// alerts on rejects work before the first reject.
	for _, r := range []string{resultAccepted, resultDuplicate, resultMalformed, resultUnauthorized,
		resultUnknownServer, resultAmbiguous, resultWrongMachine, resultTooLarge, resultError} {
		reportsTotal.WithLabelValues(r)
		cleaningReportsTotal.WithLabelValues(r)
	}
	metrics.Registry.MustRegister(reportsTotal, cleaningReportsTotal)
}
