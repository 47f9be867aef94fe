package placement

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// cluster is one MemberCluster with what this call learned about it that
// does not depend on the affinity group: its health, the replicas it held
// in the previous decision and its eviction / failback state. It is kept
// small, with what is rarely set behind x, because a call makes one per
// member cluster.
type cluster struct {
	mc   *v1alpha1.MemberCluster
	name string

	// prev is the replicas the previous decision gave it; inPrev says it
	// was listed there at all (Duplicated lists clusters with 0).
	prev   int32
	inPrev bool
	// evict says a NoExecute taint is not tolerated (any more): the
	// cluster runs nothing.
	evict bool
	// returning says the cluster fails back in this call; returnReplicas
	// is what it ran when it was evicted.
	returning      bool
	returnReplicas int32

	// room is how many more replicas fit (see score.go), computed lazily.
	roomKnown bool
	room      int64

	// x is nil for a healthy cluster without an eviction entry.
	x *issues
}

// issues is what is wrong with a cluster, or was.
type issues struct {
	// block, when set, is why the cluster may take no new replicas (a
	// NoSchedule taint, a NoExecute taint tolerated for a while, not
	// Ready); blockFilter names the filter. The cluster keeps what it has.
	block, blockFilter string
	// evictReason (an EvictionReason*) and evictMsg say why it is evicted.
	evictReason, evictMsg string
	// expiry is the earliest time a tolerated NoExecute taint runs out.
	expiry time.Time
	// evicted is the eviction entry carried forward; while it is set the
	// cluster gets no replicas. failbackMsg says why it has not failed back.
	evicted     *v1alpha1.EvictedCluster
	failbackMsg string
}

// issues returns c.x, allocating it on first use.
func (c *cluster) issues() *issues {
	if c.x == nil {
		c.x = &issues{}
	}
	return c.x
}

// block is why the cluster may take no new replicas, "" when it may.
func (c *cluster) block() string {
	if c.x == nil {
		return ""
	}
	return c.x.block
}

// evicted is the eviction entry carried forward, or nil.
func (c *cluster) evicted() *v1alpha1.EvictedCluster {
	if c.x == nil {
		return nil
	}
	return c.x.evicted
}

// expiry is the earliest time a tolerated NoExecute taint runs out (zero
// when none does).
func (c *cluster) expiry() time.Time {
	if c.x == nil {
		return time.Time{}
	}
	return c.x.expiry
}

// healthy says the cluster may take new replicas.
func (c *cluster) healthy() bool { return !c.evict && c.block() == "" }

// tolerations returns the app's cluster tolerations with the implicit
// toleration of the unreachable taint in front, unless the app names that
// key itself. Being first, it decides for the unreachable taint even when a
// wildcard toleration follows, because the first matching toleration is the
// one used (as in Kubernetes' taint manager).
func tolerations(in *Input) []corev1.Toleration {
	for _, t := range in.Placement.ClusterTolerations {
		if t.Key == v1alpha1.TaintClusterUnreachable {
			return in.Placement.ClusterTolerations
		}
	}
	seconds := int64(v1alpha1.DefaultUnreachableTolerationSeconds)
	if f := in.Failover; f != nil && f.ClusterUnreachable != nil && f.ClusterUnreachable.TolerationSeconds != nil {
		seconds = int64(*f.ClusterUnreachable.TolerationSeconds)
	}
	out := make([]corev1.Toleration, 0, len(in.Placement.ClusterTolerations)+1)
	out = append(out, corev1.Toleration{
		Key:               v1alpha1.TaintClusterUnreachable,
		Operator:          corev1.TolerationOpExists,
		Effect:            corev1.TaintEffectNoExecute,
		TolerationSeconds: &seconds,
	})
	return append(out, in.Placement.ClusterTolerations...)
}

