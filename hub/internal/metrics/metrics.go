// Package metrics defines the hub's Prometheus metrics beyond
// controller-runtime's own, registered on controller-runtime's registry so
// the manager's metrics endpoint serves them.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// HealthShifts counts health shifts, by direction (Degraded,
	// Recovered).
	HealthShifts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_health_shifts_total",
		Help: "Changes of a cluster's share of a MyApp by its health shift, by reason (Degraded, Recovered).",
	}, []string{"namespace", "name", "cluster", "reason"})

	// PlacementChanges counts decisions that changed where replicas run.
	PlacementChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_placement_changes_total",
		Help: "Placement decisions that changed the clusters or replicas of a MyApp.",
	}, []string{"namespace", "name"})

	// Evictions counts clusters replicas were moved away from.
	Evictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_evictions_total",
		Help: "Times a MyApp's replicas were moved away from a cluster, by reason.",
	}, []string{"cluster", "reason"})

	// WorksWritten is the time from the start of a MyApp reconcile that
	// changed Works to the last of them written.
	WorksWritten = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_myapp_works_written_seconds",
		Help:    "Time from the start of a MyApp reconcile to all of its changed Works written.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})

	// MemberClusters is the number of member clusters by readiness.
	MemberClusters = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flotilla_member_clusters",
		Help: "Member clusters by Ready state (true, false, unknown).",
	}, []string{"ready"})

	// WorkStatusWrites counts agent reports by what the status writer did
	// with them.
	WorkStatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_work_status_writes_total",
		Help: "Agent reports by what the Work status writer did: written, unchanged (equal to the status it last wrote, or to the cached status once its cache is known fresh; not written), error, rejected.",
	}, []string{"result"})

	// WorkStatusLatency is, for each report the status writer wrote, the
	// time from its arrival (from an agent's stream or the push engine)
	// until its write returned; WorkStatusWriteDuration is the write
	// alone. Their difference is the report's wait: the linger
	// (--work-status-linger), in the queue, behind a write of the same
	// Work's earlier report.
	WorkStatusLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_work_status_latency_seconds",
		Help:    "Time from a member's status report reaching the Work status writer until its write returned, the linger (--work-status-linger) included (reports written only).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	WorkStatusWriteDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_work_status_write_duration_seconds",
		Help:    "Time the Work status writer's patch of one Work's status took (writes that returned without error).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})

	// WorkStatusDropped counts agent reports the status writer dropped
	// instead of writing, by cluster and what: rejected (the apiserver
	// refused the write with a 4xx other than conflict or throttling, which
	// retrying cannot fix) and buffer_full (the cluster's pending reports
	// reached the writer's byte bound).
	WorkStatusDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_work_status_dropped_total",
		Help: "Agent status reports the hub dropped instead of writing to Work status, by cluster and what (rejected: the apiserver refused the write; buffer_full: the cluster's pending reports reached --member-status-buffer-bytes).",
	}, []string{"cluster", "what"})

	// RolloutsStarted counts Progressive rollouts of a new revision.
	RolloutsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_rollouts_started_total",
		Help: "Progressive rollouts of a new revision started (a superseding revision starts a new one).",
	}, []string{"namespace", "name"})

	// RolloutsCompleted counts rollouts that reached every target cluster.
	RolloutsCompleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_rollouts_completed_total",
		Help: "Progressive rollouts that succeeded in every target cluster.",
	}, []string{"namespace", "name"})

	// RolloutsFailed counts rollouts stopped by too many failed clusters
	// (onFailure Pause).
	RolloutsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_rollouts_failed_total",
		Help: "Progressive rollouts stopped because more clusters failed than maxFailures (onFailure Pause).",
	}, []string{"namespace", "name"})

	// RolloutsRolledBack counts rollouts that failed and were rolled back.
	RolloutsRolledBack = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_rollouts_rolled_back_total",
		Help: "Progressive rollouts that failed and returned the updated clusters to the last good revision.",
	}, []string{"namespace", "name"})

	// RolloutWaveDuration is the time from a wave's start to its last
	// cluster succeeding or failing.
	RolloutWaveDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "flotilla_rollout_wave_duration_seconds",
		Help:    "Time from the start of a rollout wave to its last cluster succeeding or failing.",
		Buckets: []float64{1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
	})

	// RolloutActive is 1 while a MyApp's Progressive rollout progresses.
	RolloutActive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flotilla_rollout_active",
		Help: "1 while a MyApp's Progressive rollout is Progressing (not paused, failed, rolled back or complete), 0 otherwise.",
	}, []string{"namespace", "name"})

	// RolloutPaused is 1 while a rollout stands stopped after failures.
	RolloutPaused = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flotilla_rollout_paused",
		Help: "1 while a MyApp's Progressive rollout is stopped because more clusters failed than maxFailures (phase Failed, onFailure Pause), 0 otherwise.",
	}, []string{"namespace", "name"})

	// RolloutLastProgress is when a rollout last moved.
	RolloutLastProgress = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flotilla_rollout_last_progress_timestamp_seconds",
		Help: "When a MyApp's Progressive rollout last moved (its phase or progress changed, as this hub replica saw it), in seconds since the epoch.",
	}, []string{"namespace", "name"})

	// RolloutWaves counts finished rollout waves by result.
	RolloutWaves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_rollout_waves_total",
		Help: "Rollout waves whose last cluster finished, by result: succeeded, or failed when the rollout failed (or rolled back) in the same step.",
	}, []string{"result"})

	// MyAppStatusWrites counts MyApp status patches by result.
	MyAppStatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_myapp_status_writes_total",
		Help: "MyApp status patches by the hub, by result: success, conflict (computed from a stale MyApp; the newer one is reconciled) or error.",
	}, []string{"result"})

	// HubLeader is 1 on the hub replica that holds the leader Lease.
	HubLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flotilla_hub_leader",
		Help: "1 on the hub replica that holds the leader Lease (it alone reconciles and serves the agents), 0 on the others.",
	})
)

