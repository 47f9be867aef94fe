package push

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the push engine's: per Push member, whether its apiserver
// answers, and the applies the engine made (a resumed leader makes none
// for unchanged Works).
type Metrics struct {
	up      *prometheus.GaugeVec
	applies *prometheus.CounterVec
}

// MetricCollectors are the metrics NewMetrics registers, for the metrics
// reference (hack/metricsdoc): fresh ones, registered nowhere.
func MetricCollectors() []prometheus.Collector {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	return []prometheus.Collector{m.up, m.applies}
}

// NewMetrics registers the push engine's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flotilla_push_member_up",
			Help: "1 while the hub reaches the Push member's apiserver, 0 when it lost it; absent while not engaged.",
		}, []string{"cluster"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_push_applies_total",
			Help: "Applies of a Work to a Push member by the hub, by result (a Work that did not change or drift is not applied).",
		}, []string{"cluster", "result"}),
	}
	for _, c := range []prometheus.Collector{m.up, m.applies} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) applied(cluster string, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.applies.WithLabelValues(cluster, result).Inc()
}

func (m *Metrics) setUp(cluster string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.up.WithLabelValues(cluster).Set(v)
}

func (m *Metrics) forget(cluster string) {
	if m == nil {
		return
	}
	m.up.DeleteLabelValues(cluster)
}
