package membercluster

import (
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
