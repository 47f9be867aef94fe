package works

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// QueueMetrics are the Controller's workqueue metrics under the names and
// labels controller-runtime gives its queues (workqueue_depth,
// workqueue_adds_total, ...; name and controller both the queue's name),
// so dashboards and alerts written for those read the agent's "work"
// queue as they did while it ran on controller-runtime. They are a
// provider for this Controller's queue only, not client-go's global one.
type QueueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = (*QueueMetrics)(nil)

// NewQueueMetrics returns the metrics, unregistered.
func NewQueueMetrics() *QueueMetrics {
	labels := []string{"name", "controller"}
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	return &QueueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "depth",
			Help: "Current depth of workqueue by workqueue and priority"}, append(labels, "priority")),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "adds_total",
			Help: "Total number of adds handled by workqueue"}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "queue_duration_seconds",
			Help: "How long in seconds an item stays in workqueue before being requested", Buckets: buckets}, labels),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "workqueue", Name: "work_duration_seconds",
			Help: "How long in seconds processing an item from workqueue takes.", Buckets: buckets}, labels),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "unfinished_work_seconds",
			Help: "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases."}, labels),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "workqueue", Name: "longest_running_processor_seconds",
			Help: "How many seconds has the longest running processor for workqueue been running."}, labels),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "workqueue", Name: "retries_total",
			Help: "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)"}, labels),
	}
}

// Collectors are the metrics, to register.
func (m *QueueMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.depth, m.adds, m.latency, m.work, m.unfinished, m.longest, m.retries}
}

func (m *QueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name, name, "")
}

func (m *QueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name, name)
}

func (m *QueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name, name)
}

func (m *QueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.work.WithLabelValues(name, name)
}

func (m *QueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name, name)
}

func (m *QueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name, name)
}

func (m *QueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name, name)
}
