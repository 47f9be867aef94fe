// Package push is the hub's push mode: members without an agent, whose
// Works the hub leader applies itself through a kubeconfig, with the same
// code and rules as an agent.
//
// It is built on sigs.k8s.io/multicluster-runtime. Provider engages exactly
// the MemberClusters with spec.syncMode Push: it reads the kubeconfig
// Secret each names (in the hub's namespace, by name, live: the hub may
// get Secrets there but not list or watch them) when a MemberCluster
// changes and every few seconds, builds a controller-runtime cluster from
// it (whose cache holds only the Deployments carrying flotilla.dev/work),
// engages it under the member's name, replaces it when the Secret's
// kubeconfig changes, and disengages it when the member is deleted, stops
// being Push or loses its Secret. A Secret that is missing, lacks its key or
// holds no usable kubeconfig makes the member Ready False with reason
// KubeconfigInvalid and a message naming the Secret; nothing else is
// touched.
//
// Engine is a multicluster reconciler: its requests carry the member's
// name as the cluster and a Work's name, from three sources: the hub's
// Work informer (the sync bridge's WorkSource, the same events the sync
// server gets), the member's Deployments (drift), and the engine itself
// after a member (re)connects. Per member it keeps what an agent keeps: a
// pkg/apply Applier (field owner flotilla-agent, applied-set records in
// the member's flotilla-system, the fleet identity record, namespace
// policy, deletion fence and brake) driven by a pkg/works Store, and an
// agent/capacity Summarizer. Status goes to the same StatusSink as agents'
// reports; deletions follow the Work's deletion intent and are confirmed
// through the same DeletionSink; a prune after a (re)connect runs under
// the same brake and is reported and confirmed as an agent's is.
//
// Health: every heartbeat interval the engine asks the member's /readyz;
// while it answers the member heartbeats (Tracker.PushUp), after three
// failures in a row it is down (Tracker.PushDown), and the MemberCluster
// controller then treats it exactly as a silent agent: the same grace,
// taint and failover.
//
// Everything runs on the hub leader only (the provider and the controller
// are leader-election runnables), and the deletion fence checks the hub's
// leader Lease before every batch of deletions.
package push
