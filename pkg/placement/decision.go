package placement

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Decision turns r into the PlacementDecision the hub records in the
// MyApp's status.placement, given the one recorded now (or nil).
// LastScheduleTime moves to now only when the clusters, evictions or
// affinity group changed, so an unchanged decision compares equal to the
// previous one apart from ScheduledGeneration and the hub can skip the
// write. Times are kept at the second, as the API stores them.
func (r *Result) Decision(previous *v1alpha1.PlacementDecision, generation int64, now time.Time) *v1alpha1.PlacementDecision {
	d := &v1alpha1.PlacementDecision{
		Clusters:            slices.Clone(r.Clusters),
		Evicted:             slices.Clone(r.Evicted),
		AffinityName:        r.AffinityName,
		ScheduledGeneration: generation,
	}
	if previous != nil && previous.LastScheduleTime != nil && SameDecision(previous, d) {
		t := *previous.LastScheduleTime
		d.LastScheduleTime = &t
	} else {
		t := metav1.NewTime(now).Rfc3339Copy()
		d.LastScheduleTime = &t
	}
	return d
}

// SameDecision says whether a and b place the same replicas on the same
// clusters, evict the same ones at the same times and use the same affinity
// group; ScheduledGeneration and LastScheduleTime are not compared. Nil
// equals an empty decision.
func SameDecision(a, b *v1alpha1.PlacementDecision) bool {
	if a == nil {
		a = &v1alpha1.PlacementDecision{}
	}
	if b == nil {
		b = &v1alpha1.PlacementDecision{}
	}
	return a.AffinityName == b.AffinityName &&
		slices.Equal(a.Clusters, b.Clusters) &&
		slices.EqualFunc(a.Evicted, b.Evicted, func(x, y v1alpha1.EvictedCluster) bool {
			return x.Name == y.Name && x.Replicas == y.Replicas && x.Reason == y.Reason && x.EvictionTime.Equal(&y.EvictionTime)
		})
}
