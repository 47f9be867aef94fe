package placement

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Input is everything one scheduling decision depends on. Schedule reads it
// and never modifies it.
type Input struct {
	// Placement is the MyApp's spec.placement.
	Placement v1alpha1.Placement
	// Replicas is the MyApp's spec.replicas: the total when Divided, the
	// number per cluster when Duplicated. Negative values are an error.
	Replicas int32
	// Requests are the resource requests of one replica's pod. Dynamic
	// weighting and Aggregated divide each cluster's spare capacity by them;
	// one pod slot ("pods": 1) is always added.
	Requests corev1.ResourceList
	// ClusterRequests replace Requests for the clusters they name: there
	// a resources override changes what each replica's pod requests.
	ClusterRequests map[string]corev1.ResourceList
	// Failover is the MyApp's spec.failover; nil means the defaults
	// (unreachable tolerated for 5s, failback after 30s of Ready).
	Failover *v1alpha1.FailoverPolicy
	// Clusters are the member clusters as the hub sees them, in any order.
	Clusters []v1alpha1.MemberCluster
	// Previous is the decision recorded by the last call (MyApp
	// status.placement), or nil for the first one.
	Previous *v1alpha1.PlacementDecision
	// Now is the current time; the package never reads a clock.
	Now time.Time
}

// InputFor builds the Input for app from its spec and status. Replicas
// default to 1, as the CRD defaults them, and requests default to limits, as
// Kubernetes defaults a container's requests.
func InputFor(app *v1alpha1.MyApp, clusters []v1alpha1.MemberCluster, now time.Time) Input {
	in := Input{
		Placement: app.Spec.Placement,
		Replicas:  1,
		Failover:  app.Spec.Failover,
		Clusters:  clusters,
		Previous:  app.Status.Placement,
		Now:       now,
	}
	if app.Spec.Replicas != nil {
		in.Replicas = *app.Spec.Replicas
	}
	in.Requests = PodRequests(&app.Spec, nil)
	in.ClusterRequests = clusterRequests(app, clusters)
	return in
}

// Result is one scheduling decision.
type Result struct {
	// Clusters are the target clusters and their replicas, sorted by name.
	// When Divided only clusters with at least one replica are listed, but
	// at 0 replicas the clusters of the previous decision are kept, with 0.
	// When Duplicated every selected cluster is listed, even with 0 replicas,
	// so that the set of clusters the app is deployed to does not depend on
	// its scale (scaling from 0 then needs no new placement). At 0 replicas
	// every target has Reason v1alpha1.TargetReasonKeptAtZero.
	Clusters []v1alpha1.TargetCluster
	// Evicted are the clusters replicas were moved away from, sorted by
	// name: the ones evicted by this call (EvictionTime = Now) and the
	// earlier ones carried forward until they fail back. The hub keeps an
	// evicted cluster's Work until the replacements are available.
	Evicted []v1alpha1.EvictedCluster
	// AffinityName is the clusterAffinities group used, "" without groups.
	AffinityName string
	// RequeueAfter, when not zero, is when the decision may change with time
	// alone: the earliest NoExecute toleration to expire on a cluster that
	// runs the app, or the earliest failback stabilization window to end.
	RequeueAfter time.Duration
	// Filtered lists, sorted by name, every member cluster that may not take
	// new replicas under the chosen group, with the filter that says so. A
	// cluster listed here may still keep the replicas it has (NoSchedule
	// taint, not Ready, NoExecute taint within its toleration).
	Filtered []ClusterReason
	// BeyondCapacity is the number of replicas placed beyond the clusters'
	// reported spare capacity (dynamic weighting and Aggregated only): when
	// the chosen clusters together lack room, they are filled to capacity
	// and the rest is spread by capacity, so the app is placed and the
	// members' schedulers decide what stays Pending.
	BeyondCapacity int32
	// Warnings say, in sentences, what a user may want to know about the
	// decision, such as BeyondCapacity.
	Warnings []string
}

// ClusterReason says why a cluster may not take new replicas.
type ClusterReason struct {
	// Name of the MemberCluster.
	Name string
	// Filter is the step that removed it: one of the Filter* constants.
	Filter string
	// Reason is a short phrase for people, e.g. "not Ready".
	Reason string
}

// The filters a ClusterReason can name.
const (
	// FilterClusterAffinity: the cluster is outside the affinity (group).
	FilterClusterAffinity = "ClusterAffinity"
	// FilterSpreadConstraint: the cluster lacks a field (region, zone,
	// provider) that a spread constraint groups by.
	FilterSpreadConstraint = "SpreadConstraint"
	// FilterTaintToleration: a taint the app does not tolerate, or whose
	// toleration is limited in time.
	FilterTaintToleration = "TaintToleration"
	// FilterReady: the cluster's Ready condition is not True.
	FilterReady = "Ready"
	// FilterFailback: replicas were evicted from the cluster and have not
	// failed back yet.
	FilterFailback = "Failback"
	// FilterStaticWeight: no staticWeightList entry matches the cluster.
	FilterStaticWeight = "StaticWeight"
)

// The reasons Schedule gives an EvictedCluster.
const (
	// EvictionReasonClusterUnreachable: the flotilla.dev/unreachable taint
	// outlived its toleration.
	EvictionReasonClusterUnreachable = "ClusterUnreachable"
	// EvictionReasonTaintNotTolerated: another NoExecute taint is not
	// tolerated, or outlived its toleration.
	EvictionReasonTaintNotTolerated = "TaintNotTolerated"
	// EvictionReasonClusterDeleting: the MemberCluster is being deleted
	// and drains; no toleration keeps replicas on it.
	EvictionReasonClusterDeleting = "ClusterDeleting"
)