// matchToleration returns the first toleration that tolerates t, or nil.
// It uses corev1's own matching, comparison operators included.
func matchToleration(tols []corev1.Toleration, t *corev1.Taint) *corev1.Toleration {
	for i := range tols {
		if tols[i].ToleratesTaint(logr.Discard(), t, true) {
			return &tols[i]
		}
	}
	return nil
}

// assessHealth fills in block, evict and expiry from the cluster's taints
// and Ready condition.
//
// A NoExecute taint whose toleration has tolerationSeconds lets the replicas
// already there stay until TimeAdded + tolerationSeconds, but takes no new
// ones: placing replicas where they are about to be evicted only makes
// churn. A NoExecute taint without TimeAdded cannot say when its toleration
// started, so a limited toleration counts as expired; the hub always sets
// TimeAdded on the taints it manages. PreferNoSchedule taints are ignored.
func (s *scheduler) assessHealth(c *cluster) {
	if !c.mc.DeletionTimestamp.IsZero() {
		// A MemberCluster being deleted drains: it runs nothing, whatever
		// the app tolerates.
		x := c.issues()
		x.evictReason, x.evictMsg = EvictionReasonClusterDeleting, "the MemberCluster is being deleted"
		x.block, x.blockFilter = "being deleted", FilterTaintToleration
		c.evict = true
		return
	}
	var noExecute, noSchedule string
	for i := range c.mc.Spec.Taints {
		t := &c.mc.Spec.Taints[i]
		switch t.Effect {
		case corev1.TaintEffectNoSchedule:
			if noSchedule == "" && matchToleration(s.tolerations, t) == nil {
				noSchedule = "taint " + t.ToString() + " not tolerated"
			}
		case corev1.TaintEffectNoExecute:
			tol := matchToleration(s.tolerations, t)
			switch {
			case tol == nil:
				s.evictCluster(c, t, "taint "+t.ToString()+" not tolerated")
			case tol.TolerationSeconds == nil:
				// Tolerated for ever.
			case *tol.TolerationSeconds <= 0 || t.TimeAdded == nil:
				s.evictCluster(c, t, "taint "+t.ToString()+" not tolerated (tolerationSeconds expired)")
			default:
				expiry := t.TimeAdded.Add(time.Duration(*tol.TolerationSeconds) * time.Second)
				if !s.now.Before(expiry) {
					s.evictCluster(c, t, fmt.Sprintf("taint %s not tolerated since %s", t.ToString(), expiry.UTC().Format(time.RFC3339)))
					continue
				}
				if x := c.issues(); x.expiry.IsZero() || expiry.Before(x.expiry) {
					x.expiry = expiry
				}
				s.anyExpiry = true
				if noExecute == "" {
					noExecute = fmt.Sprintf("taint %s tolerated until %s", t.ToString(), expiry.UTC().Format(time.RFC3339))
				}
			}
		}
	}
	switch {
	case noExecute != "":
		c.issues().block, c.x.blockFilter = noExecute, FilterTaintToleration
	case noSchedule != "":
		c.issues().block, c.x.blockFilter = noSchedule, FilterTaintToleration
	case !isReady(c.mc):
		c.issues().block, c.x.blockFilter = "not Ready", FilterReady
	}
}

// evictCluster records that taint t evicts c. The unreachable taint wins
// the reason because it says most about what happened.
func (s *scheduler) evictCluster(c *cluster, t *corev1.Taint, msg string) {
	reason := EvictionReasonTaintNotTolerated
	if t.Key == v1alpha1.TaintClusterUnreachable {
		reason = EvictionReasonClusterUnreachable
	}
	if x := c.issues(); !c.evict || (reason == EvictionReasonClusterUnreachable && x.evictReason != reason) {
		x.evictReason, x.evictMsg = reason, msg
	}
	c.evict = true
}

// isReady says the Ready condition is True.
func isReady(mc *v1alpha1.MemberCluster) bool {
	for i := range mc.Status.Conditions {
		if mc.Status.Conditions[i].Type == v1alpha1.ConditionReady {
			return mc.Status.Conditions[i].Status == metav1.ConditionTrue
		}
	}
	return false
}

