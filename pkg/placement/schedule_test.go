package placement

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// schedCase is one table case: an input and what Schedule must say.
type schedCase struct {
	name string
	in   Input // Now defaults to t0

	want         string // targets, "a=2 b=4"
	wantEvicted  string // "a=2:ClusterUnreachable"
	wantAffinity string
	wantRequeue  time.Duration
	wantErr      error    // a sentinel errors.Is must match
	wantErrText  []string // substrings of the error message
	check        func(t *testing.T, r Result)
}

func runCases(t *testing.T, cases []schedCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in.Now.IsZero() {
				in.Now = t0
			}
			res, err := Schedule(in)
			if tc.wantErr != nil || len(tc.wantErrText) > 0 {
				if err == nil {
					t.Fatalf("want an error, got %q", targets(res.Clusters))
				}
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Errorf("errors.Is(%v, %v) = false", err, tc.wantErr)
				}
				for _, s := range tc.wantErrText {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
			} else if err != nil {
				t.Fatalf("Schedule: %v", err)
			} else if got := targets(res.Clusters); got != tc.want {
				t.Errorf("clusters = %q, want %q", got, tc.want)
			}
			if got := evictions(res.Evicted); got != tc.wantEvicted {
				t.Errorf("evicted = %q, want %q", got, tc.wantEvicted)
			}
			if res.AffinityName != tc.wantAffinity {
				t.Errorf("affinityName = %q, want %q", res.AffinityName, tc.wantAffinity)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeueAfter = %v, want %v", res.RequeueAfter, tc.wantRequeue)
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}

// filteredBy returns the filter and reason Result.Filtered gives name.
func filteredBy(r Result, name string) (string, string) {
	for _, f := range r.Filtered {
		if f.Name == name {
			return f.Filter, f.Reason
		}
	}
	return "", ""
}

func wantFiltered(name, filter, reason string) func(*testing.T, Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		f, why := filteredBy(r, name)
		if f != filter || !strings.Contains(why, reason) {
			t.Errorf("filtered[%s] = %s %q, want %s containing %q", name, f, why, filter, reason)
		}
	}
}

func abc(opts ...clusterOpt) []v1alpha1.MemberCluster {
	return []v1alpha1.MemberCluster{member("a", opts...), member("b", opts...), member("c", opts...)}
}

func TestScheduleDuplicated(t *testing.T) {
	runCases(t, []schedCase{
		{
			name: "default replicaScheduling duplicates the full count on every cluster",
			in:   Input{Replicas: 3, Clusters: abc()},
			want: "a=3 b=3 c=3",
		},
		{
			name: "zero replicas still lists every selected cluster",
			in:   Input{Replicas: 0, Clusters: abc()},
			want: "a=0 b=0 c=0",
		},
		{
			name: "explicit Duplicated type behaves as the default",
			in: Input{Replicas: 2, Clusters: abc(), Placement: v1alpha1.Placement{
				ReplicaScheduling: &v1alpha1.ReplicaSchedulingStrategy{ReplicaSchedulingType: v1alpha1.ReplicaSchedulingDuplicated},
			}},
			want: "a=2 b=2 c=2",
		},
		{
			name: "cluster order in the input does not matter",
			in:   Input{Replicas: 1, Clusters: []v1alpha1.MemberCluster{member("c"), member("a"), member("b")}},
			want: "a=1 b=1 c=1",
		},
	})
}

func TestScheduleAffinity(t *testing.T) {
	clusters := []v1alpha1.MemberCluster{
		member("a", region("us"), zone("us-1"), provider("aws"), label("env", "prod")),
		member("b", region("eu"), zone("eu-1"), provider("gcp"), label("env", "prod")),
		member("c", region("eu"), provider("onprem"), label("env", "dev")),
	}
	aff := func(a v1alpha1.ClusterAffinity) v1alpha1.Placement {
		return v1alpha1.Placement{ClusterAffinity: &a}
	}
	fields := func(reqs ...v1alpha1.FieldSelectorRequirement) v1alpha1.ClusterAffinity {
		return v1alpha1.ClusterAffinity{FieldSelector: &v1alpha1.FieldSelector{MatchExpressions: reqs}}
	}
	runCases(t, []schedCase{
		{
			name:  "clusterNames selects only the named clusters",
			in:    Input{Replicas: 1, Clusters: clusters, Placement: aff(v1alpha1.ClusterAffinity{ClusterNames: []string{"a", "c"}})},
			want:  "a=1 c=1",
			check: wantFiltered("b", FilterClusterAffinity, "not in clusterAffinity (clusterNames)"),
		},
		{
			name: "labelSelector selects by labels",
			in: Input{Replicas: 1, Clusters: clusters, Placement: aff(v1alpha1.ClusterAffinity{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			})},
			want:  "a=1 b=1",
			check: wantFiltered("c", FilterClusterAffinity, "labelSelector"),
		},
		{
			name: "fieldSelector In matches region",
			in: Input{Replicas: 1, Clusters: clusters, Placement: aff(fields(
				v1alpha1.FieldSelectorRequirement{Key: v1alpha1.ClusterFieldRegion, Operator: corev1.NodeSelectorOpIn, Values: []string{"eu"}}))},
			want:  "b=1 c=1",
			check: wantFiltered("a", FilterClusterAffinity, "fieldSelector region"),
		},
		{
			name: "fieldSelector NotIn on provider and Exists on zone are ANDed",
			in: Input{Replicas: 1, Clusters: clusters, Placement: aff(fields(
				v1alpha1.FieldSelectorRequirement{Key: v1alpha1.ClusterFieldProvider, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"aws"}},
				v1alpha1.FieldSelectorRequirement{Key: v1alpha1.ClusterFieldZone, Operator: corev1.NodeSelectorOpExists}))},
			want: "b=1",
		},
		{
			name: "fieldSelector DoesNotExist matches an unset zone",
			in: Input{Replicas: 1, Clusters: clusters, Placement: aff(fields(
				v1alpha1.FieldSelectorRequirement{Key: v1alpha1.ClusterFieldZone, Operator: corev1.NodeSelectorOpDoesNotExist}))},
			want: "c=1",
		},
		{
			name:  "exclude removes a cluster the rest of the affinity selects",
			in:    Input{Replicas: 1, Clusters: clusters, Placement: aff(v1alpha1.ClusterAffinity{ExcludeClusters: []string{"b"}})},
			want:  "a=1 c=1",
			check: wantFiltered("b", FilterClusterAffinity, "excluded"),
		},
		{
			name: "all fields of an affinity must match",
			in: Input{Replicas: 1, Clusters: clusters, Placement: aff(v1alpha1.ClusterAffinity{
				ClusterNames:  []string{"a", "c"},
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			})},
			want: "a=1",
		},
	})
}

