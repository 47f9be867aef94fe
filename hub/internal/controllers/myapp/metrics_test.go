package myapp

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
)

// TestRolloutMetricsFollowTheRollout: active while Progressing, paused
// once stopped on failures, the last-progress time moves only when the
// rollout moves, and every series goes with the MyApp.
func TestRolloutMetricsFollowTheRollout(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	r := &Reconciler{Clock: clk}
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "rolling"}}
	ns, name := app.Namespace, app.Name
	series := func() (active, paused, last float64) {
		return testutil.ToFloat64(metrics.RolloutActive.WithLabelValues(ns, name)),
			testutil.ToFloat64(metrics.RolloutPaused.WithLabelValues(ns, name)),
			testutil.ToFloat64(metrics.RolloutLastProgress.WithLabelValues(ns, name))
	}
	began := metav1.NewTime(start.Add(-time.Minute))
	st := &flotillav1.RolloutStatus{Phase: flotillav1.RolloutPhaseProgressing, TargetRevision: "r2", Progress: "0/3",
		Clusters: []flotillav1.ClusterRolloutStatus{{Name: "a", Revision: "r2", Phase: flotillav1.ClusterRolloutUpdating, StartTime: &began}}}
	r.exportRollout(app, st)
	if a, p, l := series(); a != 1 || p != 0 || l != float64(began.Unix()) {
		t.Fatalf("first seen Progressing: active %v paused %v last %v, want 1 0 %d (its newest cluster start)", a, p, l, began.Unix())
	}
	// Its counters exist from the first sight, at zero: an alert's
	// increase() sees the first failure.
	counters := map[string]*prometheus.CounterVec{
		"flotilla_rollouts_started_total": metrics.RolloutsStarted, "flotilla_rollouts_completed_total": metrics.RolloutsCompleted,
		"flotilla_rollouts_failed_total": metrics.RolloutsFailed, "flotilla_rollouts_rolled_back_total": metrics.RolloutsRolledBack,
	}
	for metric, c := range counters {
		if n := testutil.CollectAndCount(c, metric); n != 1 {
			t.Errorf("%s: %d series after the rollout was first seen, want 1 (at zero)", metric, n)
		} else if v := testutil.ToFloat64(c.WithLabelValues(ns, name)); v != 0 {
			t.Errorf("%s = %v before anything happened, want 0", metric, v)
		}
	}
	// A placement change, which goes with it too.
	r.recordPlacementChange(app, nil, &flotillav1.PlacementDecision{Clusters: []flotillav1.TargetCluster{{Name: "a", Replicas: 2}}})
	r.exportMetrics(app)
	// Nothing moves for ten minutes: the last-progress time stays.
	clk.SetTime(start.Add(10 * time.Minute))
	r.exportRollout(app, st.DeepCopy())
	if _, _, l := series(); l != float64(began.Unix()) {
		t.Errorf("last progress moved to %v without progress", l)
	}
	// A cluster succeeds: progress.
	moved := st.DeepCopy()
	moved.Progress = "1/3"
	r.exportRollout(app, moved)
	if _, _, l := series(); l != float64(clk.Now().Unix()) {
		t.Errorf("last progress %v after the progress changed, want %d", l, clk.Now().Unix())
	}
	// Too many failures: stopped, paused on failure, no longer active.
	failed := moved.DeepCopy()
	failed.Phase = flotillav1.RolloutPhaseFailed
	r.exportRollout(app, failed)
	if a, p, _ := series(); a != 0 || p != 1 {
		t.Errorf("Failed: active %v paused %v, want 0 1", a, p)
	}
	// Another MyApp's series stay when this one goes.
	other := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "other"}}
	r.exportMetrics(other)
	r.clearAppMetrics(app)
	for metric, c := range counters {
		if n := testutil.CollectAndCount(c, metric); n != 0 {
			t.Errorf("%s: %d series left after the MyApp went", metric, n)
		}
	}
	if n := testutil.CollectAndCount(metrics.RolloutActive, "flotilla_rollout_active") +
		testutil.CollectAndCount(metrics.RolloutPaused, "flotilla_rollout_paused") +
		testutil.CollectAndCount(metrics.RolloutLastProgress, "flotilla_rollout_last_progress_timestamp_seconds"); n != 0 {
		t.Errorf("%d rollout series left after the MyApp went", n)
	}
	if n := testutil.CollectAndCount(metrics.PlacementChanges, "flotilla_placement_changes_total"); n != 1 {
		t.Errorf("%d placement-change series left, want the other MyApp's 1", n)
	}
	r.clearAppMetrics(other)
}

// TestStatusWritesCountedByResult: each MyApp status write is counted as
// success, conflict or error.
func TestStatusWritesCountedByResult(t *testing.T) {
	before := map[string]float64{}
	for _, r := range []string{"success", "conflict", "error"} {
		before[r] = testutil.ToFloat64(metrics.MyAppStatusWrites.WithLabelValues(r))
	}
	countStatusWrite(nil)
	countStatusWrite(apierrors.NewConflict(schema.GroupResource{Group: "flotilla.dev", Resource: "myapps"}, "web", nil))
	countStatusWrite(apierrors.NewServiceUnavailable("etcd is down"))
	countStatusWrite(apierrors.NewServiceUnavailable("etcd is down"))
	for r, want := range map[string]float64{"success": 1, "conflict": 1, "error": 2} {
		if got := testutil.ToFloat64(metrics.MyAppStatusWrites.WithLabelValues(r)) - before[r]; got != want {
			t.Errorf("%s writes grew by %v, want %v", r, got, want)
		}
	}
}
