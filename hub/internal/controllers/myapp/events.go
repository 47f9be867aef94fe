package myapp

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

// exportMetrics starts the MyApp's counters; its per-cluster series are
// exported at scrape time from its status (metrics.AppSeries).
func (r *Reconciler) exportMetrics(app *flotillav1.MyApp) {
	metrics.InitMyApp(app.Namespace, app.Name)
}

// clearAppMetrics removes every series of a MyApp that is gone, its
// counters too.
func (r *Reconciler) clearAppMetrics(app *flotillav1.MyApp) {
	metrics.ForgetMyApp(app.Namespace, app.Name)
	r.rolloutSeen.Delete(types.NamespacedName{Namespace: app.Namespace, Name: app.Name})
}

// clearRollout removes the rollout series of MyApp namespace/name: it is
// gone, or no longer rolls out progressively.
func (r *Reconciler) clearRollout(namespace, name string) {
	metrics.RolloutActive.DeleteLabelValues(namespace, name)
	metrics.RolloutPaused.DeleteLabelValues(namespace, name)
	metrics.RolloutLastProgress.DeleteLabelValues(namespace, name)
	r.rolloutSeen.Delete(types.NamespacedName{Namespace: namespace, Name: name})
}

// rolloutMark is where a rollout stood when this replica last looked.
type rolloutMark struct {
	phase    flotillav1.RolloutPhase
	progress string
	target   string
}

// exportRollout publishes a Progressive rollout's state (st as recorded
// in the MyApp's status): whether it progresses, whether it stopped on
// failures, and when it last moved. A rollout first seen by this replica
// (a hub restart) counts its newest cluster start or availability as its
// last move.
func (r *Reconciler) exportRollout(app *flotillav1.MyApp, st *flotillav1.RolloutStatus) {
	if st == nil {
		r.clearRollout(app.Namespace, app.Name)
		return
	}
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name}
	mark := rolloutMark{phase: st.Phase, progress: st.Progress, target: st.TargetRevision}
	now := r.now()
	prev, seen := r.rolloutSeen.Swap(key, mark)
	switch {
	case !seen:
		metrics.InitRollout(key.Namespace, key.Name)
		last := time.Time{}
		for _, c := range st.Clusters {
			for _, t := range []*metav1.Time{c.StartTime, c.AvailableTime} {
				if t != nil && t.After(last) {
					last = t.Time
				}
			}
		}
		if last.IsZero() {
			last = now
		}
		metrics.RolloutLastProgress.WithLabelValues(key.Namespace, key.Name).Set(float64(last.Unix()))
	case prev.(rolloutMark) != mark:
		metrics.RolloutLastProgress.WithLabelValues(key.Namespace, key.Name).Set(float64(now.Unix()))
	}
	metrics.RolloutActive.WithLabelValues(key.Namespace, key.Name).Set(boolValue(st.Phase == flotillav1.RolloutPhaseProgressing))
	metrics.RolloutPaused.WithLabelValues(key.Namespace, key.Name).Set(boolValue(st.Phase == flotillav1.RolloutPhaseFailed))
}

func (r *Reconciler) now() time.Time {
	if r.Clock != nil {
		return r.Clock.Now()
	}
	return time.Now()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// countStatusWrite counts one MyApp status patch by its result.
func countStatusWrite(err error) {
	switch {
	case err == nil:
		metrics.MyAppStatusWrites.WithLabelValues("success").Inc()
	case apierrors.IsConflict(err):
		metrics.MyAppStatusWrites.WithLabelValues("conflict").Inc()
	default:
		metrics.MyAppStatusWrites.WithLabelValues("error").Inc()
	}
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
	waveResult := "succeeded"
	if res.Failed || res.RolledBack {
		waveResult = "failed"
	}
	for _, d := range res.WaveDurations {
		metrics.RolloutWaveDuration.Observe(d.Seconds())
		metrics.RolloutWaves.WithLabelValues(waveResult).Inc()
	}
}