func TestScheduleClusterAffinities(t *testing.T) {
	groups := v1alpha1.Placement{ClusterAffinities: []v1alpha1.ClusterAffinityTerm{
		{AffinityName: "primary", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: []string{"a", "b"}}},
		{AffinityName: "backup", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: []string{"c"}}},
	}}
	runCases(t, []schedCase{
		{
			name:         "fallback affinities use the first group when it is schedulable",
			in:           Input{Replicas: 2, Clusters: abc(), Placement: groups},
			want:         "a=2 b=2",
			wantAffinity: "primary",
		},
		{
			name:         "fallback affinities move on when no cluster of the first group is Ready",
			in:           Input{Replicas: 2, Placement: groups, Clusters: []v1alpha1.MemberCluster{member("a", notReady()), member("b", notReady()), member("c")}},
			want:         "c=2",
			wantAffinity: "backup",
			check:        wantFiltered("c", "", ""),
		},
		{
			name:         "fallback affinities move back to the first group as soon as it is schedulable",
			in:           Input{Replicas: 2, Clusters: abc(), Placement: groups, Previous: &v1alpha1.PlacementDecision{AffinityName: "backup", Clusters: []v1alpha1.TargetCluster{{Name: "c", Replicas: 2}}}},
			want:         "a=2 b=2",
			wantAffinity: "primary",
		},
		{
			name:        "fallback affinities fail naming every group when none is schedulable",
			in:          Input{Replicas: 2, Placement: groups, Clusters: abc(notReady())},
			wantErr:     ErrUnschedulable,
			wantErrText: []string{"[primary] no cluster can run the app: a: not Ready; b: not Ready; c: not in clusterAffinity", "[backup]"},
		},
	})
}

func TestScheduleStaticWeights(t *testing.T) {
	runCases(t, []schedCase{
		{
			name: "static weights 1:2:3 of 12 give 2, 4, 6",
			in:   Input{Replicas: 12, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")}},
			want: "a=2 b=4 c=6",
		},
		{
			name: "largest remainder gives the leftover replica to the largest fraction",
			in:   Input{Replicas: 13, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")}},
			want: "a=2 b=4 c=7",
		},
		{
			name: "ties between equal fractions go by name without a previous decision",
			in:   Input{Replicas: 4, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=1", "c=1")}},
			want: "a=2 b=1 c=1",
		},
		{
			name: "ties between equal fractions go to the cluster that held the replica",
			in: Input{Replicas: 4, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=1", "c=1")},
				Previous: decision("a=1 b=1 c=2")},
			want: "a=1 b=1 c=2",
		},
		{
			name:  "a selected cluster that no static entry matches gets nothing",
			in:    Input{Replicas: 12, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2")}},
			want:  "a=4 b=8",
			check: wantFiltered("c", FilterStaticWeight, "matches no staticWeightList entry"),
		},
		{
			name: "a cluster matched by several entries takes the largest weight",
			in: Input{Replicas: 8, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: divided(v1alpha1.ReplicaDivisionWeighted, &v1alpha1.ClusterPreferences{
				StaticWeightList: []v1alpha1.StaticClusterWeight{
					{TargetCluster: v1alpha1.ClusterAffinity{}, Weight: 1},
					{TargetCluster: v1alpha1.ClusterAffinity{ClusterNames: []string{"c"}}, Weight: 2},
				},
			})}},
			want: "a=2 b=2 c=4",
		},
		{
			name: "Weighted without weightPreference shares equally",
			in:   Input{Replicas: 7, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: divided(v1alpha1.ReplicaDivisionWeighted, nil)}},
			want: "a=3 b=2 c=2",
		},
		{
			name: "Divided without a preference is Weighted with equal weights",
			in:   Input{Replicas: 6, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: divided("", nil)}},
			want: "a=2 b=2 c=2",
		},
		{
			name: "Divided lists only clusters with replicas",
			in:   Input{Replicas: 2, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: divided("", nil)}},
			want: "a=1 b=1",
		},
		{
			name: "Divided with zero replicas places nothing",
			in:   Input{Replicas: 0, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")}},
			want: "",
		},
		{
			name: "new cluster joining a static decision without a weight entry does not reshuffle",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")},
				Clusters: append(abc(), member("d")), Previous: decision("a=2 b=4 c=6")},
			want: "a=2 b=4 c=6",
		},
		{
			name: "new cluster joining a static decision takes the share its weight demands",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3", "d=6")},
				Clusters: append(abc(), member("d")), Previous: decision("a=2 b=4 c=6")},
			want: "a=1 b=2 c=3 d=6",
		},
		{
			name: "static scale up only adds replicas",
			in: Input{Replicas: 18, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")},
				Previous: decision("a=2 b=4 c=6")},
			want: "a=3 b=6 c=9",
		},
		{
			name: "static scale down only removes replicas and keeps the shape",
			in: Input{Replicas: 6, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")},
				Previous: decision("a=2 b=4 c=6")},
			want: "a=1 b=2 c=3",
		},
		{
			name: "static scale up by one moves one replica",
			in: Input{Replicas: 8, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=1", "c=1")},
				Previous: decision("a=2 b=3 c=2")},
			want: "a=3 b=3 c=2",
		},
	})
}

