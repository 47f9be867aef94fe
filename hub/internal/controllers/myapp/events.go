package myapp

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/rollout"
)

// recordPlacementChange emits events and counts the change.
func (r *Reconciler) recordPlacementChange(app *flotillav1.MyApp, before, after *flotillav1.PlacementDecision) {
	metrics.PlacementChanges.WithLabelValues(app.Namespace, app.Name).Inc()
	prevEvicted := map[string]bool{}
	prevTargets := map[string]bool{}
	if before != nil {
		for _, e := range before.Evicted {
			prevEvicted[e.Name] = true
		}
		for _, c := range before.Clusters {
			prevTargets[c.Name] = true
		}
	}
	for _, e := range after.Evicted {
		if !prevEvicted[e.Name] {
			metrics.Evictions.WithLabelValues(e.Name, e.Reason).Inc()
			r.event(app, corev1.EventTypeWarning, flotillav1.ReasonFailedOver, "Evict",
				"moved %d replicas away from cluster %s (%s)", e.Replicas, e.Name, e.Reason)
		}
	}
	for _, c := range after.Clusters {
		if prevEvicted[c.Name] && !prevTargets[c.Name] {
			r.event(app, corev1.EventTypeNormal, "FailedBack", "Failback",
				"cluster %s is Ready again: %d replicas returned", c.Name, c.Replicas)
		}
	}
	parts := make([]string, 0, len(after.Clusters))
	for _, c := range after.Clusters {
		parts = append(parts, fmt.Sprintf("%s=%d", c.Name, c.Replicas))
	}
	msg := "placed replicas: " + strings.Join(parts, ", ")
	if len(after.Clusters) > 0 && after.Clusters[0].Reason == flotillav1.TargetReasonKeptAtZero {
		msg += " (scaled to zero: the Works are kept at 0 replicas)"
	}
	r.event(app, corev1.EventTypeNormal, flotillav1.ReasonScheduled, "Schedule", "%s", msg)
}

func (r *Reconciler) event(app *flotillav1.MyApp, typ, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(app, nil, typ, reason, action, format, args...)
	}
}

// exportMetrics publishes the per-cluster replica gauges.
func (r *Reconciler) exportMetrics(app *flotillav1.MyApp, clusters []flotillav1.ClusterAppStatus) {
	r.clearMetrics(app)
	for _, c := range clusters {
		metrics.MyAppReplicas.WithLabelValues(app.Namespace, app.Name, c.Name, "assigned").Set(float64(c.Assigned))
		metrics.MyAppReplicas.WithLabelValues(app.Namespace, app.Name, c.Name, "ready").Set(float64(c.ReadyReplicas))
	}
}

func (r *Reconciler) clearMetrics(app *flotillav1.MyApp) {
	metrics.MyAppReplicas.DeletePartialMatch(map[string]string{"namespace": app.Namespace, "name": app.Name})
	metrics.TrafficWeight.DeletePartialMatch(map[string]string{"namespace": app.Namespace, "name": app.Name})
}

// recordShifts emits an event per health shift and counts them.
func (r *Reconciler) recordShifts(app *flotillav1.MyApp, res *placement.ShiftResult) {
	for _, sh := range res.Shifts {
		metrics.HealthShifts.WithLabelValues(app.Namespace, app.Name, sh.Cluster, sh.Reason).Inc()
		if sh.Reason == flotillav1.ReasonHealthDegraded {
			r.event(app, corev1.EventTypeWarning, sh.Reason, "HealthShift", "cluster %s: signal %s is %s, above its threshold: share cut from %d%% to %d%% of the app",
				sh.Cluster, sh.Signal, sh.Value, sh.FromPercent, sh.ToPercent)
		} else {
			r.event(app, corev1.EventTypeNormal, sh.Reason, "HealthShift", "cluster %s: signals OK for the recovery window: share raised from %d%% to %d%% of the app",
				sh.Cluster, sh.FromPercent, sh.ToPercent)
		}
	}
}

// exportTraffic publishes the traffic weights.
func (r *Reconciler) exportTraffic(app *flotillav1.MyApp, res *placement.ShiftResult) {
	for _, c := range res.Status.Clusters {
		metrics.TrafficWeight.WithLabelValues(app.Namespace, app.Name, c.Name).Set(float64(c.Weight))
	}
}

// recordRollout emits the step's events and counts it.
func (r *Reconciler) recordRollout(app *flotillav1.MyApp, res *rollout.Result) {
	for _, e := range res.Events {
		r.event(app, e.Type, e.Reason, "Rollout", "%s", e.Message)
	}
	ns, name := app.Namespace, app.Name
	if res.Started && res.Status.TargetRevision != res.Status.CurrentRevision {
		metrics.RolloutsStarted.WithLabelValues(ns, name).Inc()
	}
	if res.Completed {
		metrics.RolloutsCompleted.WithLabelValues(ns, name).Inc()
	}
	if res.Failed {
		metrics.RolloutsFailed.WithLabelValues(ns, name).Inc()
	}
	if res.RolledBack {
		metrics.RolloutsRolledBack.WithLabelValues(ns, name).Inc()
	}
	for _, d := range res.WaveDurations {
		metrics.RolloutWaveDuration.Observe(d.Seconds())
	}
}
