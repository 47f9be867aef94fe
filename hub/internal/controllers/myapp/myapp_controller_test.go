package myapp

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/internal/fixture"
)

// app is a MyApp in namespace shop; opts change it.
// The shared fixtures, under the names the tests use.
var (
	t0          = fixture.Now
	readyMember = fixture.ReadyMember
	healthyWork = fixture.HealthyWork
)

func app(opts ...func(*flotillav1.MyApp)) *flotillav1.MyApp {
	a := &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 1},
		Spec:       flotillav1.MyAppSpec{Image: "registry.example.com/team/web:1.0", Replicas: ptr.To[int32](2)},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

func purge(mode flotillav1.PurgeMode, graceSeconds int32) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) {
		a.Spec.Failover = &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{PurgeMode: mode, GracePeriodSeconds: ptr.To(graceSeconds)}}
	}
}

func overrideReplicas(cluster string, n int32) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) {
		a.Spec.Overrides = append(a.Spec.Overrides, flotillav1.ClusterOverride{
			Name: "scale-" + cluster, TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{cluster}}, Replicas: ptr.To(n),
		})
	}
}

// members is a clusterSet of Ready clusters.
func members(names ...string) clusterSet {
	cs := clusterSet{byName: map[string]*flotillav1.MemberCluster{}}
	for _, n := range names {
		cs.list = append(cs.list, *readyMember(n))
	}
	for i := range cs.list {
		cs.byName[cs.list[i].Name] = &cs.list[i]
	}
	return cs
}

// current is the Work the hub stored for cluster at generation 1 with
// what it renders now, reported healthy by the member.
func current(t *testing.T, a *flotillav1.MyApp, cluster string, replicas int32) *flotillav1.Work {
	t.Helper()
	w, n, err := render.Work(a, cluster, readyMember(cluster), replicas, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Generation = 1
	w.Status = healthyWork(n).Status
	return w
}

func deleting(w *flotillav1.Work) *flotillav1.Work {
	w.DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-time.Second)))
	w.Finalizers = []string{"test"}
	return w
}

func withoutFinalizer(w *flotillav1.Work) *flotillav1.Work {
	w.Finalizers = nil
	return w
}

func evicted(name string, replicas int32, ago time.Duration) flotillav1.EvictedCluster {
	return flotillav1.EvictedCluster{Name: name, Replicas: replicas, Reason: "ClusterUnreachable", EvictionTime: metav1.NewTime(t0.Add(-ago))}
}

func decision(targets map[string]int32, ev ...flotillav1.EvictedCluster) *flotillav1.PlacementDecision {
	d := &flotillav1.PlacementDecision{Evicted: ev}
	for n, r := range targets {
		d.Clusters = append(d.Clusters, flotillav1.TargetCluster{Name: n, Replicas: r})
	}
	slices.SortFunc(d.Clusters, func(x, y flotillav1.TargetCluster) int { return strings.Compare(x.Name, y.Name) })
	return d
}

// wantView is what a test expects of one cluster's view: its assigned
// replicas, the generation of its Work (0: no Work) and how it leaves.
type wantView struct {
	assigned   int32
	generation int64
	evicting   bool
	evicted    bool
}