func TestScheduleDynamicWeights(t *testing.T) {
	rooms := func(a, b, c int64) []v1alpha1.MemberCluster {
		return []v1alpha1.MemberCluster{member("a", room(a)), member("b", room(b)), member("c", room(c))}
	}
	dyn := v1alpha1.Placement{ReplicaScheduling: dynamic()}
	runCases(t, []schedCase{
		{
			name: "dynamic weights from capacities 6, 12, 18 give 2, 4, 6 of 12",
			in:   Input{Replicas: 12, Placement: dyn, Clusters: rooms(6, 12, 18)},
			want: "a=2 b=4 c=6",
		},
		{
			name: "dynamic weights never hand a cluster more than its room while others have room",
			in:   Input{Replicas: 12, Placement: dyn, Clusters: rooms(1, 2, 9)},
			want: "a=1 b=2 c=9",
		},
		{
			name: "dynamic weights fill to capacity then spread the rest by capacity when short",
			in:   Input{Replicas: 12, Placement: dyn, Clusters: rooms(2, 4, 0)},
			want: "a=4 b=8",
			check: func(t *testing.T, r Result) {
				if r.BeyondCapacity != 6 || len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "6 of 12 replicas are placed beyond") {
					t.Errorf("beyondCapacity = %d, warnings = %q; want 6 and a warning", r.BeyondCapacity, r.Warnings)
				}
			},
		},
		{
			name: "dynamic weights count a cluster without resource summary as no room",
			in:   Input{Replicas: 4, Placement: dyn, Clusters: []v1alpha1.MemberCluster{member("a", room(6)), member("b", noResources())}},
			want: "a=4",
		},
		{
			name: "dynamic weights share equally when no cluster reports room",
			in:   Input{Replicas: 4, Placement: dyn, Clusters: []v1alpha1.MemberCluster{member("a", noResources()), member("b", noResources())}},
			want: "a=2 b=2",
			check: func(t *testing.T, r Result) {
				if r.BeyondCapacity != 4 {
					t.Errorf("beyondCapacity = %d, want 4", r.BeyondCapacity)
				}
			},
		},
		{
			name: "dynamic weights take the least room over cpu, memory and pods",
			in: Input{Replicas: 10, Placement: dyn, Requests: list("cpu", "500m", "memory", "1Gi"), Clusters: []v1alpha1.MemberCluster{
				// cpu fits 6, memory 4, pods 100: room 4.
				member("a", resources(list("cpu", "4", "memory", "8Gi", "pods", "110"), list("cpu", "1", "memory", "4Gi", "pods", "10"))),
				// cpu fits 16, memory 16, pods 16: room 16.
				member("b", resources(list("cpu", "8", "memory", "16Gi", "pods", "16"), nil)),
			}},
			want: "a=2 b=8",
		},
		{
			name: "dynamic weights give nothing to a cluster lacking a requested resource",
			in: Input{Replicas: 2, Placement: dyn, Requests: list("nvidia.com/gpu", "1"), Clusters: []v1alpha1.MemberCluster{
				member("a", resources(list("cpu", "4", "pods", "110", "nvidia.com/gpu", "2"), nil)),
				member("b", resources(list("cpu", "8", "pods", "110"), nil)),
			}},
			want: "a=2",
		},
		{
			name: "dynamic scale up keeps what runs and adds by room",
			in:   Input{Replicas: 18, Placement: dyn, Clusters: rooms(4, 8, 12), Previous: decision("a=2 b=4 c=6")},
			want: "a=3 b=6 c=9",
		},
		{
			name: "dynamic scale down removes in proportion and keeps the shape",
			in:   Input{Replicas: 6, Placement: dyn, Clusters: rooms(4, 8, 12), Previous: decision("a=2 b=4 c=6")},
			want: "a=1 b=2 c=3",
		},
		{
			name: "dynamic decision is kept when capacity changes but replicas do not",
			in:   Input{Replicas: 12, Placement: dyn, Clusters: rooms(50, 0, 3), Previous: decision("a=2 b=4 c=6")},
			want: "a=2 b=4 c=6",
		},
		{
			name: "new cluster joining a dynamic decision does not reshuffle",
			in: Input{Replicas: 12, Placement: dyn, Previous: decision("a=2 b=4 c=6"),
				Clusters: append(rooms(4, 8, 12), member("d", room(1000)))},
			want: "a=2 b=4 c=6",
		},
	})
}

