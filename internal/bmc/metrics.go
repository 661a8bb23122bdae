package bmc

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of one HTTP exchange with a BMC, the result label of requestsTotal.
const (
	resultOK          = "2xx"
	resultClientError = "4xx" // includes 401 before a re-login
	resultServerError = "5xx"
	resultError       = "error" // no answer: refused, timed out, TLS, reset
)

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "metalhub_bmc_requests_total",
		Help: "HTTP exchanges with a BMC (its base URL), by result: 2xx, 4xx, 5xx, or error (no answer).",
	}, []string{"bmc", "result"})
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "metalhub_bmc_request_duration_seconds",
		Help:    "Duration of HTTP exchanges with a BMC (its base URL), answered or not, excluding the wait for a free slot.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"bmc"})
	unreachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "metalhub_bmc_unreachable",
		Help: "1 while requests to a BMC (its base URL) fail fast after a transport failure (no connection, no answer in time), else 0.",
	}, []string{"bmc"})
)

func init() {
	metrics.Registry.MustRegister(requestsTotal, requestDuration, unreachable)
}

// initMetrics starts a BMC's series at 0, so error ratios and alerts work before the first error.
func initMetrics(base string) {
	for _, r := range []string{resultOK, resultClientError, resultServerError, resultError} {
		requestsTotal.WithLabelValues(base, r)
	}
	requestDuration.WithLabelValues(base)
	unreachable.WithLabelValues(base).Set(0)
}

// observe records one exchange.
func observe(base string, start time.Time, resp *http.Response, err error) {
	requestDuration.WithLabelValues(base).Observe(time.Since(start).Seconds())
	result := resultError
	if err == nil && resp != nil {
		switch c := resp.StatusCode; {
		case c < 400:
			result = resultOK
		case c < 500:
			result = resultClientError
		default:
			result = resultServerError
		}
	}
	requestsTotal.WithLabelValues(base, result).Inc()
}
