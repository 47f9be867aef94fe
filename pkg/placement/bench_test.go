package placement

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// benchClusters returns n Ready clusters over 10 regions, 30 zones and 3
// providers, with varied spare capacity; every 50th has a NoSchedule taint.
func benchClusters(n int) []v1alpha1.MemberCluster {
	out := make([]v1alpha1.MemberCluster, n)
	for i := range out {
		tiers := []string{"gold", "silver", "bronze"}
		mc := v1alpha1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("member-%05d", i), Labels: map[string]string{
				"env": "prod", "tier": tiers[i%3],
			}},
			Spec: v1alpha1.MemberClusterSpec{
				Region:   fmt.Sprintf("region-%d", i%10),
				Zone:     fmt.Sprintf("zone-%d", i%30),
				Provider: []string{"aws", "gcp", "onprem"}[i%3],
			},
			Status: v1alpha1.MemberClusterStatus{
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-24 * 3600e9))}},
				Resources: &v1alpha1.ResourceSummary{
					Allocatable: corev1.ResourceList{
						corev1.ResourceCPU:    resource.MustParse("64"),
						corev1.ResourceMemory: resource.MustParse("256Gi"),
						corev1.ResourcePods:   resource.MustParse("330"),
					},
					Allocated: corev1.ResourceList{
						corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(i%50)*1000, resource.DecimalSI),
						corev1.ResourceMemory: *resource.NewQuantity(int64(i%40)<<30, resource.BinarySI),
						corev1.ResourcePods:   *resource.NewQuantity(int64(i%100), resource.DecimalSI),
					},
					Nodes: 3,
				},
			},
		}
		if i%50 == 49 {
			mc.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}
		}
		out[i] = mc
	}
	return out
}

// benchPlacements are the modes benchmarked, each with a label-selector
// affinity and a region spread constraint (min 2, max 8 regions).
func benchPlacements() []struct {
	name string
	rs   *v1alpha1.ReplicaSchedulingStrategy
} {
	byTier := func(tier string, w int64) v1alpha1.StaticClusterWeight {
		return v1alpha1.StaticClusterWeight{
			TargetCluster: v1alpha1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": tier}}},
			Weight:        w,
		}
	}
	return []struct {
		name string
		rs   *v1alpha1.ReplicaSchedulingStrategy
	}{
		{"Duplicated", nil},
		{"StaticWeighted", divided(v1alpha1.ReplicaDivisionWeighted, &v1alpha1.ClusterPreferences{
			StaticWeightList: []v1alpha1.StaticClusterWeight{byTier("gold", 3), byTier("silver", 2), byTier("bronze", 1)},
		})},
		{"DynamicWeighted", dynamic()},
		{"Aggregated", aggregate()},
	}
}

func benchInput(n int, rs *v1alpha1.ReplicaSchedulingStrategy) Input {
	replicas := int32(3)
	if rs != nil {
		replicas = int32(10 * n)
	}
	return Input{
		Replicas: replicas,
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Placement: v1alpha1.Placement{
			ClusterAffinity:   &v1alpha1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
			SpreadConstraints: []v1alpha1.SpreadConstraint{spread(v1alpha1.SpreadByFieldRegion, 2, 8)},
			ReplicaScheduling: rs,
		},
		Clusters: benchClusters(n),
		Now:      t0,
	}
}

// BenchmarkSchedule measures one decision per mode and cluster count:
// "first" without a previous decision, "steady" re-deciding on the
// previous decision (what the hub does on every MyApp or MemberCluster
// change). Besides wall time it reports cpu-ns/op, the process's CPU time
// per decision (garbage collection included), which a busy machine does
// not inflate.
func BenchmarkSchedule(b *testing.B) {
	for _, p := range benchPlacements() {
		for _, n := range []int{10, 100, 1000, 5000} {
			in := benchInput(n, p.rs)
			first, err := Schedule(in)
			if err != nil {
				b.Fatalf("%s/%d: %v", p.name, n, err)
			}
			steady := in
			steady.Previous = first.Decision(nil, 1, t0)
			for _, c := range []struct {
				name string
				in   Input
			}{{"first", in}, {"steady", steady}} {
				b.Run(fmt.Sprintf("%s/clusters=%d/%s", p.name, n, c.name), func(b *testing.B) {
					b.ReportAllocs()
					start := cpuTime()
					for b.Loop() {
						if _, err := Schedule(c.in); err != nil {
							b.Fatal(err)
						}
					}
					if cpu := cpuTime() - start; cpu > 0 {
						b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
					}
				})
			}
		}
	}
}