func TestScheduleAggregated(t *testing.T) {
	rooms := func(a, b, c int64) []v1alpha1.MemberCluster {
		return []v1alpha1.MemberCluster{member("a", room(a)), member("b", room(b)), member("c", room(c))}
	}
	agg := v1alpha1.Placement{ReplicaScheduling: aggregate()}
	runCases(t, []schedCase{
		{
			name: "aggregated uses the roomiest cluster when it holds everything",
			in:   Input{Replicas: 12, Placement: agg, Clusters: rooms(6, 12, 18)},
			want: "c=12",
		},
		{
			name: "aggregated adds the next roomiest cluster only when needed",
			in:   Input{Replicas: 20, Placement: agg, Clusters: rooms(6, 12, 18)},
			want: "b=2 c=18",
		},
		{
			name: "aggregated keeps the previous cluster while it still fits",
			in:   Input{Replicas: 12, Placement: agg, Clusters: rooms(6, 0, 18), Previous: decision("b=12")},
			want: "b=12",
		},
		{
			name: "aggregated scale up fills the previous cluster before adding one",
			in:   Input{Replicas: 20, Placement: agg, Clusters: rooms(6, 12, 6), Previous: decision("c=12")},
			want: "b=2 c=18",
		},
		{
			name: "aggregated scale down drops the smallest cluster",
			in:   Input{Replicas: 15, Placement: agg, Clusters: rooms(6, 10, 0), Previous: decision("b=2 c=18")},
			want: "c=15",
		},
		{
			name: "aggregated fills every cluster and spreads the rest by capacity when short",
			in:   Input{Replicas: 10, Placement: agg, Clusters: rooms(2, 3, 0)},
			want: "a=4 b=6",
			check: func(t *testing.T, r Result) {
				if r.BeyondCapacity != 5 {
					t.Errorf("beyondCapacity = %d, want 5", r.BeyondCapacity)
				}
			},
		},
		{
			name: "aggregated puts everything on one cluster when none reports room",
			in:   Input{Replicas: 5, Placement: agg, Clusters: abc(noResources())},
			want: "a=5",
		},
	})
}

func TestScheduleSpreadConstraints(t *testing.T) {
	regions := []v1alpha1.MemberCluster{
		member("a", region("us"), room(18)),
		member("b", region("us"), room(12)),
		member("c", region("eu"), room(6)),
		member("d", region("ap"), room(30)),
	}
	runCases(t, []schedCase{
		{
			name: "spread minGroups by region not met is a SpreadConstraintsNotMet error",
			in: Input{Replicas: 2, Clusters: regions[:3], Placement: v1alpha1.Placement{
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldRegion, 3, 0)}}},
			wantErr:     ErrSpreadConstraintsNotMet,
			wantErrText: []string{"spread by region needs at least 3 groups but 2 are eligible (eu, us)"},
			check: func(t *testing.T, r Result) {
				t.Helper()
			},
		},
		{
			name: "spread minGroups counts only eligible clusters",
			in: Input{Replicas: 2, Clusters: []v1alpha1.MemberCluster{regions[0], member("c", region("eu"), notReady())}, Placement: v1alpha1.Placement{
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldRegion, 2, 0)}}},
			wantErr: ErrSpreadConstraintsNotMet,
		},
		{
			name: "spread maxGroups by region keeps the app in the roomiest regions",
			in: Input{Replicas: 2, Clusters: regions, Placement: v1alpha1.Placement{
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldRegion, 0, 2)}}},
			want: "a=2 b=2 d=2",
		},
		{
			name: "spread maxGroups by region prefers the regions the app runs in",
			in: Input{Replicas: 2, Clusters: regions, Previous: decision("c=2"), Placement: v1alpha1.Placement{
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldRegion, 0, 2)}}},
			want: "c=2 d=2",
		},
		{
			name: "spread maxGroups by cluster limits Duplicated to that many clusters",
			in: Input{Replicas: 2, Clusters: regions, Placement: v1alpha1.Placement{
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldCluster, 0, 2)}}},
			want: "a=2 d=2",
		},
		{
			name: "spread min and max groups by region both hold with Aggregated",
			in: Input{Replicas: 12, Clusters: regions[:3], Placement: v1alpha1.Placement{
				ReplicaScheduling: aggregate(),
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldRegion, 2, 2)}}},
			want: "a=11 c=1",
		},
		{
			name: "spread maxGroups by cluster picks the heaviest static weights",
			in: Input{Replicas: 12, Clusters: abc(), Placement: v1alpha1.Placement{
				ReplicaScheduling: static("a=1", "b=2", "c=3"),
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldCluster, 0, 2)}}},
			want: "b=5 c=7",
		},
		{
			name: "spread by zone filters out clusters without a zone",
			in: Input{Replicas: 1, Clusters: []v1alpha1.MemberCluster{member("a", zone("z1")), member("b")}, Placement: v1alpha1.Placement{
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldZone, 1, 0)}}},
			want:  "a=1",
			check: wantFiltered("b", FilterSpreadConstraint, "has no zone"),
		},
		{
			name: "spread by provider minGroups met with dynamic weights",
			in: Input{Replicas: 6, Clusters: []v1alpha1.MemberCluster{member("a", provider("aws"), room(10)), member("b", provider("gcp"), room(20))}, Placement: v1alpha1.Placement{
				ReplicaScheduling: dynamic(),
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldProvider, 2, 2)}}},
			want: "a=2 b=4",
		},
	})
}

