package placement

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// t0 is the "now" of most tests; clusters are Ready since an hour before.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type clusterOpt func(*v1alpha1.MemberCluster)

// member returns a Ready cluster with room for 100 replicas of a pod that
// requests nothing.
func member(name string, opts ...clusterOpt) v1alpha1.MemberCluster {
	mc := v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	readySince(t0.Add(-time.Hour))(&mc)
	room(100)(&mc)
	for _, o := range opts {
		o(&mc)
	}
	return mc
}

func region(r string) clusterOpt   { return func(mc *v1alpha1.MemberCluster) { mc.Spec.Region = r } }
func zone(z string) clusterOpt     { return func(mc *v1alpha1.MemberCluster) { mc.Spec.Zone = z } }
func provider(p string) clusterOpt { return func(mc *v1alpha1.MemberCluster) { mc.Spec.Provider = p } }

func label(k, v string) clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		if mc.Labels == nil {
			mc.Labels = map[string]string{}
		}
		mc.Labels[k] = v
	}
}

// readySince sets Ready True with that LastTransitionTime.
func readySince(t time.Time) clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		mc.Status.Conditions = []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonHeartbeating, LastTransitionTime: metav1.NewTime(t),
		}}
	}
}

func notReady() clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		mc.Status.Conditions = []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: v1alpha1.ReasonHeartbeatMissed, LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute)),
		}}
	}
}

// unreachableSince taints the cluster unreachable (NoExecute) at t and
// marks it not Ready, as the hub's health controller does.
func unreachableSince(t time.Time) clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		notReady()(mc)
		taint(v1alpha1.TaintClusterUnreachable, "", corev1.TaintEffectNoExecute, &t)(mc)
	}
}

// deleting marks the MemberCluster deleted (held by the drain finalizer).
func deleting() clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		ts := metav1.NewTime(t0.Add(-time.Second))
		mc.DeletionTimestamp = &ts
		mc.Finalizers = []string{v1alpha1.MemberClusterFinalizer}
	}
}

func taint(key, value string, effect corev1.TaintEffect, added *time.Time) clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		t := corev1.Taint{Key: key, Value: value, Effect: effect}
		if added != nil {
			ta := metav1.NewTime(*added)
			t.TimeAdded = &ta
		}
		mc.Spec.Taints = append(mc.Spec.Taints, t)
	}
}

// room gives the cluster room for n more pods (and plenty of cpu and
// memory).
func room(n int64) clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		mc.Status.Resources = &v1alpha1.ResourceSummary{
			Allocatable: corev1.ResourceList{
				corev1.ResourcePods:   *resource.NewQuantity(n+10, resource.DecimalSI),
				corev1.ResourceCPU:    resource.MustParse("1000"),
				corev1.ResourceMemory: resource.MustParse("1Ti"),
			},
			Allocated: corev1.ResourceList{
				corev1.ResourcePods: *resource.NewQuantity(10, resource.DecimalSI),
				corev1.ResourceCPU:  resource.MustParse("1"),
			},
			Nodes: 3,
		}
	}
}

func resources(alloc, used corev1.ResourceList) clusterOpt {
	return func(mc *v1alpha1.MemberCluster) {
		mc.Status.Resources = &v1alpha1.ResourceSummary{Allocatable: alloc, Allocated: used}
	}
}

func noResources() clusterOpt {
	return func(mc *v1alpha1.MemberCluster) { mc.Status.Resources = nil }
}

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// Placements.

func divided(pref v1alpha1.ReplicaDivisionPreference, wp *v1alpha1.ClusterPreferences) *v1alpha1.ReplicaSchedulingStrategy {
	return &v1alpha1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType:     v1alpha1.ReplicaSchedulingDivided,
		ReplicaDivisionPreference: pref,
		WeightPreference:          wp,
	}
}

// static builds a static weight list from "name=weight" pairs.
func static(pairs ...string) *v1alpha1.ReplicaSchedulingStrategy {
	wp := &v1alpha1.ClusterPreferences{}
	for _, p := range pairs {
		name, w, _ := strings.Cut(p, "=")
		var weight int64
		fmt.Sscan(w, &weight)
		wp.StaticWeightList = append(wp.StaticWeightList, v1alpha1.StaticClusterWeight{
			TargetCluster: v1alpha1.ClusterAffinity{ClusterNames: []string{name}},
			Weight:        weight,
		})
	}
	return divided(v1alpha1.ReplicaDivisionWeighted, wp)
}

func dynamic() *v1alpha1.ReplicaSchedulingStrategy {
	return divided(v1alpha1.ReplicaDivisionWeighted, &v1alpha1.ClusterPreferences{DynamicWeight: v1alpha1.DynamicWeightAvailableReplicas})
}

func aggregate() *v1alpha1.ReplicaSchedulingStrategy {
	return divided(v1alpha1.ReplicaDivisionAggregated, nil)
}

func spread(field v1alpha1.SpreadByField, minGroups, maxGroups int32) v1alpha1.SpreadConstraint {
	sc := v1alpha1.SpreadConstraint{SpreadByField: field}
	if minGroups > 0 {
		sc.MinGroups = &minGroups
	}
	if maxGroups > 0 {
		sc.MaxGroups = &maxGroups
	}
	return sc
}

// decision parses "a=2 b=4" into a previous decision.
func decision(s string, evicted ...v1alpha1.EvictedCluster) *v1alpha1.PlacementDecision {
	d := &v1alpha1.PlacementDecision{Evicted: evicted}
	for _, f := range strings.Fields(s) {
		name, r, _ := strings.Cut(f, "=")
		var n int32
		fmt.Sscan(r, &n)
		d.Clusters = append(d.Clusters, v1alpha1.TargetCluster{Name: name, Replicas: n})
	}
	return d
}

func evictedAt(name string, replicas int32, reason string, t time.Time) v1alpha1.EvictedCluster {
	return v1alpha1.EvictedCluster{Name: name, Replicas: replicas, Reason: reason, EvictionTime: metav1.NewTime(t)}
}

// targets formats clusters as "a=2 b=4".
func targets(cs []v1alpha1.TargetCluster) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s=%d", c.Name, c.Replicas)
	}
	return strings.Join(parts, " ")
}

// evictions formats evicted clusters as "a=2:ClusterUnreachable".
func evictions(es []v1alpha1.EvictedCluster) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = fmt.Sprintf("%s=%d:%s", e.Name, e.Replicas, e.Reason)
	}
	return strings.Join(parts, " ")
}

func ptr[T any](v T) *T { return &v }
