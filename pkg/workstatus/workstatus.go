// Package workstatus reads what a member reported on a Work: whether the
// report is about the Work's current spec, the Deployment numbers it
// carries, and condition text for messages. It is pure; the hub's MyApp
// status aggregation and pkg/rollout share it.
package workstatus

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Observed says whether the member reported on the Work's current spec.
func Observed(w *flotillav1.Work) bool {
	return w != nil && w.Status.ObservedGeneration == w.Generation && w.Generation != 0
}

// Condition returns the Work's condition of type t; nil for a nil Work or
// a condition not reported.
func Condition(w *flotillav1.Work, t string) *metav1.Condition {
	if w == nil {
		return nil
	}
	return meta.FindStatusCondition(w.Status.Conditions, t)
}

// Workload sums the workload numbers of a Work's manifests.
func Workload(w *flotillav1.Work) flotillav1.WorkloadStatus {
	var out flotillav1.WorkloadStatus
	if w == nil {
		return out
	}
	for _, m := range w.Status.Manifests {
		if m.Workload == nil {
			continue
		}
		out.Replicas += m.Workload.Replicas
		out.ReadyReplicas += m.Workload.ReadyReplicas
		out.AvailableReplicas += m.Workload.AvailableReplicas
		out.UpdatedReplicas += m.Workload.UpdatedReplicas
		out.UnavailableReplicas += m.Workload.UnavailableReplicas
	}
	return out
}

// GenerationsObserved says whether the member's controllers observed the
// latest generation of every workload the Work reports.
func GenerationsObserved(w *flotillav1.Work) bool {
	if w == nil {
		return false
	}
	for _, m := range w.Status.Manifests {
		if m.Workload != nil && m.Workload.ObservedGeneration != m.Workload.Generation {
			return false
		}
	}
	return true
}

// ConditionText is "Reason: message", or the reason alone.
func ConditionText(c *metav1.Condition) string {
	if c.Message == "" {
		return c.Reason
	}
	return c.Reason + ": " + c.Message
}