func TestScheduleTaints(t *testing.T) {
	st := v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=1", "c=1")}
	noSched := taint("dedicated", "gpu", corev1.TaintEffectNoSchedule, nil)
	runCases(t, []schedCase{
		{
			name:  "NoSchedule taint takes no new replicas",
			in:    Input{Replicas: 12, Placement: st, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", noSched), member("c")}},
			want:  "a=6 c=6",
			check: wantFiltered("b", FilterTaintToleration, "taint dedicated=gpu:NoSchedule not tolerated"),
		},
		{
			name: "NoSchedule keeps existing replicas and scale up goes elsewhere",
			in: Input{Replicas: 24, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", noSched), member("c")}},
			want: "a=10 b=4 c=10",
		},
		{
			name: "NoSchedule keeps existing replicas unchanged when nothing else changes",
			in: Input{Replicas: 12, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", noSched), member("c")}},
			want: "a=4 b=4 c=4",
		},
		{
			name: "NoSchedule cluster gives up replicas on scale down",
			in: Input{Replicas: 3, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", noSched), member("c")}},
			want: "a=1 b=1 c=1",
		},
		{
			name: "NoSchedule keeps an existing Duplicated cluster",
			in: Input{Replicas: 5, Previous: decision("a=3 b=3"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", noSched), member("c", noSched)}},
			want: "a=5 b=5",
		},
		{
			name: "tolerated NoSchedule taint lets new replicas in",
			in: Input{Replicas: 1, Clusters: []v1alpha1.MemberCluster{member("a", noSched)}, Placement: v1alpha1.Placement{
				ClusterTolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}}},
			want: "a=1",
		},
		{
			name:  "not Ready cluster takes no new replicas",
			in:    Input{Replicas: 12, Placement: st, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", notReady()), member("c")}},
			want:  "a=6 c=6",
			check: wantFiltered("b", FilterReady, "not Ready"),
		},
		{
			name: "not Ready cluster keeps existing replicas",
			in: Input{Replicas: 12, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", notReady()), member("c")}},
			want: "a=4 b=4 c=4",
		},
		{
			name: "NoExecute unreachable taint within toleration keeps replicas and requeues at expiry",
			in: Input{Replicas: 12, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", unreachableSince(t0.Add(-2*time.Second))), member("c")}},
			want:        "a=4 b=4 c=4",
			wantRequeue: defaultToleration - 2*time.Second,
		},
		{
			name: "NoExecute unreachable taint past toleration moves replicas and reports the eviction",
			in: Input{Replicas: 12, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", unreachableSince(t0.Add(-11*time.Second))), member("c")}},
			want:        "a=6 c=6",
			wantEvicted: "b=4:ClusterUnreachable",
			check: func(t *testing.T, r Result) {
				if !r.Evicted[0].EvictionTime.Time.Equal(t0) {
					t.Errorf("evictionTime = %v, want %v", r.Evicted[0].EvictionTime, t0)
				}
				wantFiltered("b", FilterTaintToleration, "taint flotilla.dev/unreachable:NoExecute not tolerated since")(t, r)
			},
		},
		{
			name: "a MemberCluster being deleted is evicted at once, whatever the app tolerates",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: st.ReplicaScheduling,
				ClusterTolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
				Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", deleting()), member("c")}},
			want:        "a=6 c=6",
			wantEvicted: "b=4:ClusterDeleting",
			check:       wantFiltered("b", FilterTaintToleration, "being deleted"),
		},
		{
			name: "untolerated NoExecute taint evicts at once",
			in: Input{Replicas: 12, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", taint("maintenance", "", corev1.TaintEffectNoExecute, &t0)), member("c")}},
			want:        "a=6 c=6",
			wantEvicted: "b=4:TaintNotTolerated",
		},
		{
			name: "NoExecute toleration with seconds keeps replicas until it expires",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: st.ReplicaScheduling,
				ClusterTolerations: []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(60))}}},
				Previous: decision("a=4 b=4 c=4"),
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", taint("maintenance", "", corev1.TaintEffectNoExecute, ptr(t0.Add(-30*time.Second)))), member("c")}},
			want:        "a=4 b=4 c=4",
			wantRequeue: 30 * time.Second,
		},
		{
			name: "NoExecute taint within toleration takes no new replicas",
			in: Input{Replicas: 12, Placement: st,
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", unreachableSince(t0.Add(-4*time.Second))), member("c")}},
			want:  "a=6 c=6",
			check: wantFiltered("b", FilterTaintToleration, "tolerated until"),
		},
		{
			name: "NoExecute taint tolerated without seconds is tolerated for ever",
			in: Input{Replicas: 3, Placement: v1alpha1.Placement{
				ClusterTolerations: []corev1.Toleration{{Key: "maintenance", Operator: corev1.TolerationOpExists}}},
				Clusters: []v1alpha1.MemberCluster{member("a", taint("maintenance", "", corev1.TaintEffectNoExecute, ptr(t0.Add(-time.Hour))))}},
			want: "a=3",
		},
		{
			name: "explicit toleration naming the unreachable key replaces the default",
			in: Input{Replicas: 3, Previous: decision("a=3"), Placement: v1alpha1.Placement{
				ClusterTolerations: []corev1.Toleration{{Key: v1alpha1.TaintClusterUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
				Clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(t0.Add(-time.Hour)))}},
			want: "a=3",
		},
		{
			name: "wildcard toleration does not replace the default unreachable toleration",
			in: Input{Replicas: 3, Previous: decision("a=3 b=3"), Placement: v1alpha1.Placement{
				ClusterTolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
				Clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(t0.Add(-time.Hour))), member("b")}},
			want:        "b=3",
			wantEvicted: "a=3:ClusterUnreachable",
		},
		{
			name: "failover tolerationSeconds comes from the policy",
			in: Input{Replicas: 12, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Failover: &v1alpha1.FailoverPolicy{ClusterUnreachable: &v1alpha1.ClusterFailover{TolerationSeconds: ptr(int32(30))}},
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", unreachableSince(t0.Add(-11*time.Second))), member("c")}},
			want:        "a=4 b=4 c=4",
			wantRequeue: 19 * time.Second,
		},
		{
			name: "failover tolerationSeconds 0 moves replicas at once",
			in: Input{Replicas: 12, Placement: st, Previous: decision("a=4 b=4 c=4"),
				Failover: &v1alpha1.FailoverPolicy{ClusterUnreachable: &v1alpha1.ClusterFailover{TolerationSeconds: ptr(int32(0))}},
				Clusters: []v1alpha1.MemberCluster{member("a"), member("b", unreachableSince(t0)), member("c")}},
			want:        "a=6 c=6",
			wantEvicted: "b=4:ClusterUnreachable",
		},
		{
			name: "Duplicated failover picks a replacement cluster within maxGroups",
			in: Input{Replicas: 3, Previous: decision("a=3 b=3"), Placement: v1alpha1.Placement{
				SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldCluster, 0, 2)}},
				Clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(t0.Add(-time.Minute))), member("b"), member("c"), member("d")}},
			want:        "b=3 c=3",
			wantEvicted: "a=3:ClusterUnreachable",
		},
		{
			name: "dynamic failover moves the lost replicas by room",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: dynamic()}, Previous: decision("a=2 b=4 c=6"),
				Clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(t0.Add(-time.Minute))), member("b", room(1)), member("c", room(3))}},
			want:        "b=5 c=7",
			wantEvicted: "a=2:ClusterUnreachable",
		},
		{
			name: "aggregated failover moves to the roomiest cluster",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: aggregate()}, Previous: decision("a=12"),
				Clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(t0.Add(-time.Minute))), member("b", room(12)), member("c", room(20))}},
			want:        "c=12",
			wantEvicted: "a=12:ClusterUnreachable",
		},
	})
}

