// Package myapp is the hub's MyApp controller. Each reconcile has three
// steps, one file each:
//
//   - read (scope.go): the MyApp, the MemberClusters, the
//     FleetNamespacePolicies and the app's Works from the cache, and the
//     clock, once;
//   - desired (desired.go, plan.go): pure functions compute where the
//     replicas go (pkg/placement; the decision recorded in status.placement
//     feeds the next one), the step of a Progressive rollout (pkg/rollout),
//     the Work of each target cluster rendered once with its overrides and
//     revision (hub/render), which evicted clusters keep their Work
//     (graceful eviction), and the new status (hub/internal/appstatus);
//   - write (write.go): the finalizer, a Progressive rollout's state (with
//     optimistic locking, before any Work), the Works — all clusters in
//     parallel — and one status patch; then a requeue for the times the
//     scheduler and the rollout name (a toleration or failback window
//     ending, a minSuccessTime or progressDeadline).
//
// Namespace policy: before anything is computed, the app's target
// namespace is checked against the FleetNamespacePolicies again
// (pkg/nspolicy), although the webhook already did at admission: a grant
// can be withdrawn afterwards, and a webhook can be bypassed. An app not
// allowed gets no new or updated Work and loses none (desired.go, denied):
// its status says Scheduled False, reason NamespaceNotAllowed, with the
// policies considered. Allowed apps' Works carry the strictest Pod
// Security level of the policies that match the app's namespace
// (Work.spec.podSecurity). A policy change requeues the MyApps of the hub
// namespaces it matches.
//
// Scaling to zero keeps the Works: the scheduler keeps the app's clusters
// at 0 replicas (reason KeptAtZero), the plan renders their Works with 0,
// and the status is Ready with reason ScaledToZero once the members confirm,
// so scaling back updates the same Works and the members the same
// Deployments.
//
// Works live in other namespaces than their MyApp, so they carry labels
// (flotilla.dev/myapp-namespace, flotilla.dev/myapp-name) instead of owner
// references; a Work whose MyApp is gone is deleted when the controller
// sees it (delete.go), and a finalizer on the MyApp holds it until its
// Works are gone. Events and metrics are told in events.go.
package myapp
