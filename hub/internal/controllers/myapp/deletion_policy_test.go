package myapp

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func orphanApp(a *flotillav1.MyApp) { a.Spec.DeletionPolicy = flotillav1.DeletionPolicyOrphan }

// withPolicy is w with spec.deletionPolicy p.
func withPolicy(w *flotillav1.Work, p flotillav1.DeletionPolicy) *flotillav1.Work {
	w.Spec.DeletionPolicy = p
	return w
}

// unobserved is w at a generation its agent has not reported on.
func unobserved(w *flotillav1.Work) *flotillav1.Work {
	w.Generation = 2
	return w
}

// drained is a clusterSet of Ready clusters in which those named in
// deleting are being deleted with MemberCluster policy p.
func drained(p flotillav1.DeletionPolicy, deleting []string, names ...string) clusterSet {
	cs := members(names...)
	for i := range cs.list {
		if slices.Contains(deleting, cs.list[i].Name) {
			cs.list[i].DeletionTimestamp = ptr.To(metav1.NewTime(t0.Add(-10 * time.Second)))
			cs.list[i].Spec.DeletionPolicy = p
		}
	}
	return cs
}

func notReadyIn(cs clusterSet, name string) clusterSet {
	cs.byName[name].Status.Conditions = nil
	return cs
}

// TestPlanDeletionPolicy checks how a Work leaves under a deletion policy:
// its policy is brought up to date first, an Orphan Work goes only once
// its agent saw it (or cannot hear anything anyway), and a draining
// cluster's Works stay until their replacements are available, whatever
// the app's purge mode, carrying the MemberCluster's policy.
func TestPlanDeletionPolicy(t *testing.T) {
	base := app()
	orphan := app(orphanApp)
	tests := []struct {
		name        string
		app         *flotillav1.MyApp
		decision    *flotillav1.PlacementDecision
		clusters    clusterSet
		existing    map[string]*flotillav1.Work
		wantApply   []string
		wantRemove  []string
		wantPolicy  map[string]flotillav1.DeletionPolicy // of the applied Works
		wantRequeue time.Duration
	}{{
		name:       "a new Work carries the app's policy",
		app:        orphan,
		decision:   decision(map[string]int32{"a": 2}),
		clusters:   members("a", "b"),
		wantApply:  []string{"a"},
		wantPolicy: map[string]flotillav1.DeletionPolicy{"a": flotillav1.DeletionPolicyOrphan},
	}, {
		name:        "a descheduled Work whose policy changed is updated, not removed",
		app:         orphan,
		decision:    decision(map[string]int32{"a": 2}),
		clusters:    members("a", "b"),
		existing:    map[string]*flotillav1.Work{"a": current(t, orphan, "a", 2), "b": current(t, base, "b", 2)},
		wantApply:   []string{"b"},
		wantPolicy:  map[string]flotillav1.DeletionPolicy{"b": flotillav1.DeletionPolicyOrphan},
		wantRequeue: policyRecheck,
	}, {
		name:       "an Orphan Work its agent observed is removed",
		app:        orphan,
		decision:   decision(map[string]int32{"a": 2}),
		clusters:   members("a", "b"),
		existing:   map[string]*flotillav1.Work{"a": current(t, orphan, "a", 2), "b": current(t, orphan, "b", 2)},
		wantRemove: []string{"b"},
	}, {
		name:        "an Orphan Work its Ready agent has not observed waits",
		app:         orphan,
		decision:    decision(map[string]int32{"a": 2}),
		clusters:    members("a", "b"),
		existing:    map[string]*flotillav1.Work{"a": current(t, orphan, "a", 2), "b": unobserved(current(t, orphan, "b", 2))},
		wantRequeue: policyRecheck,
	}, {
		name:       "an Orphan Work of a cluster that is not Ready is removed: its next snapshot prunes by the recorded policy",
		app:        orphan,
		decision:   decision(map[string]int32{"a": 2}),
		clusters:   notReadyIn(members("a", "b"), "b"),
		existing:   map[string]*flotillav1.Work{"a": current(t, orphan, "a", 2), "b": unobserved(current(t, orphan, "b", 2))},
		wantRemove: []string{"b"},
	}, {
		name:       "a Delete Work is removed without waiting",
		app:        base,
		decision:   decision(map[string]int32{"a": 2}),
		clusters:   members("a", "b"),
		existing:   map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "b": unobserved(current(t, base, "b", 2))},
		wantRemove: []string{"b"},
	}, {
		name:     "a draining cluster's Work stays until the replacements are available, even with PurgeImmediately, and takes the cluster's Orphan policy",
		app:      app(purge(flotillav1.PurgeImmediately, 600)),
		decision: decision(map[string]int32{"a": 2}, evicted("b", 2, time.Second)),
		clusters: drained(flotillav1.DeletionPolicyOrphan, []string{"b"}, "a", "b"),
		existing: map[string]*flotillav1.Work{"b": current(t, base, "b", 2)},
		// a is new; b is kept and rewritten with the drain's policy.
		wantApply:   []string{"a", "b"},
		wantPolicy:  map[string]flotillav1.DeletionPolicy{"a": flotillav1.DeletionPolicyDelete, "b": flotillav1.DeletionPolicyOrphan},
		wantRequeue: 590 * time.Second,
	}, {
		name:       "a draining cluster with policy Delete loses its Work once the replacements are available",
		app:        base,
		decision:   decision(map[string]int32{"a": 2}, evicted("b", 2, time.Second)),
		clusters:   drained(flotillav1.DeletionPolicyDelete, []string{"b"}, "a", "b"),
		existing:   map[string]*flotillav1.Work{"a": current(t, base, "a", 2), "b": current(t, base, "b", 2)},
		wantRemove: []string{"b"},
	}, {
		name:       "an Orphan app's Work on a draining cluster with policy Delete stays Orphan",
		app:        orphan,
		decision:   decision(map[string]int32{"a": 2}, evicted("b", 2, time.Second)),
		clusters:   drained(flotillav1.DeletionPolicyDelete, []string{"b"}, "a", "b"),
		existing:   map[string]*flotillav1.Work{"a": current(t, orphan, "a", 2), "b": current(t, orphan, "b", 2)},
		wantRemove: []string{"b"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// As the cache hands them out: with server-set metadata, which
			// must not go into an apply.
			for _, w := range tt.existing {
				w.ResourceVersion, w.UID = "7", "uid-1"
				w.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: flotillav1.FieldOwnerHub, Operation: metav1.ManagedFieldsOperationApply}}
			}
			p, err := planWorks(tt.app, tt.decision, tt.clusters, tt.existing, nil, "", 0, nil, t0)
			if err != nil {
				t.Fatalf("plan: %v", err)
			}
			checkPlan(t, p, tt.wantApply, tt.wantRemove, tt.wantRequeue)
			for _, w := range p.apply {
				name := clusterNames([]*flotillav1.Work{w})[0]
				if w.ManagedFields != nil || w.ResourceVersion != "" || w.UID != "" {
					t.Errorf("Work of %s to apply carries server-set metadata (rv %q, uid %q, managedFields %v)", name, w.ResourceVersion, w.UID, w.ManagedFields)
				}
				if want, ok := tt.wantPolicy[name]; ok && w.Spec.DeletionPolicy != want {
					t.Errorf("Work of %s applied with policy %q, want %q", name, w.Spec.DeletionPolicy, want)
				}
			}
		})
	}
}
