// Package myapp is the hub's MyApp controller. For each MyApp it reads the
// MemberClusters from the cache, asks pkg/placement where the replicas go
// (the decision recorded in status.placement feeds the next one), renders one
// Deployment per target cluster with the per-cluster overrides applied, and
// writes one Work per cluster into the hub namespace flotilla-cluster-<name>,
// all clusters in parallel. It keeps an evicted cluster's Work until the
// replacement replicas are available (graceful eviction), aggregates the
// Works' status (as the agents report it) into MyApp.status, and requeues
// itself for the times the scheduler names: a toleration running out, a
// failback window ending.
//
// Works live in other namespaces than their MyApp, so they carry labels
// (flotilla.dev/myapp-namespace, flotilla.dev/myapp-name) instead of owner
// references; a Work whose MyApp is gone is deleted when the controller
// sees it, and a finalizer on the MyApp holds it until its Works are gone.
package myapp
