package placement

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestScores(t *testing.T) {
	withRoom := func(name string, pods int64) v1alpha1.MemberCluster {
		mc := v1alpha1.MemberCluster{}
		mc.Name = name
		mc.Status.Resources = &v1alpha1.ResourceSummary{
			Allocatable: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)},
		}
		return mc
	}
	clusters := []v1alpha1.MemberCluster{withRoom("b", 7), withRoom("a", 3)}
	divided := func(wp *v1alpha1.ClusterPreferences, pref v1alpha1.ReplicaDivisionPreference) v1alpha1.Placement {
		return v1alpha1.Placement{ReplicaScheduling: &v1alpha1.ReplicaSchedulingStrategy{
			ReplicaSchedulingType: v1alpha1.ReplicaSchedulingDivided, ReplicaDivisionPreference: pref, WeightPreference: wp}}
	}
	for _, tc := range []struct {
		name      string
		placement v1alpha1.Placement
		want      []ClusterScore
	}{
		{"duplicated", v1alpha1.Placement{}, []ClusterScore{{"a", ScoreNone, 0}, {"b", ScoreNone, 0}}},
		{"duplicated with maxGroups orders by room", v1alpha1.Placement{SpreadConstraints: []v1alpha1.SpreadConstraint{{SpreadByField: v1alpha1.SpreadByFieldCluster, MaxGroups: ptr(int32(1))}}},
			[]ClusterScore{{"a", ScoreAvailableReplicas, 3}, {"b", ScoreAvailableReplicas, 7}}},
		{"equal weights", divided(nil, ""), []ClusterScore{{"a", ScoreStaticWeight, 1}, {"b", ScoreStaticWeight, 1}}},
		{"static weights", divided(&v1alpha1.ClusterPreferences{StaticWeightList: []v1alpha1.StaticClusterWeight{
			{TargetCluster: v1alpha1.ClusterAffinity{ClusterNames: []string{"b"}}, Weight: 4}}}, v1alpha1.ReplicaDivisionWeighted),
			[]ClusterScore{{"a", ScoreStaticWeight, 0}, {"b", ScoreStaticWeight, 4}}},
		{"dynamic", divided(&v1alpha1.ClusterPreferences{DynamicWeight: v1alpha1.DynamicWeightAvailableReplicas}, v1alpha1.ReplicaDivisionWeighted),
			[]ClusterScore{{"a", ScoreAvailableReplicas, 3}, {"b", ScoreAvailableReplicas, 7}}},
		{"aggregated", divided(nil, v1alpha1.ReplicaDivisionAggregated), []ClusterScore{{"a", ScoreAvailableReplicas, 3}, {"b", ScoreAvailableReplicas, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Scores(Input{Placement: tc.placement, Replicas: 2, Clusters: clusters})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("cluster %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	if _, err := Scores(Input{Replicas: -1}); err == nil {
		t.Error("negative replicas: no error")
	}
}
