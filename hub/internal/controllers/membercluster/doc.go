// Package membercluster is the hub's MemberCluster health controller. The
// sync server tells its Tracker when agents connect, heartbeat and
// disconnect; the controller turns that into MemberCluster status (Ready,
// Connected, last heartbeat, agent info, resource summary) and, when a
// cluster has not heartbeated for the grace period, marks it not Ready and
// taints it flotilla.dev/unreachable:NoExecute with the time, which is what
// the scheduler's failover acts on. The taint goes when heartbeats resume.
//
// Heartbeats arrive every few seconds from every member; the controller
// writes them through only when something a reader acts on changes (a
// condition, the agent, the taint) or when the recorded heartbeat is older
// than HeartbeatWriteInterval, so a thousand members cost the hub apiserver
// a bounded number of writes per second.
//
// A hub that just became leader has heard no heartbeats: it counts the
// grace period from when it started reconciling (the controller runs on the
// leader only, so: from when it became leader, not from its process start),
// or the last heartbeat recorded in status if that is later, so agents have
// time to reconnect before anything is declared lost.
//
// Which members carry the unreachable taint is decided for the whole fleet
// at once (decideEvictions, a pure function, in eviction.go), as the node
// lifecycle controller does per zone: when more than a share of the members
// (default 55%) fell silent within one grace period the partition brake
// holds: the hub assumes it is the one cut off and taints none of them
// (Ready Unknown, reason PartitionBrake), and reports it in ConfigMap
// flotilla-hub-status, an event and flotilla_partition_brake_active.
// When it releases, the members it held get a new grace period from the
// release, since a healing partition brings them back over seconds.
// Otherwise at most a few members are tainted per interval (default 1 per
// 30s); the others wait, Ready Unknown with reason EvictionRateLimited.
// fleet_health.go reads every member live for that decision, under one
// lock, and wakes the members whose taint it changes.
//
// Two conditions ask an admin to act. An agent that refuses this hub
// because it serves another fleet or cluster name (see pkg/sync) makes
// Connected False with reason FleetMismatch, unless another agent of the
// cluster is connected. A prune held by the agent's deletion brake makes
// PruneBlocked True, with the counts, the snapshot's epoch and the command
// to confirm; the annotation flotilla.dev/confirm-prune naming that epoch
// makes the controller send the confirmation (once) through the sync
// server, and the agent's report that it pruned makes PruneBlocked False.
// Each comes with an event and a gauge (flotilla_member_fleet_mismatch,
// flotilla_prune_blocked).
package membercluster
