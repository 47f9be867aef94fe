package placement

import (
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// keptAtZero checks that every target has 0 replicas and says why.
func keptAtZero(t *testing.T, r Result) {
	t.Helper()
	for _, c := range r.Clusters {
		if c.Replicas != 0 || c.Reason != v1alpha1.TargetReasonKeptAtZero {
			t.Errorf("target %s = %d replicas, reason %q; want 0, %s", c.Name, c.Replicas, c.Reason, v1alpha1.TargetReasonKeptAtZero)
		}
	}
}

// scaledUp checks that no target carries the zero reason any more.
func scaledUp(t *testing.T, r Result) {
	t.Helper()
	for _, c := range r.Clusters {
		if c.Reason != "" {
			t.Errorf("target %s has reason %q after scaling up", c.Name, c.Reason)
		}
	}
}

// TestScheduleScaleToZero: an app scaled to zero keeps its clusters at 0
// replicas in every mode (Divided: where it last ran; Duplicated: every
// selected cluster), says why, never fails, and moves nothing when a
// cluster is lost or fails back.
func TestScheduleScaleToZero(t *testing.T) {
	st := v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=1", "c=1")}
	dyn := v1alpha1.Placement{ReplicaScheduling: dynamic()}
	agg := v1alpha1.Placement{ReplicaScheduling: aggregate()}
	lost := unreachableSince(t0.Add(-time.Minute)) // past the 10 s toleration
	groups := v1alpha1.Placement{ReplicaScheduling: divided("", nil), ClusterAffinities: []v1alpha1.ClusterAffinityTerm{
		{AffinityName: "primary", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: []string{"a", "b"}}},
		{AffinityName: "backup", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: []string{"c"}}},
	}}
	runCases(t, []schedCase{
		{
			name:  "Divided static weights keep the last placement at 0",
			in:    Input{Replicas: 0, Placement: st, Clusters: abc(), Previous: decision("a=2 b=2 c=2")},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "Divided static weights at 0 are stable on their own decision",
			in:    Input{Replicas: 0, Placement: st, Clusters: abc(), Previous: decision("a=0 b=0 c=0")},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "Divided keeps only the clusters it ran in, not every eligible one",
			in:    Input{Replicas: 0, Placement: v1alpha1.Placement{ReplicaScheduling: divided("", nil)}, Clusters: abc(), Previous: decision("a=1 b=1")},
			want:  "a=0 b=0",
			check: keptAtZero,
		},
		{
			name: "Divided created at 0 has nowhere it ran: nothing to keep",
			in:   Input{Replicas: 0, Placement: st, Clusters: abc()},
			want: "",
		},
		{
			name:  "dynamic weights keep the last placement at 0",
			in:    Input{Replicas: 0, Placement: dyn, Clusters: abc(), Previous: decision("a=3 c=5")},
			want:  "a=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "dynamic weights at 0 with no spare capacity anywhere divide nothing by zero",
			in:    Input{Replicas: 0, Placement: dyn, Clusters: abc(noResources()), Previous: decision("a=0 b=0 c=0")},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "Aggregated keeps the last placement at 0",
			in:    Input{Replicas: 0, Placement: agg, Clusters: abc(), Previous: decision("b=4")},
			want:  "b=0",
			check: keptAtZero,
		},
		{
			name:  "Duplicated at 0 lists every selected cluster, kept at zero",
			in:    Input{Replicas: 0, Clusters: append(abc(), member("d")), Previous: decision("a=3 b=3 c=3")},
			want:  "a=0 b=0 c=0 d=0",
			check: keptAtZero,
		},
		{
			name: "Duplicated at 0 with no cluster selectable keeps its clusters instead of failing",
			in: Input{Replicas: 0, Clusters: abc(notReady()), Previous: decision("a=3 b=3 c=3"),
				Placement: v1alpha1.Placement{SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldCluster, 2, 0)}}},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "Duplicated created at 0 with no cluster selectable places nothing, without failing",
			in:    Input{Replicas: 0, Clusters: abc(notReady())},
			want:  "",
			check: keptAtZero,
		},
		{
			name:  "a kept cluster lost at 0 stays, at 0, and nothing is evicted",
			in:    Input{Replicas: 0, Placement: st, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", lost), member("c")}, Previous: decision("a=0 b=0 c=0")},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "a Duplicated cluster lost at 0 stays, at 0, and nothing is evicted",
			in:    Input{Replicas: 0, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", lost), member("c")}, Previous: decision("a=0 b=0 c=0")},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "scaling to zero while a cluster is lost keeps its Work, which scales it down when it returns",
			in:    Input{Replicas: 0, Placement: st, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", lost), member("c")}, Previous: decision("a=2 b=2 c=2")},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "scaling up while a kept cluster is lost places around it and evicts nothing (it ran nothing)",
			in:    Input{Replicas: 6, Placement: st, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", lost), member("c")}, Previous: decision("a=0 b=0 c=0")},
			want:  "a=3 c=3",
			check: wantFiltered("b", FilterTaintToleration, "not tolerated"),
		},
		{
			name: "a cluster failing back at 0 rejoins at 0 and its eviction entry goes",
			in: Input{Replicas: 0, Placement: st, Clusters: abc(),
				Previous: decision("a=0 c=0", evictedAt("b", 2, EvictionReasonClusterUnreachable, t0.Add(-5*time.Minute)))},
			want:  "a=0 b=0 c=0",
			check: keptAtZero,
		},
		{
			name:  "a cluster that left the affinity is not kept",
			in:    Input{Replicas: 0, Placement: v1alpha1.Placement{ReplicaScheduling: divided("", nil), ClusterAffinity: &v1alpha1.ClusterAffinity{ClusterNames: []string{"a", "b"}}}, Clusters: abc(), Previous: decision("a=2 b=2 c=2")},
			want:  "a=0 b=0",
			check: wantFiltered("c", FilterClusterAffinity, ""),
		},
		{
			name:  "a cluster that lost its static weight is not kept",
			in:    Input{Replicas: 0, Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=1")}, Clusters: abc(), Previous: decision("a=2 b=2 c=2")},
			want:  "a=0 b=0",
			check: wantFiltered("c", FilterStaticWeight, ""),
		},
		{
			name: "maxGroups holds at 0",
			in: Input{Replicas: 0, Clusters: abc(), Previous: decision("a=2 b=2 c=2"),
				Placement: v1alpha1.Placement{ReplicaScheduling: divided("", nil), SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldCluster, 0, 2)}}},
			want: "a=0 b=0",
		},
		{
			name:         "at 0 the app stays in the affinity group it ran in",
			in:           Input{Replicas: 0, Placement: groups, Clusters: abc(), Previous: &v1alpha1.PlacementDecision{AffinityName: "backup", Clusters: []v1alpha1.TargetCluster{{Name: "c", Replicas: 2}}}},
			want:         "c=0",
			wantAffinity: "backup",
			check:        keptAtZero,
		},
		{
			name:         "scaling up from 0 returns to the preferred group",
			in:           Input{Replicas: 2, Placement: groups, Clusters: abc(), Previous: &v1alpha1.PlacementDecision{AffinityName: "backup", Clusters: []v1alpha1.TargetCluster{{Name: "c", Replicas: 0}}}},
			want:         "a=1 b=1",
			wantAffinity: "primary",
		},
		{
			name:  "static weights 1:1:1 scale from 0 to 6 as 2/2/2",
			in:    Input{Replicas: 6, Placement: st, Clusters: abc(), Previous: decision("a=0 b=0 c=0")},
			want:  "a=2 b=2 c=2",
			check: scaledUp,
		},
		{
			name:  "Duplicated scales from 0 on the same clusters",
			in:    Input{Replicas: 3, Clusters: abc(), Previous: decision("a=0 b=0 c=0")},
			want:  "a=3 b=3 c=3",
			check: scaledUp,
		},
		{
			name: "dynamic weights scale from 0 by room",
			in: Input{Replicas: 6, Placement: dyn, Previous: decision("a=0 b=0 c=0"),
				Clusters: []v1alpha1.MemberCluster{member("a", room(1)), member("b", room(2)), member("c", room(3))}},
			want:  "a=1 b=2 c=3",
			check: scaledUp,
		},
		{
			name:  "dynamic weights scale from 0 with no spare capacity anywhere, beyond capacity, without dividing by zero",
			in:    Input{Replicas: 3, Placement: dyn, Clusters: abc(noResources()), Previous: decision("a=0 b=0 c=0")},
			want:  "a=1 b=1 c=1",
			check: func(t *testing.T, r Result) { scaledUp(t, r); wantBeyond(3)(t, r) },
		},
		{
			name:  "Aggregated scales from 0 into the cluster it kept, not the first by name",
			in:    Input{Replicas: 5, Placement: agg, Clusters: abc(), Previous: decision("b=0")},
			want:  "b=5",
			check: scaledUp,
		},
	})
}