// readyTransition is the Ready condition's LastTransitionTime (zero when absent).
func readyTransition(mc *v1alpha1.MemberCluster) time.Time {
	for i := range mc.Status.Conditions {
		if mc.Status.Conditions[i].Type == v1alpha1.ConditionReady {
			return mc.Status.Conditions[i].LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// failback decides what happens to a cluster that has an eviction entry
// from the previous decision: it stays evicted (the entry is carried
// forward) or, once it has been healthy for the stabilization window, it
// fails back and gets its share again.
//
// The window starts at the later of the Ready condition's
// LastTransitionTime and the eviction: a cluster that flaps moves its
// LastTransitionTime and so restarts the wait, and a cluster evicted by a
// taint while it stayed Ready still waits a full window after the eviction.
func (s *scheduler) failback(c *cluster, e *v1alpha1.EvictedCluster) {
	since := e.EvictionTime.Time.Format(time.RFC3339)
	x := c.issues()
	switch {
	case c.evict:
		x.evicted, x.failbackMsg = e, "evicted ("+e.Reason+") at "+since+"; "+x.evictMsg
	case !s.failbackEnabled:
		x.evicted, x.failbackMsg = e, "evicted ("+e.Reason+") at "+since+"; failback disabled"
	case !c.healthy():
		x.evicted, x.failbackMsg = e, "evicted ("+e.Reason+") at "+since+"; waiting for recovery: "+x.block
	default:
		start := readyTransition(c.mc)
		if e.EvictionTime.Time.After(start) {
			start = e.EvictionTime.Time
		}
		stable := start.Add(s.failbackWindow)
		if s.now.Before(stable) {
			x.evicted = e
			x.failbackMsg = "evicted (" + e.Reason + ") at " + since + "; fails back at " + stable.UTC().Format(time.RFC3339)
			s.requeueAt(stable)
			return
		}
		c.returning, c.returnReplicas = true, e.Replicas
	}
}

// requeueAt lowers RequeueAfter so that the caller looks again at t.
func (s *scheduler) requeueAt(t time.Time) {
	d := t.Sub(s.now)
	if d <= 0 {
		return
	}
	if s.requeue == 0 || d < s.requeue {
		s.requeue = d
	}
}

// failoverPolicy returns whether failback is enabled and its window.
func failoverPolicy(f *v1alpha1.FailoverPolicy) (bool, time.Duration) {
	enabled, seconds := v1alpha1.DefaultFailbackEnabled, v1alpha1.DefaultFailbackWindowSeconds
	if f != nil && f.Failback != nil {
		if f.Failback.Enabled != nil {
			enabled = *f.Failback.Enabled
		}
		if f.Failback.StabilizationWindowSeconds != nil {
			seconds = *f.Failback.StabilizationWindowSeconds
		}
	}
	return enabled, time.Duration(seconds) * time.Second
}

// evictions builds the result's Evicted list: the entries carried forward
// and the clusters evicted by this call, sorted by name because clusters
// are. An entry whose cluster no longer exists is dropped: there is nothing
// to keep for it and nothing to fail back to.
func (s *scheduler) evictions() []v1alpha1.EvictedCluster {
	var out []v1alpha1.EvictedCluster
	for i := range s.clusters {
		c := &s.clusters[i]
		switch {
		case c.evicted() != nil:
			out = append(out, *c.x.evicted)
		case c.evict && c.inPrev && c.prev > 0 && s.replicas > 0:
			// A cluster that ran no replicas loses none, and an app
			// scaled to zero has none to move (it keeps the cluster's
			// Work at 0, see keepAtZero): neither is an eviction.
			out = append(out, v1alpha1.EvictedCluster{
				Name:         c.name,
				Replicas:     c.prev,
				Reason:       c.x.evictReason,
				EvictionTime: metav1.NewTime(s.now).Rfc3339Copy(),
			})
		}
	}
	return out
}