func TestScheduleFailback(t *testing.T) {
	st := v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")}
	gone := evictedAt("a", 2, EvictionReasonClusterUnreachable, t0.Add(-5*time.Minute))
	runCases(t, []schedCase{
		{
			name: "evicted cluster is carried forward while it is unreachable",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", gone),
				Clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(t0.Add(-6*time.Minute))), member("b"), member("c")}},
			want:        "b=5 c=7",
			wantEvicted: "a=2:ClusterUnreachable",
			check:       wantFiltered("a", FilterFailback, "evicted (ClusterUnreachable)"),
		},
		{
			name: "failback after window returns the cluster's share",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", gone),
				Clusters: []v1alpha1.MemberCluster{member("a", readySince(t0.Add(-31*time.Second))), member("b"), member("c")}},
			want: "a=2 b=4 c=6",
		},
		{
			name: "failback waits for the window and says when to look again",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", gone),
				Clusters: []v1alpha1.MemberCluster{member("a", readySince(t0.Add(-10*time.Second))), member("b"), member("c")}},
			want:        "b=5 c=7",
			wantEvicted: "a=2:ClusterUnreachable",
			wantRequeue: 20 * time.Second,
			check:       wantFiltered("a", FilterFailback, "fails back at"),
		},
		{
			name: "failback window counts from the eviction when Ready never changed",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", evictedAt("a", 2, EvictionReasonTaintNotTolerated, t0.Add(-10*time.Second))),
				Clusters: abc()},
			want:        "b=5 c=7",
			wantEvicted: "a=2:TaintNotTolerated",
			wantRequeue: 20 * time.Second,
		},
		{
			name: "failback window comes from the policy",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", gone),
				Failover: &v1alpha1.FailoverPolicy{Failback: &v1alpha1.FailbackPolicy{StabilizationWindowSeconds: ptr(int32(5))}},
				Clusters: []v1alpha1.MemberCluster{member("a", readySince(t0.Add(-10*time.Second))), member("b"), member("c")}},
			want: "a=2 b=4 c=6",
		},
		{
			name: "failback disabled keeps the evicted cluster excluded",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", gone),
				Failover: &v1alpha1.FailoverPolicy{Failback: &v1alpha1.FailbackPolicy{Enabled: ptr(false)}},
				Clusters: abc()},
			want:        "b=5 c=7",
			wantEvicted: "a=2:ClusterUnreachable",
			check:       wantFiltered("a", FilterFailback, "failback disabled"),
		},
		{
			name: "failback needs the cluster untainted, not only Ready",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", gone),
				Clusters: []v1alpha1.MemberCluster{member("a", taint("dedicated", "", corev1.TaintEffectNoSchedule, nil)), member("b"), member("c")}},
			want:        "b=5 c=7",
			wantEvicted: "a=2:ClusterUnreachable",
			check:       wantFiltered("a", FilterFailback, "waiting for recovery"),
		},
		{
			name: "evicted entry of a deleted cluster is dropped",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=5 c=7", gone),
				Clusters: abc()[1:]},
			want: "b=5 c=7",
		},
		{
			name: "dynamic failback gives the returning cluster its replicas back",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: dynamic()}, Previous: decision("b=5 c=7", gone),
				Clusters: []v1alpha1.MemberCluster{member("a", readySince(t0.Add(-time.Minute))), member("b", room(3)), member("c", room(5))}},
			want: "a=2 b=4 c=6",
		},
		{
			name: "aggregated failback moves the replicas home",
			in: Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: aggregate()},
				Previous: decision("c=12", evictedAt("a", 12, EvictionReasonClusterUnreachable, t0.Add(-5*time.Minute))),
				Clusters: []v1alpha1.MemberCluster{member("a", room(12)), member("b"), member("c", room(8))}},
			want: "a=12",
		},
		{
			name: "Duplicated failback takes the returning cluster back within maxGroups",
			in: Input{Replicas: 3, Previous: decision("b=3 c=3", evictedAt("a", 3, EvictionReasonClusterUnreachable, t0.Add(-5*time.Minute))),
				Placement: v1alpha1.Placement{SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldCluster, 0, 2)}},
				Clusters:  abc()},
			want: "a=3 b=3",
		},
		{
			name: "requeue is the earliest of toleration expiry and failback",
			in: Input{Replicas: 12, Placement: st, Previous: decision("b=4 c=8", gone),
				Clusters: []v1alpha1.MemberCluster{member("a", readySince(t0.Add(-10*time.Second))), member("b", unreachableSince(t0.Add(-3*time.Second))), member("c")}},
			want:        "b=4 c=8",
			wantEvicted: "a=2:ClusterUnreachable",
			wantRequeue: defaultToleration - 3*time.Second,
		},
	})
}

