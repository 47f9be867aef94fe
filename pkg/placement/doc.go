// Package placement is Flotilla's multi-cluster scheduler: given a MyApp's
// placement policy and replica count, the member clusters as the hub sees
// them, the previous decision and the current time, it decides how many
// replicas run in which member cluster.
//
// The package is pure. It reads no clock (the caller passes Input.Now), holds
// no client, starts no goroutine and keeps no state between calls: the
// previous decision is an input, which is what makes decisions stable. The
// hub's MyApp controller calls Schedule, records Result.Decision in the
// MyApp's status and requeues after Result.RequeueAfter.
//
// The vocabulary is Karmada's PropagationPolicy (see api/v1alpha1). One call
// works in four steps, each in its own file:
//
//   - failover.go decides, once per call, what each cluster's health means:
//     Ready, taints against the app's tolerations (NoSchedule: keep what runs,
//     take nothing new; NoExecute: leave once the toleration has expired),
//     which clusters are evicted now, which earlier evictions are carried
//     forward and which clusters fail back.
//   - filter.go keeps, per affinity group, the clusters that may run the app
//     and records for every other cluster the filter that removed it.
//   - spread.go chooses among those candidates so that every spread
//     constraint's minGroups and maxGroups hold, preferring clusters that
//     already run the app (stability), then the best score (score.go:
//     static weight or spare capacity), then the name.
//   - divide.go shares the replicas among the chosen clusters: Duplicated,
//     Divided by static weights (largest remainder), Divided by dynamic
//     weights (spare capacity, sticky across calls) and Aggregated (fewest
//     clusters, roomiest first).
//
// With clusterAffinities the groups are tried in order and the first one
// that yields a schedulable result wins; a group of the previous decision is
// not sticky, so the app returns to its preferred group as soon as that
// group is schedulable again (failback's stabilization window keeps this
// from flapping).
//
// Scaling to zero is a placement like any other, and it moves nothing: at 0
// replicas Schedule never fails, Divided keeps the clusters of the previous
// decision (in its affinity group, whatever their health: nothing runs
// there) and Duplicated every selected cluster, all with 0 replicas and the
// reason KeptAtZero, so the hub keeps their Works and scaling back reuses
// the member Deployments. No cluster is evicted at 0, and a cluster that
// ran no replicas is never evicted.
//
// When no group is schedulable Schedule returns a *ScheduleError whose
// message names, cluster by cluster, the filter that removed it; its Reason
// is v1alpha1.ReasonUnschedulable or v1alpha1.ReasonSpreadConstraintsNotMet
// and errors.Is matches ErrUnschedulable or ErrSpreadConstraintsNotMet.
package placement
