package setup

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flotilla-dev/flotilla/agent/join"
	"github.com/flotilla-dev/flotilla/internal/promreg"
	"github.com/flotilla-dev/flotilla/internal/reexec"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/works"
)

// Result label values of the agent's apply, prune and repair counters.
const (
	resultSuccess = "success"
	resultError   = "error"
	// resultBlocked is a prune the deletion brake holds for an admin's
	// confirmation.
	resultBlocked = "blocked"
)

// agentMetrics are the agent's own metrics beyond controller-runtime's
// and agent/join's. Counters and the histogram are updated as things
// happen; the stream, queue and Works figures are read from the sync
// client and the Work store at each scrape (stateCollector).
type agentMetrics struct {
	applyDuration prometheus.Histogram
	applies       *prometheus.CounterVec
	prunes        *prometheus.CounterVec
	driftRepairs  *prometheus.CounterVec
	leader        prometheus.Gauge
	state         *stateCollector
}

func newAgentMetrics() *agentMetrics {
	m := &agentMetrics{
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flotilla_agent_apply_duration_seconds",
			Help:    "Time to apply one Work to the member cluster (server-side apply of all its objects), whether sent by the hub or repaired by the agent.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_agent_applies_total",
			Help: "Applies of Works the hub sent (new or changed), by result (success, error; an error is retried with backoff).",
		}, []string{"result"}),
		prunes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_agent_prunes_total",
			Help: "Prunes after a complete snapshot (deleting the objects of Works the hub no longer sends), by result: success, error (retried) or blocked (the deletion brake holds it until an admin confirms).",
		}, []string{"result"}),
		driftRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_agent_drift_repairs_total",
			Help: "Re-applies by the agent's Work reconciler of a Work whose objects drifted from what it applied (or whose last apply failed), by result (success, error).",
		}, []string{"result"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flotilla_agent_leader",
			Help: "1 on the agent replica that holds the leader Lease (it alone runs the stream and applies), 0 on the others.",
		}),
		state: &stateCollector{},
	}
	for _, r := range []string{resultSuccess, resultError} {
		m.applies.WithLabelValues(r)
		m.driftRepairs.WithLabelValues(r)
	}
	for _, r := range []string{resultSuccess, resultError, resultBlocked} {
		m.prunes.WithLabelValues(r)
	}
	return m
}

func (m *agentMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.applyDuration, m.applies, m.prunes, m.driftRepairs, m.leader, m.state}
}

// register registers m, agent/join's metrics and the lost-lease restarts
// with reg.
// Another agent's metrics already there (tests run several agents in one
// process) are replaced: the newest agent is the one they describe.
func (m *agentMetrics) register(reg prometheus.Registerer) error {
	return promreg.Replace(reg, append(append(m.collectors(), join.Collectors()...), reexec.Collectors()...)...)
}

// MetricCollectors are the agent's own metrics as a process registers
// them (those of agent/join included), for the metrics reference
// (hack/metricsdoc). Their Describe works; they hold no agent.
func MetricCollectors() []prometheus.Collector {
	return append(append(newAgentMetrics().collectors(), join.Collectors()...), reexec.Collectors()...)
}

// observeApply is the Work store's ApplyObserver.
func (m *agentMetrics) observeApply(repair bool, took time.Duration, err error) {
	m.applyDuration.Observe(took.Seconds())
	result := resultSuccess
	if err != nil {
		result = resultError
	}
	if repair {
		m.driftRepairs.WithLabelValues(result).Inc()
	} else {
		m.applies.WithLabelValues(result).Inc()
	}
}

// observedStore is the Work store as the sync client sees it, counting
// prunes by result.
type observedStore struct {
	// The Store, noting when the hub refuses this agent (readyz.go).
	*standDownRecorder
	m *agentMetrics
}

