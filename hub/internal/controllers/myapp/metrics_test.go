package myapp

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
	"github.com/flotilla-dev/flotilla/pkg/placement"
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
	// A placement change and the replica gauges, which go with it too.
	r.recordPlacementChange(app, nil, &flotillav1.PlacementDecision{Clusters: []flotillav1.TargetCluster{{Name: "a", Replicas: 2}}})
	r.exportMetrics(app, []flotillav1.ClusterAppStatus{{Name: "a", Assigned: 2}}, nil)
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
	r.exportMetrics(other, []flotillav1.ClusterAppStatus{{Name: "a", Assigned: 1}}, nil)
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
	if n := testutil.CollectAndCount(metrics.MyAppReplicas, "flotilla_myapp_replicas"); n != 2 {
		t.Errorf("%d replica series left, want the other MyApp's 2 (assigned, ready)", n)
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

// TestExportMetricsDeletesOnlyGoneClusters: a MyApp's replica and traffic
// series follow its clusters from one reconcile to the next: a cluster it
// left loses its series, the others keep theirs, and another app's stay.
func TestExportMetricsDeletesOnlyGoneClusters(t *testing.T) {
	r := &Reconciler{}
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "gone-clusters"}}
	other := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "bystander"}}
	defer r.clearAppMetrics(app)
	defer r.clearAppMetrics(other)
	shift := func(names ...string) *placement.ShiftResult {
		st := &flotillav1.TrafficStatus{}
		for _, n := range names {
			st.Clusters = append(st.Clusters, flotillav1.ClusterTraffic{Name: n, Weight: 50})
		}
		return &placement.ShiftResult{Status: st}
	}
	series := func(a *flotillav1.MyApp) (replicas, traffic []string) {
		for _, c := range []string{"a", "b", "c"} {
			if hasSeries(t, metrics.MyAppReplicas, a.Namespace, a.Name, c, "ready") {
				replicas = append(replicas, c)
			}
			if hasSeries(t, metrics.TrafficWeight, a.Namespace, a.Name, c) {
				traffic = append(traffic, c)
			}
		}
		return replicas, traffic
	}
	r.exportMetrics(other, []flotillav1.ClusterAppStatus{{Name: "b", Assigned: 1}}, shift("b"))
	r.exportMetrics(app, []flotillav1.ClusterAppStatus{{Name: "a", Assigned: 1}, {Name: "b", Assigned: 1}}, shift("a", "b"))
	if rep, tr := series(app); !slices.Equal(rep, []string{"a", "b"}) || !slices.Equal(tr, []string{"a", "b"}) {
		t.Fatalf("after the first export: replica series %v, traffic %v; want [a b] and [a b]", rep, tr)
	}
	// The app moves from b to c and its health shift ends.
	r.exportMetrics(app, []flotillav1.ClusterAppStatus{{Name: "a", Assigned: 1}, {Name: "c", Assigned: 1}}, nil)
	if rep, tr := series(app); !slices.Equal(rep, []string{"a", "c"}) || len(tr) != 0 {
		t.Errorf("after moving to c without a shift: replica series %v, traffic %v; want [a c] and none", rep, tr)
	}
	if rep, tr := series(other); !slices.Equal(rep, []string{"b"}) || !slices.Equal(tr, []string{"b"}) {
		t.Errorf("the other app's series: replicas %v, traffic %v; want [b] and [b]", rep, tr)
	}
}

// hasSeries says whether vec has a series with exactly these label values
// (without creating one).
func hasSeries(t *testing.T, vec *prometheus.GaugeVec, values ...string) bool {
	t.Helper()
	ch := make(chan prometheus.Metric, 1024)
	vec.Collect(ch)
	close(ch)
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		got := make([]string, 0, len(pb.Label))
		for _, l := range pb.Label {
			got = append(got, l.GetValue())
		}
		if sameLabelValues(got, values) {
			return true
		}
	}
	return false
}

// sameLabelValues compares label values as sets (Write sorts labels by
// name, not in the vector's order).
func sameLabelValues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
