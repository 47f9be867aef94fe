// Package sync is the protocol between the Flotilla hub and the agent in
// each member cluster. It holds no code; the parts are:
//
//   - syncv1: the versioned protobuf service (flotilla.sync.v1) and its
//     generated Go code, with sync.proto beside it. Regenerate with
//     hack/generate-proto.sh (make generate).
//   - server: the hub side, a gRPC server fed by interfaces (a source of
//     desired Works, a cluster registry, sinks for status and agent events),
//     so it runs without a cluster in tests.
//   - client: the agent side, which connects, resumes, applies through an
//     Applier interface, and reports status and heartbeats.
//   - pkg/pki (beside this package): the CA and certificates both sides use.
//
// # Identity
//
// Both sides authenticate with mutual TLS. An agent's cluster is the one
// named by the URI SAN flotilla://cluster/<name> of its client
// certificate, never by a message field. The hub refuses a stream with
// UNAUTHENTICATED when the certificate is missing, from another CA or names
// no cluster, and with PERMISSION_DENIED when no MemberCluster has that
// name or when the agent reports on a Work outside its cluster's namespace
// (flotilla-cluster-<name>). Each refusal says what to fix.
//
// # The stream
//
// An agent holds one bidirectional stream, Sync.Connect:
//
//	agent                                   hub
//	  |                                        |  checks certificate, MemberCluster
//	  | <-- HubHello{fleet, cluster, epoch} -- |  who the hub is
//	  | -- Hello{held: [(name, uid, gen)]} --> |  or Refusal, and the stream ends
//	  |                                        |  waits until its Work cache synced
//	  | <-- WorkUpsert ...  ------------------ |  snapshot: only what is new or changed
//	  | <-- SnapshotComplete{names} ---------- |  "keep exactly these": the agent prunes
//	  | -- SnapshotPruned or PruneBlocked ---> |  how the prune went
//	  | <-- WorkUpsert / WorkDelete ...  ----- |  then every change
//	  | <-- WorkOrphan ... ------------------- |  a Work lost without intent
//	  | <-- PruneConfirm{epoch} -------------- |  when an admin confirms a held prune
//	  | -- WorkGone{name} -------------------> |  done with a deleted or orphaned Work
//	  | -- StatusReport / Heartbeat ... -----> |  at any time after Hello
//
// Objects travel as JSON bytes encoded with the api/v1alpha1 types (a Work
// in WorkUpsert, a WorkStatus in StatusReport, a ResourceSummary in Hello
// and Heartbeat), so a new API field needs no .proto change.
//
// The snapshot is a diff against what the hello says the agent holds: a
// Work whose uid and generation match is skipped. A held Work the hub no
// longer has is not deleted on its own: SnapshotComplete leaves it out and
// the agent prunes it, so that every deletion that comes from a snapshot
// passes the agent's deletion brake (one the hub knows vanished without
// its intent is orphaned first: see Deletion intent). The agent prunes only on
// SnapshotComplete, since before it a missing Work may just not have been
// sent yet. A hub whose Work cache has not synced sends nothing until it
// has: an empty snapshot from a cold cache would make every agent delete
// everything it runs.
//
// A prune that fails is retried with what the hub wants at the time of the
// retry (the snapshot's list changed by every WorkUpsert and WorkDelete
// since), never with the list of the attempt that failed: a Work applied in
// the meantime would otherwise be deleted while the hub shows it running.
//
// After a dropped connection the agent reconnects with exponential backoff
// and jitter and says again what it holds, so the new snapshot sends only
// what it missed, and it sends the latest status of every Work again. A
// second stream for the same cluster replaces the first, which ends with
// ABORTED ("replaced by a newer stream").
//
// # Deletion intent
//
// The agent deletes a Work's member objects only when the hub meant it.
// The MyApp controller marks a Work with the annotation
// flotilla.dev/deletion-intent (why: MyAppDeleted, Descheduled) right
// before it deletes it. The hub's Work source remembers, from the
// informer's delete event (or the last state it knew, for a deletion it
// missed), whether the vanished Work carried the mark
// (WorkSource.DeletionIntent). When the server finds a held Work gone, it
// sends WorkDelete only for a marked one. On WorkDelete (and on a prune)
// the agent deletes the Work's recorded objects, or releases them when the
// Work it last received has spec.deletionPolicy Orphan (its applied set
// records the policy, so this holds after a restart too). Otherwise (the Work CRD or the
// cluster namespace deleted, a hand kubectl delete work, the hub
// uninstalled with kubectl delete -k deploy/hub) it sends WorkOrphan{name},
// logs, counts flotilla_sync_works_orphaned_total{cluster}, and forgets the
// Work, so it never sends it twice. The agent forgets the Work (no
// re-apply, no status) and drops its applied-set record without deleting
// anything (apply.Applier.Forget): the objects keep running, labelled,
// and no later prune or delete can reach them; a Work of the same name
// sent later adopts them again with server-side apply. A Work whose
// vanishing the source cannot account for is orphaned, never deleted.
//
// Intended deletions are paced per member, so that a hub bug that marks
// and deletes many Works cannot empty a member in one burst. Each stream
// has a token bucket: server.Config.DeleteBurst deletes at once, then
// Config.DeleteRate per second (50 and 2 by default: the hub's
// --member-delete-burst and --member-delete-rate; the constants' comment
// says why). A WorkDelete that finds no token waits in a list of its own,
// oldest first, outside the stream's queue, so upserts and orphans of
// other Works, and other agents, go on at once. When its turn comes the
// Work is read from the source again, as for every send: a Work re-created
// meanwhile is upserted, never deleted (its change, when it comes through
// the queue first, takes it off the list at once). The gauge
// flotilla_sync_deletions_pending{cluster} counts the waiting deletes, and
// the server logs once per stream when pacing starts. The pacing lives in
// the stream: a new one starts with a full bucket and forgets what
// waited. Those Works are gone from the hub, so its snapshot leaves them
// out and the agent prunes them, under the deletion brake rather than the
// rate: a reconnect in the middle of a mass deletion releases the rest at
// once, unless the brake holds them. Snapshot prunes are never paced.
//
// A snapshot lists only what to keep, so a held Work absent from it would
// be pruned. The server therefore sends WorkOrphan, before
// SnapshotComplete, for every held Work the source saw vanish without the
// mark while the agent was away. The limit: the source remembers
// vanishings in memory only, for 24 hours and at most 100,000 of them. A
// Work that vanished while the hub was down (or longer ago, or whose
// deletion a restarted hub never saw) is simply absent from the snapshot,
// and the agent's prune deletes its objects, under the deletion brake: a
// snapshot that would delete more than the brake allows (a hub
// re-installed with an empty Work CRD) waits for an admin's confirmation,
// but a small one (say one Work of many deleted by hand while the hub was
// down) is pruned.
//
// # Confirmed deletion
//
// The hub's Works carry the finalizer flotilla.dev/member-cleanup, so a
// deleted Work stays, terminating, until its member is done with it; the
// source reports it as gone. After WorkDelete (or WorkOrphan) succeeded,
// the agent sends WorkGone{name}, and the server calls its DeletionSink,
// which lets the Work go. The server confirms without a message what the
// agent does not hold: a vanished Work not held, after the hello every
// terminating Work (TerminatingLister) the hello does not list, and on
// SnapshotPruned every held Work the snapshot left out. A WorkGone with an
// invalid name ends the stream with INVALID_ARGUMENT; an agent confirms
// only Works of its own cluster, since the server names the cluster from
// the certificate.
//
// # Fleet identity
//
// The hub has one persistent identity, its fleet id: the UID of ConfigMap
// flotilla-fleet in its namespace, which the leader creates the first time
// it starts. A hub restored from a backup or installed again gets a new
// one. HubHello carries it, with the cluster name the certificate proved,
// before the agent says or applies anything.
//
// The agent records the first fleet id and cluster name it serves in its
// member (ConfigMap flotilla-agent-identity in its namespace; see
// client.Identity and client.DecideIdentity). A hub with another fleet id,
// or the same fleet calling the member by another name, is refused: the
// agent applies and deletes nothing, sends Refusal{reason,
// recorded_fleet_id, recorded_cluster_name} instead of its hello, logs,
// and reconnects with backoff. The hub ends that stream with
// FAILED_PRECONDITION and tells its AgentSink (the MemberCluster's
// Connected condition becomes False with reason FleetMismatch); the refusing
// agent is never registered, so no other stream is disturbed. An admin
// re-points an agent on purpose with its --accept-fleet-id flag, or the
// annotation flotilla.dev/accept-fleet-id on its identity ConfigMap, which
// replace the record. The agent gives the fleet id and cluster name to its
// applier before anything is applied, which labels every object with them.
//
// # Deletion brake and confirmation
//
// The agent's applier refuses a prune that would delete too much of what
// the member runs (client.PruneBlockedError); nothing is deleted. The agent
// reports PruneBlocked{epoch, would_delete, held, works}, where epoch is the
// stream's HubHello epoch, keeps applying what the hub sends, and waits. The
// hub shows it as the MemberCluster condition PruneBlocked. An admin who
// means it annotates the MemberCluster flotilla.dev/confirm-prune: "<epoch>";
// the hub sends PruneConfirm{epoch} on that stream (Server.ConfirmPrune), and
// the agent prunes, confirmed, to what the hub wants at that time. Every
// prune that happens is reported with SnapshotPruned{epoch, confirmed},
// which clears the condition. Epochs grow and start from the hub's start
// time, so a confirmation never releases the prune of another snapshot.
//
// # Flow control and full queues
//
// Each agent has its own queue on the hub and its own sending goroutine,
// so a slow agent never delays another one or the hub's informer. The queue
// holds Work names, not objects, coalesced per Work: the sender reads the
// Work's latest state from the source when it sends, so ten changes to one
// Work while the agent is busy cost one entry and one message. Sends block
// on HTTP/2 flow control when the agent stops reading (its applier is
// stuck, or its network is slow); meanwhile only the queue grows.
//
// The queue is bounded (server.Config.MaxQueueDepth distinct Works, 10,000
// by default). When a change to one more Work arrives while it is full, the
// hub ends that agent's stream with RESOURCE_EXHAUSTED. The agent
// reconnects and the snapshot brings it up to date, so a full queue costs a
// resync, never a lost change or unbounded memory. Status reports and
// heartbeats travel the other way the same way: the agent coalesces reports
// per Work, and a hub sink that is slow holds up only that agent's stream.
//
// Every message is bounded by a maximum size (16 MiB by default, both
// ways). Keepalive pings on both sides notice a vanished peer; the hub
// enforces a minimum ping interval. The hub serves the gRPC health service
// (for "" and flotilla.sync.v1.Sync), which needs no client certificate so
// that probes can use it.
//
// # Malformed input
//
// Both sides receive raw bytes and decode them themselves (see the fuzz
// tests). A message that does not parse, or that breaks the protocol
// (no hello first, a second hello, an empty message, an invalid name or
// JSON payload, a prune report for another epoch), ends that one stream with INVALID_ARGUMENT and a message
// naming the problem; other streams are untouched.
package sync
