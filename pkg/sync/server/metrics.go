package server

import (
	"errors"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Message type label values, one per oneof case of the protocol.
const (
	msgHello            = "hello"
	msgStatus           = "status"
	msgHeartbeat        = "heartbeat"
	msgUpsert           = "upsert"
	msgDelete           = "delete"
	msgOrphan           = "orphan"
	msgSnapshotComplete = "snapshot_complete"
	msgHubHello         = "hub_hello"
	msgPruneConfirm     = "prune_confirm"
	msgRefusal          = "refusal"
	msgPruneBlocked     = "prune_blocked"
	msgSnapshotPruned   = "snapshot_pruned"
	msgWorkGone         = "work_gone"
)

type metrics struct {
	connected     prometheus.Gauge
	received      *prometheus.CounterVec
	sent          *prometheus.CounterVec
	queueDepth    *prometheus.GaugeVec
	sendLatency   prometheus.Histogram
	queueWait     prometheus.Histogram
	streamsClosed *prometheus.CounterVec
	// deletionsPending is written only under Server.mu, by the cluster's
	// current stream (see session.setDeletesWaiting).
	deletionsPending *prometheus.GaugeVec
	// perCluster holds the per-cluster counters: Works orphaned, and what
	// the limits on agent input cut (see clampStatus, statusPacer,
	// connectLimiter).
	perCluster *clusterCounters
}

// MetricCollectors are the metrics a Server registers, for the metrics
// reference (hack/metricsdoc): fresh ones, registered nowhere.
func MetricCollectors() []prometheus.Collector {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	return m.collectors()
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.connected, m.received, m.sent, m.queueDepth, m.sendLatency, m.queueWait, m.streamsClosed, m.deletionsPending, m.perCluster}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "flotilla_sync_connected_agents",
			Help: "Number of member clusters whose agent holds a sync stream.",
		}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_sync_messages_received_total",
			Help: "Messages received from agents, by type.",
		}, []string{"type"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_sync_messages_sent_total",
			Help: "Messages sent to agents, by type.",
		}, []string{"type"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flotilla_sync_queue_depth",
			Help: "Changed Works waiting to be sent to a cluster's agent (coalesced per Work).",
		}, []string{"cluster"}),
		sendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flotilla_sync_send_latency_seconds",
			Help:    "Time to hand one message to an agent's stream; long times mean the agent or its network is not keeping up and HTTP/2 flow control is pushing back.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "flotilla_sync_queue_wait_seconds",
			Help:    "Time from a Work change being queued for an agent to its message being sent.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		streamsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flotilla_sync_streams_closed_total",
			Help: "Sync streams that ended, by gRPC status code (including those refused before they started).",
		}, []string{"code"}),
		deletionsPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flotilla_sync_deletions_pending",
			Help: "WorkDeletes for a cluster's agent that wait for the per-member delete rate limit (the hub's --member-delete-rate and --member-delete-burst); above zero for long means the hub is deleting much more than usual on that member.",
		}, []string{"cluster"}),
		perCluster: newClusterCounters(
			prometheus.NewDesc("flotilla_sync_works_orphaned_total",
				"Works that vanished from the hub without the deletion-intent annotation, whose member objects the agent was told to keep running (WorkOrphan), by cluster.",
				[]string{"cluster"}, nil),
			prometheus.NewDesc("flotilla_sync_connects_limited_total",
				"Streams refused with RESOURCE_EXHAUSTED because their cluster opened streams faster than the hub's --member-connect-rate allows, by cluster.",
				[]string{"cluster"}, nil),
			prometheus.NewDesc("flotilla_sync_status_clamped_total",
				"Parts of agents' status reports the hub dropped or clamped before they reached Work status, by cluster and what ("+strings.Join(clampWhats[:], ", ")+"). An honest agent causes none but work_unknown, for a Work deleted while it reported.",
				[]string{"cluster", "what"}, nil)),
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				return nil, errors.New("sync server metrics are already registered on this registerer; give each server its own")
			}
			return nil, err
		}
	}
	return m, nil
}

// initCluster starts cluster's counters at zero when its agent's stream
// is accepted, so that their series exist before the first increment (an
// alert's increase() sees the first one).
func (m *metrics) initCluster(cluster string) { m.perCluster.init(cluster) }

// forgetCluster removes cluster's counters: its MemberCluster is gone, so
// a fleet whose members come and go does not grow the registry. (Its
// gauges go when its stream ends.)
func (m *metrics) forgetCluster(cluster string) { m.perCluster.forget(cluster) }