// Collectors are the metrics this package registers on
// controller-runtime's registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{HealthShifts, PlacementChanges, Evictions, WorksWritten, MemberClusters, WorkStatusWrites, WorkStatusLatency, WorkStatusWriteDuration, WorkStatusDropped,
		RolloutsStarted, RolloutsCompleted, RolloutsFailed, RolloutsRolledBack, RolloutWaveDuration,
		RolloutActive, RolloutPaused, RolloutLastProgress, RolloutWaves, MyAppStatusWrites, HubLeader}
}

func init() {
	ctrlmetrics.Registry.MustRegister(Collectors()...)
	for _, r := range []string{"succeeded", "failed"} {
		RolloutWaves.WithLabelValues(r)
	}
	for _, r := range []string{"success", "conflict", "error"} {
		MyAppStatusWrites.WithLabelValues(r)
	}
}

// Results of WorkStatusDropped, the values of its what label.
const (
	DroppedRejected   = "rejected"
	DroppedBufferFull = "buffer_full"
)

// InitCluster starts cluster's per-member counters at zero when the hub
// first hears from its agent, so that their series exist (an alert's
// increase() sees the first drop, and a dashboard shows 0, not nothing).
func InitCluster(cluster string) {
	WorkStatusDropped.WithLabelValues(cluster, DroppedRejected)
	WorkStatusDropped.WithLabelValues(cluster, DroppedBufferFull)
}

// ForgetCluster removes every per-member series of a MemberCluster that
// is gone, so that a fleet whose members come and go does not grow the
// hub's registry (and every scrape) without bound.
func ForgetCluster(cluster string) {
	WorkStatusDropped.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	Evictions.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}

// InitMyApp starts the per-MyApp counters at zero when a MyApp is first
// reconciled by this replica.
func InitMyApp(namespace, name string) {
	PlacementChanges.WithLabelValues(namespace, name)
}

// InitRollout starts the rollout counters of a MyApp at zero when this
// replica first sees it roll out progressively, so that the first failure
// or rollback is an increase an alert sees.
func InitRollout(namespace, name string) {
	for _, c := range []*prometheus.CounterVec{RolloutsStarted, RolloutsCompleted, RolloutsFailed, RolloutsRolledBack} {
		c.WithLabelValues(namespace, name)
	}
}

// ForgetMyApp removes every series of a MyApp that is gone (its gauges
// and its counters).
func ForgetMyApp(namespace, name string) {
	app := prometheus.Labels{"namespace": namespace, "name": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		HealthShifts, PlacementChanges,
		RolloutsStarted, RolloutsCompleted, RolloutsFailed, RolloutsRolledBack,
		RolloutActive, RolloutPaused, RolloutLastProgress,
	} {
		v.DeletePartialMatch(app)
	}
}