// step is one call of a sequence: the clusters at a time, and what the
// decision must be; each call's decision is the next call's previous one.
type step struct {
	at          time.Duration // after t0
	clusters    []v1alpha1.MemberCluster
	want        string
	wantEvicted string
	wantAff     string
}

func runSteps(t *testing.T, in Input, steps []step) {
	t.Helper()
	var prev *v1alpha1.PlacementDecision
	for i, st := range steps {
		in.Now, in.Clusters, in.Previous = t0.Add(st.at), st.clusters, prev
		res, err := Schedule(in)
		if err != nil {
			t.Fatalf("step %d (t0+%v): %v", i, st.at, err)
		}
		if got := targets(res.Clusters); got != st.want {
			t.Errorf("step %d (t0+%v): clusters = %q, want %q", i, st.at, got, st.want)
		}
		if got := evictions(res.Evicted); got != st.wantEvicted {
			t.Errorf("step %d (t0+%v): evicted = %q, want %q", i, st.at, got, st.wantEvicted)
		}
		if res.AffinityName != st.wantAff {
			t.Errorf("step %d (t0+%v): affinityName = %q, want %q", i, st.at, res.AffinityName, st.wantAff)
		}
		prev = res.Decision(prev, 1, in.Now)
	}
}

// defaultToleration is how long the default failover policy tolerates the
// unreachable taint.
const defaultToleration = time.Duration(v1alpha1.DefaultUnreachableTolerationSeconds) * time.Second

func TestFailoverAndFailbackSequence(t *testing.T) {
	s := func(d time.Duration) time.Time { return t0.Add(d) }
	b, c := member("b"), member("c")
	runSteps(t, Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")}}, []step{
		{at: 0, clusters: abc(), want: "a=2 b=4 c=6"},
		{at: defaultToleration - time.Second, clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(s(0))), b, c}, want: "a=2 b=4 c=6"},
		{at: 10 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(s(0))), b, c}, want: "b=5 c=7", wantEvicted: "a=2:ClusterUnreachable"},
		{at: 60 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(s(0))), b, c}, want: "b=5 c=7", wantEvicted: "a=2:ClusterUnreachable"},
		{at: 70 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", readySince(s(65*time.Second))), b, c}, want: "b=5 c=7", wantEvicted: "a=2:ClusterUnreachable"},
		{at: 95 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", readySince(s(65*time.Second))), b, c}, want: "a=2 b=4 c=6"},
		{at: 96 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", readySince(s(65*time.Second))), b, c}, want: "a=2 b=4 c=6"},
	})
}

func TestFlappingClusterDoesNotChurn(t *testing.T) {
	s := func(d time.Duration) time.Time { return t0.Add(d) }
	b, c := member("b"), member("c")
	gone := evictedAt("a", 2, EvictionReasonClusterUnreachable, s(-time.Minute))
	in := Input{Replicas: 12, Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")}}
	var prev = decision("b=5 c=7", gone)
	// The cluster comes back, goes away and comes back every 20s, never
	// staying Ready for the 30s window.
	for i := 0; i < 12; i++ {
		at := time.Duration(i) * 10 * time.Second
		a := member("a", readySince(s(at-5*time.Second)))
		if i%2 == 1 {
			a = member("a", unreachableSince(s(at-5*time.Second)))
		}
		in.Now, in.Clusters, in.Previous = s(at), []v1alpha1.MemberCluster{a, b, c}, prev
		res, err := Schedule(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := targets(res.Clusters); got != "b=5 c=7" {
			t.Fatalf("call %d: clusters = %q, want b=5 c=7 (no churn)", i, got)
		}
		if got := evictions(res.Evicted); got != "a=2:ClusterUnreachable" {
			t.Fatalf("call %d: evicted = %q", i, got)
		}
		next := res.Decision(prev, 1, in.Now)
		if !SameDecision(prev, next) {
			t.Fatalf("call %d: decision changed", i)
		}
		prev = next
	}
}

func TestFallbackAffinityReturnsToPrimaryAfterFailback(t *testing.T) {
	s := func(d time.Duration) time.Time { return t0.Add(d) }
	in := Input{Replicas: 2, Placement: v1alpha1.Placement{ClusterAffinities: []v1alpha1.ClusterAffinityTerm{
		{AffinityName: "primary", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: []string{"a"}}},
		{AffinityName: "backup", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: []string{"b"}}},
	}}}
	b := member("b")
	runSteps(t, in, []step{
		{at: 0, clusters: []v1alpha1.MemberCluster{member("a"), b}, want: "a=2", wantAff: "primary"},
		{at: defaultToleration - time.Second, clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(s(0))), b}, want: "a=2", wantAff: "primary"},
		{at: 10 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", unreachableSince(s(0))), b}, want: "b=2", wantAff: "backup", wantEvicted: "a=2:ClusterUnreachable"},
		{at: 30 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", readySince(s(20*time.Second))), b}, want: "b=2", wantAff: "backup", wantEvicted: "a=2:ClusterUnreachable"},
		{at: 50 * time.Second, clusters: []v1alpha1.MemberCluster{member("a", readySince(s(20*time.Second))), b}, want: "a=2", wantAff: "primary"},
	})
}

