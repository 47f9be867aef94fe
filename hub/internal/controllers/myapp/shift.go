package myapp

import (
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// healthShift applies the app's spec.placement.healthShift to decision,
// the scheduler's split: the effective decision the Works are rendered
// from (decision itself without a policy) and the shift's result (nil
// without a policy). decision stays as it is, and stays what
// status.placement records, so the scheduler always starts from the
// normal split.
func healthShift(s *scope, decision *flotillav1.PlacementDecision) (*flotillav1.PlacementDecision, *placement.ShiftResult) {
	app := s.app
	hs := app.Spec.Placement.HealthShift
	if hs == nil && app.Spec.Traffic != nil && app.Spec.Traffic.HTTPRoute != nil {
		// No shift, but a route to keep in step with the normal split: a
		// policy without signals never cuts a cluster.
		hs = &flotillav1.HealthShift{}
	}
	if hs == nil || len(decision.Clusters) == 0 {
		return decision, nil
	}
	signals := make(map[string]placement.ClusterSignals, len(decision.Clusters))
	for _, tc := range decision.Clusters {
		if w := s.works[tc.Name]; w != nil {
			signals[tc.Name] = w.Status.Health
		}
	}
	rs := app.Spec.Placement.ReplicaScheduling
	res := placement.Shift(placement.ShiftInput{
		Policy:   hs,
		Divided:  rs != nil && rs.ReplicaSchedulingType == flotillav1.ReplicaSchedulingDivided,
		Normal:   decision.Clusters,
		Signals:  signals,
		Room:     placement.ShiftRoom(app, s.clusters.list),
		Previous: app.Status.Traffic,
		Now:      s.now,
	})
	effective := decision.DeepCopy()
	effective.Clusters = res.Clusters
	return effective, &res
}
