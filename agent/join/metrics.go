package join

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Results of a renewal, the values of renewals' result label.
const (
	resultIssued = "issued"
	resultDenied = "denied"
	resultError  = "error"
)

var (
	renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_agent_certificate_renewals_total",
		Help: "Renewals of the agent's client certificate, by result: issued, denied (the hub refused it) or error (the hub could not be reached, or storing it failed).",
	}, []string{"result"})
	expiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flotilla_agent_certificate_expiry_timestamp_seconds",
		Help: "When the agent's current client certificate expires, in seconds since the epoch; 0 while it has none from the join flow.",
	})
)

func init() {
	for _, r := range []string{resultIssued, resultDenied, resultError} {
		renewals.WithLabelValues(r)
	}
}

// Collectors are this package's metrics, which the agent registers on
// the registry its /metrics serves; the metrics reference lists them.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{renewals, expiry}
}
