package myapp

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/appstatus"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// The pure rollout logic (revisions, waves, gates, pause and rollback)
// lives in pkg/rollout; this controller computes one rollout.Step per
// reconcile (desired.go), records the step before writing Works
// (write.go), tells its events and metrics (events.go) and reports the
// condition below.

// rolloutCondition is the Progressing condition of a rollout that is not
// complete; ok is false when the aggregated one stands.
func rolloutCondition(st *flotillav1.RolloutStatus, generation int64) (metav1.Condition, bool) {
	c := metav1.Condition{Type: flotillav1.ConditionProgressing, ObservedGeneration: generation, Message: truncate.String(st.Message, appstatus.MaxMessageLength)}
	switch st.Phase {
	case flotillav1.RolloutPhaseProgressing:
		c.Status, c.Reason = metav1.ConditionTrue, flotillav1.ReasonRollingOut
	case flotillav1.RolloutPhasePaused:
		c.Status, c.Reason = metav1.ConditionUnknown, flotillav1.ReasonPaused
	case flotillav1.RolloutPhaseFailed:
		c.Status, c.Reason = metav1.ConditionFalse, flotillav1.ReasonRolloutFailed
	case flotillav1.RolloutPhaseRolledBack:
		c.Status, c.Reason = metav1.ConditionFalse, flotillav1.ReasonRolledBack
	default:
		return c, false
	}
	return c, true
}