func (s observedStore) SnapshotComplete(ctx context.Context, keep []string, confirmed bool) error {
	err := s.standDownRecorder.SnapshotComplete(ctx, keep, confirmed)
	var blocked *apply.PruneBlockedError
	switch {
	case err == nil:
		s.m.prunes.WithLabelValues(resultSuccess).Inc()
	case errors.As(err, &blocked):
		s.m.prunes.WithLabelValues(resultBlocked).Inc()
	case ctx.Err() == nil:
		s.m.prunes.WithLabelValues(resultError).Inc()
	}
	return err
}

var (
	_ syncclient.Applier = observedStore{}
	_ syncclient.Stander = observedStore{}
)

// leaderGauge sets flotilla_agent_leader to 1 while this replica leads:
// the manager starts it only once the replica is elected (or at once
// without leader election), and a replica that loses its lease exits.
type leaderGauge struct{ g prometheus.Gauge }

func (l leaderGauge) NeedLeaderElection() bool { return true }

func (l leaderGauge) Start(ctx context.Context) error {
	l.g.Set(1)
	<-ctx.Done()
	l.g.Set(0)
	return nil
}

var (
	streamUpDesc = prometheus.NewDesc("flotilla_agent_stream_up",
		"1 while this agent replica (the leader) holds an accepted sync stream to the hub, 0 otherwise.", nil, nil)
	reconnectsDesc = prometheus.NewDesc("flotilla_agent_stream_reconnects_total",
		"Sync streams this agent opened to the hub after its first one (after a drop, a hub failover or a refusal).", nil, nil)
	snapshotsDesc = prometheus.NewDesc("flotilla_agent_snapshots_total",
		"Streams whose snapshot completed while the agent held no Works, so the hub sent every Work (a first connect, or a member that lost its records).", nil, nil)
	resumesDesc = prometheus.NewDesc("flotilla_agent_resumes_total",
		"Streams whose snapshot completed after the agent said which Works it held, so the hub sent only what is new or changed to it.", nil, nil)
	queueDepthDesc = prometheus.NewDesc("flotilla_agent_queue_depth",
		"Works whose latest status report waits to be sent to the hub (coalesced per Work); it grows while the stream is down.", nil, nil)
	worksHeldDesc = prometheus.NewDesc("flotilla_agent_works_held",
		"Works this agent replica applies and reconciles now (0 on a replica that is not the leader).", nil, nil)
)

// stateCollector reads the sync client's state and the Work store at
// each scrape.
type stateCollector struct {
	client *syncclient.Client
	store  *works.Store
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{streamUpDesc, reconnectsDesc, snapshotsDesc, resumesDesc, queueDepthDesc, worksHeldDesc} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.client == nil || c.store == nil {
		return
	}
	st := c.client.State()
	up := 0.0
	if st.Connected {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(streamUpDesc, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(reconnectsDesc, prometheus.CounterValue, float64(max(st.Connects-1, 0)))
	ch <- prometheus.MustNewConstMetric(snapshotsDesc, prometheus.CounterValue, float64(st.Snapshots))
	ch <- prometheus.MustNewConstMetric(resumesDesc, prometheus.CounterValue, float64(st.Resumes))
	ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(st.PendingReports))
	ch <- prometheus.MustNewConstMetric(worksHeldDesc, prometheus.GaugeValue, float64(len(c.store.Names())))
}

// MetricTypes says the type of each metric the collector exports, which
// its descriptions do not (hack/metricsdoc).
func (c *stateCollector) MetricTypes() map[string]prometheus.ValueType {
	return map[string]prometheus.ValueType{
		"flotilla_agent_stream_up":               prometheus.GaugeValue,
		"flotilla_agent_stream_reconnects_total": prometheus.CounterValue,
		"flotilla_agent_snapshots_total":         prometheus.CounterValue,
		"flotilla_agent_resumes_total":           prometheus.CounterValue,
		"flotilla_agent_queue_depth":             prometheus.GaugeValue,
		"flotilla_agent_works_held":              prometheus.GaugeValue,
	}
}
