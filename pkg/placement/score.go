package placement

import (
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// maxWeight bounds weights and capacities so that replicas * weight never
// overflows an int64 (replicas are an int32 too).
const maxWeight = math.MaxInt32

// request is one resource a replica asks for, as an integer n in whole
// units, or in milli-units when milli is set (cpu, and any request that is
// not a whole number), so that the arithmetic is exact and cheap.
type request struct {
	name  corev1.ResourceName
	n     int64
	milli bool
}

// compileRequests returns the per-replica requests that capacity is
// measured in: the positive requests plus one pod slot, sorted by name.
func compileRequests(list corev1.ResourceList) []request {
	out := make([]request, 0, len(list)+1)
	out = append(out, request{name: corev1.ResourcePods, n: 1})
	for name, q := range list {
		if name == corev1.ResourcePods || q.Sign() <= 0 {
			continue
		}
		r := request{name: name, n: q.Value()}
		if m := q.MilliValue(); name == corev1.ResourceCPU || m%1000 != 0 {
			r.n, r.milli = m, true
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b request) int { return strings.Compare(string(a.name), string(b.name)) })
	return out
}

// room returns how many more replicas cluster c can take, computed once
// per call.
func (s *scheduler) room(c *cluster) int64 {
	if !c.roomKnown {
		reqs := s.requests
		if own, ok := s.clusterRequests[c.mc.Name]; ok {
			reqs = own
		}
		c.room, c.roomKnown = availableReplicas(c.mc.Status.Resources, reqs), true
	}
	return c.room
}

// availableReplicas is how many more replicas fit in a cluster: for every
// requested resource, (allocatable - allocated) / request, and the least of
// those. A cluster without a resource summary, or whose summary lacks a
// requested resource, has room for none: unknown capacity should not draw
// replicas ahead of clusters that reported room, and a cluster without, say,
// GPUs really has no room for a replica that asks for one. Such clusters
// still take replicas when every cluster is full (see Result.BeyondCapacity).
func availableReplicas(rs *v1alpha1.ResourceSummary, reqs []request) int64 {
	if rs == nil {
		return 0
	}
	n := int64(maxWeight)
	for i := range reqs {
		alloc, ok := rs.Allocatable[reqs[i].name]
		if !ok {
			return 0
		}
		used := rs.Allocated[reqs[i].name]
		if f := fit(&alloc, &used, &reqs[i]); f < n {
			n = f
		}
	}
	return n
}

// fit is how many times r fits in alloc - used.
func fit(alloc, used *resource.Quantity, r *request) int64 {
	var a, u int64
	if r.milli {
		a, u = alloc.MilliValue(), used.MilliValue()
	} else {
		a, u = alloc.Value(), used.Value()
	}
	if r.n <= 0 || a <= u {
		return 0
	}
	return min((a-u)/r.n, maxWeight)
}

// staticWeight is one compiled staticWeightList entry.
type staticWeight struct {
	aff    *affinity
	weight int64
}

// compileStaticWeights compiles the weight list of a Weighted placement;
// nil means equal weights.
func compileStaticWeights(list []v1alpha1.StaticClusterWeight) ([]staticWeight, error) {
	out := make([]staticWeight, 0, len(list))
	for i := range list {
		aff, err := compileAffinity(&list[i].TargetCluster)
		if err != nil {
			return nil, err
		}
		if aff == nil {
			aff = &affinity{}
		}
		out = append(out, staticWeight{aff: aff, weight: min(max(list[i].Weight, 0), maxWeight)})
	}
	return out, nil
}

// weightOf returns a cluster's static weight: the largest weight of the
// entries that match it (as Karmada does), 0 when none does, 1 for all when
// there is no list.
func (s *scheduler) weightOf(c *cluster) int64 {
	if s.weights == nil {
		return 1
	}
	var w int64
	for i := range s.weights {
		if s.weights[i].weight > w {
			if ok, _ := s.weights[i].aff.match(c.mc); ok {
				w = s.weights[i].weight
			}
		}
	}
	return w
}
