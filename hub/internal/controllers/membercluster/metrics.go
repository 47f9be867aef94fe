package membercluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// pruneBlocked is 1 per member while its agent's deletion brake holds
	// a prune, waiting for a confirmation.
	pruneBlocked = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flotilla_prune_blocked",
		Help: "1 while a member's agent holds a prune with its deletion brake, waiting for an admin's confirmation (annotation flotilla.dev/confirm-prune on the MemberCluster); 0 otherwise.",
	}, []string{"cluster"})
	// fleetMismatch is 1 per member while its agent refuses this hub.
	fleetMismatch = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flotilla_member_fleet_mismatch",
		Help: "1 while a member's agent refuses this hub because it serves another fleet (hub) or cluster name, and so applies nothing from it; 0 otherwise.",
	}, []string{"cluster"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(pruneBlocked, fleetMismatch)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collectors are the metrics this package registers on
// controller-runtime's registry at init, and a HeartbeatCollector (which
// a hub registers with its Tracker), for the metrics reference.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{pruneBlocked, fleetMismatch, partitionBrakeActive, evictionsWaiting, &HeartbeatCollector{}}
}

var heartbeatAgeDesc = prometheus.NewDesc("flotilla_member_heartbeat_age_seconds",
	"Seconds since the hub (this replica, the leader) last heard from a member: its agent's last heartbeat or stream start, or the hub's last reach of a Push member's apiserver. Absent for members never heard from since this replica became leader, and for members deleted.",
	[]string{"cluster"}, nil)

// HeartbeatCollector exports flotilla_member_heartbeat_age_seconds from
// the Tracker, computed at each scrape.
type HeartbeatCollector struct {
	Tracker *Tracker
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

func (c *HeartbeatCollector) Describe(ch chan<- *prometheus.Desc) { ch <- heartbeatAgeDesc }

func (c *HeartbeatCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Tracker == nil {
		return
	}
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	for cluster, last := range c.Tracker.heartbeats() {
		ch <- prometheus.MustNewConstMetric(heartbeatAgeDesc, prometheus.GaugeValue, max(now.Sub(last).Seconds(), 0), cluster)
	}
}

// MetricTypes says the type of the metric the collector exports
// (hack/metricsdoc).
func (c *HeartbeatCollector) MetricTypes() map[string]prometheus.ValueType {
	return map[string]prometheus.ValueType{"flotilla_member_heartbeat_age_seconds": prometheus.GaugeValue}
}