func wantBeyond(n int32) func(*testing.T, Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		if r.BeyondCapacity != n {
			t.Errorf("BeyondCapacity = %d, want %d", r.BeyondCapacity, n)
		}
	}
}

// TestScaleToZeroAndBack walks one app through 6 -> 0 -> 6, each step on
// the decision of the one before, as the hub does: the clusters it runs in
// are the same all the way.
func TestScaleToZeroAndBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		pl   v1alpha1.Placement
		want string
	}{
		{"Duplicated", v1alpha1.Placement{}, "a=6 b=6 c=6"},
		{"static", v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=1", "c=1")}, "a=2 b=2 c=2"},
		{"dynamic", v1alpha1.Placement{ReplicaScheduling: dynamic()}, "a=2 b=2 c=2"},
		{"Aggregated", v1alpha1.Placement{ReplicaScheduling: aggregate()}, "a=6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prev *v1alpha1.PlacementDecision
			var got []string
			for _, n := range []int32{6, 0, 0, 6} {
				res, err := Schedule(Input{Replicas: n, Placement: tc.pl, Clusters: abc(), Previous: prev, Now: t0})
				if err != nil {
					t.Fatalf("Schedule(%d): %v", n, err)
				}
				if len(res.Evicted) > 0 {
					t.Fatalf("Schedule(%d) evicted %s", n, evictions(res.Evicted))
				}
				prev = res.Decision(prev, 1, t0)
				got = append(got, targets(res.Clusters))
			}
			if got[0] != tc.want || got[3] != tc.want {
				t.Errorf("6 -> 0 -> 6 gave %q, want %q at both ends", got, tc.want)
			}
			if zero := zeroed(tc.want); got[1] != zero || got[2] != zero {
				t.Errorf("at 0: %q, want %q", got[1:3], zero)
			}
		})
	}
}

// zeroed turns "a=2 b=4" into "a=0 b=0".
func zeroed(s string) string {
	d := decision(s)
	for i := range d.Clusters {
		d.Clusters[i].Replicas = 0
	}
	return targets(d.Clusters)
}