func TestPlan(t *testing.T) {
	base := app()
	staleSpec := current(t, base, "a", 1) // rendered for 1 replica; the decision now says 2
	noLabel := current(t, base, "a", 2)
	delete(noLabel.Labels, flotillav1.LabelCluster)

	tests := []struct {
		name     string
		app      *flotillav1.MyApp
		decision *flotillav1.PlacementDecision
		existing map[string]*flotillav1.Work
		// wantApply and wantRemove are cluster names, in the plan's order.
		wantApply   []string
		wantRemove  []string
		wantViews   map[string]wantView
		wantRequeue time.Duration
	}{{
		name:      "a new target cluster gets a Work and waits for it",
		app:       base,
		decision:  decision(map[string]int32{"a": 2}),
		wantApply: []string{"a"},
		wantViews: map[string]wantView{"a": {assigned: 2}},
	}, {
		name:      "an unchanged Work is not written again",
		app:       base,
		decision:  decision(map[string]int32{"a": 2, "b": 2}),
		existing:  map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "b": current(t, base, "b", 2)},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 1}, "b": {assigned: 2, generation: 1}},
	}, {
		name:      "a changed spec rewrites the Work, whose view waits for the next generation",
		app:       base,
		decision:  decision(map[string]int32{"a": 2}),
		existing:  map[string]*flotillav1.Work{"a": staleSpec},
		wantApply: []string{"a"},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 2}},
	}, {
		name:      "a Work that lost one of the hub's labels is rewritten",
		app:       base,
		decision:  decision(map[string]int32{"a": 2}),
		existing:  map[string]*flotillav1.Work{"a": noLabel},
		wantApply: []string{"a"},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 2}},
	}, {
		name:        "a target's Work being deleted is waited for (its member confirms), not written",
		app:         base,
		decision:    decision(map[string]int32{"a": 2}),
		existing:    map[string]*flotillav1.Work{"a": deleting(current(t, base, "a", 2))},
		wantViews:   map[string]wantView{"a": {assigned: 2}},
		wantRequeue: policyRecheck,
	}, {
		name:      "a Work without the member-cleanup finalizer (written by an older hub) is written again",
		app:       base,
		decision:  decision(map[string]int32{"a": 2}),
		existing:  map[string]*flotillav1.Work{"a": withoutFinalizer(current(t, base, "a", 2))},
		wantApply: []string{"a"},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 2}},
	}, {
		name:      "a replicas override is what the view expects",
		app:       app(overrideReplicas("a", 5)),
		decision:  decision(map[string]int32{"a": 2, "b": 2}),
		wantApply: []string{"a", "b"},
		wantViews: map[string]wantView{"a": {assigned: 5}, "b": {assigned: 2}},
	}, {
		name:       "Works of clusters no longer targeted are removed, sorted by namespace",
		app:        base,
		decision:   decision(map[string]int32{"a": 2}),
		existing:   map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "c": current(t, base, "c", 2), "b": current(t, base, "b", 2)},
		wantRemove: []string{"b", "c"},
		wantViews:  map[string]wantView{"a": {assigned: 2, generation: 1}},
	}, {
		name:      "a Work already being deleted is not deleted again",
		app:       base,
		decision:  decision(map[string]int32{"a": 2}),
		existing:  map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "b": deleting(current(t, base, "b", 2))},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 1}},
	}, {
		name:      "PurgeNever keeps an evicted cluster's Work for good",
		app:       app(purge(flotillav1.PurgeNever, 600)),
		decision:  decision(map[string]int32{"a": 2}, evicted("b", 2, 24*time.Hour)),
		existing:  map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "b": current(t, base, "b", 2)},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 1}, "b": {assigned: 2, generation: 1, evicting: true}},
	}, {
		name:       "PurgeImmediately removes an evicted cluster's Work at once and lists the cluster as evicted",
		app:        app(purge(flotillav1.PurgeImmediately, 600)),
		decision:   decision(map[string]int32{"a": 2}, evicted("b", 2, time.Second)),
		existing:   map[string]*flotillav1.Work{"b": current(t, base, "b", 2)},
		wantApply:  []string{"a"},
		wantRemove: []string{"b"},
		wantViews:  map[string]wantView{"a": {assigned: 2}, "b": {evicted: true}},
	}, {
		name:        "Graciously keeps an evicted cluster's Work while replacements are not available, and requeues at the grace period's end",
		app:         app(purge(flotillav1.PurgeGraciously, 600)),
		decision:    decision(map[string]int32{"a": 2}, evicted("b", 2, 100*time.Second)),
		existing:    map[string]*flotillav1.Work{"b": current(t, base, "b", 2)},
		wantApply:   []string{"a"},
		wantViews:   map[string]wantView{"a": {assigned: 2}, "b": {assigned: 2, generation: 1, evicting: true}},
		wantRequeue: 500 * time.Second,
	}, {
		name:       "Graciously removes an evicted cluster's Work once every replacement is available",
		app:        app(purge(flotillav1.PurgeGraciously, 600)),
		decision:   decision(map[string]int32{"a": 2}, evicted("b", 2, 100*time.Second)),
		existing:   map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "b": current(t, base, "b", 2)},
		wantRemove: []string{"b"},
		wantViews:  map[string]wantView{"a": {assigned: 2, generation: 1}, "b": {evicted: true}},
	}, {
		name:       "Graciously removes an evicted cluster's Work after the grace period even if replacements are not available",
		app:        app(purge(flotillav1.PurgeGraciously, 600)),
		decision:   decision(map[string]int32{"a": 2}, evicted("b", 2, 601*time.Second)),
		existing:   map[string]*flotillav1.Work{"b": current(t, base, "b", 2)},
		wantApply:  []string{"a"},
		wantRemove: []string{"b"},
		wantViews:  map[string]wantView{"a": {assigned: 2}, "b": {evicted: true}},
	}, {
		name:        "without a failover policy the default is Graciously with 600s",
		app:         base,
		decision:    decision(map[string]int32{"a": 2}, evicted("b", 2, time.Minute)),
		existing:    map[string]*flotillav1.Work{"b": current(t, base, "b", 2)},
		wantApply:   []string{"a"},
		wantViews:   map[string]wantView{"a": {assigned: 2}, "b": {assigned: 2, generation: 1, evicting: true}},
		wantRequeue: 540 * time.Second,
	}, {
		name:        "the earliest grace period's end sets the requeue",
		app:         app(purge(flotillav1.PurgeGraciously, 600)),
		decision:    decision(map[string]int32{"a": 4}, evicted("b", 2, 100*time.Second), evicted("c", 2, 300*time.Second)),
		existing:    map[string]*flotillav1.Work{"b": current(t, base, "b", 2), "c": current(t, base, "c", 2)},
		wantApply:   []string{"a"},
		wantViews:   map[string]wantView{"a": {assigned: 4}, "b": {assigned: 2, generation: 1, evicting: true}, "c": {assigned: 2, generation: 1, evicting: true}},
		wantRequeue: 300 * time.Second,
	}, {
		name:      "an evicted cluster without a Work is listed as evicted",
		app:       base,
		decision:  decision(map[string]int32{"a": 2}, evicted("b", 2, time.Hour)),
		existing:  map[string]*flotillav1.Work{"a": current(t, base, "a", 2)},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 1}, "b": {evicted: true}},
	}, {
		name:      "a cluster both targeted and still in the evicted list shows once, as a target",
		app:       base,
		decision:  decision(map[string]int32{"a": 2, "b": 2}, evicted("b", 2, time.Hour)),
		existing:  map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "b": current(t, base, "b", 2)},
		wantViews: map[string]wantView{"a": {assigned: 2, generation: 1}, "b": {assigned: 2, generation: 1}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := map[string]*flotillav1.Work{}
			for n, w := range tt.existing {
				before[n] = w.DeepCopy()
			}
			p, err := planWorks(tt.app, tt.decision, members("a", "b", "c"), tt.existing, nil, "", 0, nil, t0)
			if err != nil {
				t.Fatalf("plan: %v", err)
			}
			checkPlan(t, p, tt.wantApply, tt.wantRemove, tt.wantRequeue)
			got := map[string]wantView{}
			for _, v := range p.views {
				if _, dup := got[v.Name]; dup {
					t.Errorf("cluster %s has two views", v.Name)
				}
				w := wantView{assigned: v.Assigned, evicting: v.Evicting, evicted: v.Evicted != nil}
				if v.Work != nil {
					w.generation = v.Work.Generation
				}
				got[v.Name] = w
			}
			for name, w := range tt.wantViews {
				if got[name] != w {
					t.Errorf("view of %s = %+v, want %+v", name, got[name], w)
				}
			}
			if len(got) != len(tt.wantViews) {
				t.Errorf("views = %+v, want %+v", got, tt.wantViews)
			}
			for n, w := range tt.existing {
				if w.Generation != before[n].Generation {
					t.Errorf("plan changed the cached Work of %s: generation %d, was %d", n, w.Generation, before[n].Generation)
				}
			}
		})
	}
}