func TestUnschedulableErrorNamesEachCluster(t *testing.T) {
	in := Input{
		Replicas: 3, Now: t0, Previous: decision("member-b=3"),
		Placement: v1alpha1.Placement{ClusterAffinity: &v1alpha1.ClusterAffinity{ClusterNames: []string{"member-b", "member-c"}}},
		Clusters: []v1alpha1.MemberCluster{
			member("member-a"),
			member("member-b", unreachableSince(t0.Add(-time.Minute))),
			member("member-c", notReady()),
		},
	}
	res, err := Schedule(in)
	var serr *ScheduleError
	if !errors.As(err, &serr) {
		t.Fatalf("want a *ScheduleError, got %v", err)
	}
	if !errors.Is(err, ErrUnschedulable) || errors.Is(err, ErrSpreadConstraintsNotMet) || serr.Reason != v1alpha1.ReasonUnschedulable {
		t.Errorf("reason = %q, want %q", serr.Reason, v1alpha1.ReasonUnschedulable)
	}
	want := "no cluster can run the app: member-a: not in clusterAffinity (clusterNames); " +
		"member-b: taint flotilla.dev/unreachable:NoExecute not tolerated since " + t0.Add(-time.Minute+defaultToleration).UTC().Format(time.RFC3339) + "; " +
		"member-c: not Ready"
	if err.Error() != want {
		t.Errorf("error =\n  %s\nwant\n  %s", err, want)
	}
	if got := evictions(res.Evicted); got != "member-b=3:ClusterUnreachable" {
		t.Errorf("evicted on error = %q", got)
	}
}

func TestInvalidInput(t *testing.T) {
	for name, in := range map[string]Input{
		"negative replicas":  {Replicas: -1},
		"bad label selector": {Placement: v1alpha1.Placement{ClusterAffinity: &v1alpha1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}}}}},
		"unknown type":       {Placement: v1alpha1.Placement{ReplicaScheduling: &v1alpha1.ReplicaSchedulingStrategy{ReplicaSchedulingType: "Sideways"}}},
		"unknown spread":     {Placement: v1alpha1.Placement{SpreadConstraints: []v1alpha1.SpreadConstraint{{SpreadByField: "rack"}}}},
		"min above max":      {Placement: v1alpha1.Placement{SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldRegion, 3, 2)}}},
	} {
		t.Run(name, func(t *testing.T) {
			in.Clusters = abc()
			_, err := Schedule(in)
			var serr *ScheduleError
			if err == nil || errors.As(err, &serr) {
				t.Errorf("want a plain input error, got %v", err)
			}
		})
	}
}

func TestUnchangedInputsGiveUnchangedDecision(t *testing.T) {
	in := Input{Replicas: 12, Now: t0, Clusters: abc(), Placement: v1alpha1.Placement{ReplicaScheduling: static("a=1", "b=2", "c=3")}}
	res, err := Schedule(in)
	if err != nil {
		t.Fatal(err)
	}
	first := res.Decision(nil, 1, t0)
	in.Previous, in.Now = first, t0.Add(time.Hour)
	res, err = Schedule(in)
	if err != nil {
		t.Fatal(err)
	}
	second := res.Decision(first, 2, in.Now)
	if !SameDecision(first, second) || !second.LastScheduleTime.Equal(first.LastScheduleTime) {
		t.Errorf("decision changed: %+v -> %+v", first, second)
	}
	if second.ScheduledGeneration != 2 {
		t.Errorf("scheduledGeneration = %d, want 2", second.ScheduledGeneration)
	}
	in.Replicas = 13
	res, _ = Schedule(in)
	third := res.Decision(second, 3, in.Now)
	if SameDecision(second, third) || !third.LastScheduleTime.Equal(ptr(metav1.NewTime(in.Now))) {
		t.Errorf("changed decision kept LastScheduleTime %v", third.LastScheduleTime)
	}
}

func TestInputFor(t *testing.T) {
	app := &v1alpha1.MyApp{Spec: v1alpha1.MyAppSpec{
		Template: &v1alpha1.PodTemplate{Resources: corev1.ResourceRequirements{
			Limits:   list("cpu", "2", "memory", "1Gi"),
			Requests: list("cpu", "500m"),
		}},
	}, Status: v1alpha1.MyAppStatus{Placement: decision("a=1")}}
	in := InputFor(app, abc(), t0)
	if in.Replicas != 1 {
		t.Errorf("replicas = %d, want the default 1", in.Replicas)
	}
	cpu, mem := in.Requests[corev1.ResourceCPU], in.Requests[corev1.ResourceMemory]
	if cpu.String() != "500m" || mem.String() != "1Gi" {
		t.Errorf("requests = %v, want cpu 500m and memory defaulted from limits", in.Requests)
	}
	if in.Previous != app.Status.Placement || !in.Now.Equal(t0) || len(in.Clusters) != 3 {
		t.Errorf("input not taken from the app: %+v", in)
	}
}

func TestApportion(t *testing.T) {
	for _, tc := range []struct {
		total         int64
		weights, prev []int64
		want          []int64
	}{
		{12, []int64{1, 2, 3}, nil, []int64{2, 4, 6}},
		{12, []int64{6, 12, 18}, nil, []int64{2, 4, 6}},
		{10, []int64{1, 1, 1}, nil, []int64{4, 3, 3}},
		{10, []int64{1, 1, 1}, []int64{3, 3, 4}, []int64{3, 3, 4}},
		{5, []int64{0, 0}, nil, []int64{3, 2}},
		{5, []int64{0, 1}, nil, []int64{0, 5}},
		{0, []int64{1, 2}, nil, []int64{0, 0}},
		{100000, []int64{maxWeight, maxWeight, 1}, nil, []int64{50000, 50000, 0}},
	} {
		out := make([]int64, len(tc.weights))
		apportion(tc.total, tc.weights, tc.prev, out)
		if !slicesEqual(out, tc.want) {
			t.Errorf("apportion(%d, %v, %v) = %v, want %v", tc.total, tc.weights, tc.prev, out, tc.want)
		}
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