// checkPlan fails t unless p applies and removes the Works of the named
// clusters, in that order, and asks to be looked at again after requeue.
func checkPlan(t *testing.T, p plan, apply, remove []string, requeue time.Duration) {
	t.Helper()
	if got := clusterNames(p.apply); !slices.Equal(got, apply) {
		t.Errorf("apply = %v, want %v", got, apply)
	}
	if got := clusterNames(p.remove); !slices.Equal(got, remove) {
		t.Errorf("remove = %v, want %v", got, remove)
	}
	if p.requeueAfter != requeue {
		t.Errorf("requeueAfter = %s, want %s", p.requeueAfter, requeue)
	}
}

func clusterNames(ws []*flotillav1.Work) []string {
	var out []string
	for _, w := range ws {
		out = append(out, strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix))
	}
	return out
}

// TestPlanWritesWhatRenderRenders checks that the Works to apply are the
// rendered ones, overrides included, for the right cluster.
func TestPlanWritesWhatRenderRenders(t *testing.T) {
	a := app(overrideReplicas("b", 7))
	p, err := planWorks(a, decision(map[string]int32{"a": 3, "b": 3}), members("a", "b"), nil, nil, "", 0, nil, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.apply) != 2 {
		t.Fatalf("apply has %d Works, want 2", len(p.apply))
	}
	for _, w := range p.apply {
		cluster := strings.TrimPrefix(w.Namespace, flotillav1.ClusterNamespacePrefix)
		want := map[string]int32{"a": 3, "b": 7}[cluster]
		if w.Name != flotillav1.WorkName("shop", "web") || w.Labels[flotillav1.LabelCluster] != cluster {
			t.Errorf("Work %s/%s has labels %v", w.Namespace, w.Name, w.Labels)
		}
		var d appsv1.Deployment
		if err := json.Unmarshal(w.Spec.Manifests[0].Raw, &d); err != nil {
			t.Fatal(err)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
			t.Errorf("Deployment for %s has replicas %v, want %d", cluster, d.Spec.Replicas, want)
		}
	}
}

func TestPlanFailsOnAnInvalidOverrideSelector(t *testing.T) {
	a := app(func(a *flotillav1.MyApp) {
		a.Spec.Overrides = []flotillav1.ClusterOverride{{
			Name: "bad",
			TargetCluster: flotillav1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "env", Operator: "Near", Values: []string{"x"}},
			}}},
			Replicas: ptr.To[int32](1),
		}}
	})
	_, err := planWorks(a, decision(map[string]int32{"a": 1}), members("a"), nil, nil, "", 0, nil, t0)
	if err == nil || !strings.Contains(err.Error(), "spec.overrides[0] (bad)") {
		t.Errorf("plan error = %v, want one naming spec.overrides[0] (bad)", err)
	}
}

func TestClusterUnreachable(t *testing.T) {
	tests := []struct {
		name      string
		failover  *flotillav1.FailoverPolicy
		wantMode  flotillav1.PurgeMode
		wantGrace int32
	}{
		{"no failover policy: the CRD defaults", nil, flotillav1.PurgeGraciously, 600},
		{"failover without clusterUnreachable: the CRD defaults", &flotillav1.FailoverPolicy{Failback: &flotillav1.FailbackPolicy{}}, flotillav1.PurgeGraciously, 600},
		{"empty clusterUnreachable: the CRD defaults", &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{}}, flotillav1.PurgeGraciously, 600},
		{"purge mode only keeps the default grace period", &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{PurgeMode: flotillav1.PurgeNever}}, flotillav1.PurgeNever, 600},
		{"grace period only keeps the default purge mode", &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{GracePeriodSeconds: ptr.To[int32](30)}}, flotillav1.PurgeGraciously, 30},
		{"a grace period of zero is kept, not defaulted", &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{GracePeriodSeconds: ptr.To[int32](0)}}, flotillav1.PurgeGraciously, 0},
		{"both set", &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{PurgeMode: flotillav1.PurgeImmediately, GracePeriodSeconds: ptr.To[int32](5)}}, flotillav1.PurgeImmediately, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := app(func(a *flotillav1.MyApp) { a.Spec.Failover = tt.failover })
			got := clusterUnreachable(a)
			if got.PurgeMode != tt.wantMode || got.GracePeriodSeconds == nil || *got.GracePeriodSeconds != tt.wantGrace {
				t.Errorf("got %s / %v, want %s / %d", got.PurgeMode, got.GracePeriodSeconds, tt.wantMode, tt.wantGrace)
			}
		})
	}
}
