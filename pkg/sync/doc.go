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
// certificate, never by a message field. The hub checks the certificate
// in gRPC interceptors, for every RPC (the health service's too), and
// hands the handlers the proved identity (server.Identity: cluster, URI,
// SHA-256 fingerprint, expiry) in the context. It refuses with
// UNAUTHENTICATED when the certificate is missing, expired, from another
// CA or names no cluster, and with PERMISSION_DENIED when its fingerprint
// is revoked, when no MemberCluster has that name, or when the agent
// reports on a Work outside its cluster's namespace
// (flotilla-cluster-<name>). Each refusal says what to fix.
//
// Agent certificates are verified against the hub's agent CA bundle:
// --agent-ca-file when set, else ca.crt in --cert-dir, the CA that also
// issued the hub's serving certificate (one CA for everything, as
// flotilla-pki and the testbed set it up). A separate bundle lets an
// admin rotate or restrict the agents' CA without touching the serving
// certificate, and keeps a certificate the serving CA issues for
// another purpose from passing as an agent.
//
// A stream ends while it runs, with a status that says why, when:
//
//   - its client certificate (or a CA of its chain) expires: the
//     interceptor gives the stream's context a deadline at NotAfter
//     (UNAUTHENTICATED, "expired at ..."). The agent reads its
//     certificate files at every connection, so once a renewed
//     certificate is written over the old one it comes back on its next
//     attempt; until then it is refused and retries with backoff;
//   - its MemberCluster is gone (PERMISSION_DENIED, "was deleted"). A
//     MemberCluster being deleted keeps its stream while it drains (the
//     agent deletes or releases its Works); once the drain finalizer is
//     removed and the object is gone, the hub's MemberCluster informer
//     calls Server.ClusterChanged and the stream ends at once;
//   - its certificate's fingerprint (SHA-256 of the DER, lower-case hex)
//     is added to the MemberCluster's spec.revokedCertificates
//     (PERMISSION_DENIED, "revoked"), through the same ClusterChanged.
//     Every later RPC with that certificate is refused the same way.
//
// The hub learns of these through server.ClusterRegistry and its
// optional RevocationChecker, which it backs with the MemberCluster
// cache. The MemberCluster's Connected condition then shows the reason,
// as for every disconnect.
//
// # Connections
//
// What a peer that is not an agent can cost the hub is bounded:
//
//   - a connection that has not proved an agent certificate in an RPC
//     (one in its TLS handshake, or one that finished it without a
//     certificate the hub accepts) is closed --sync-handshake-timeout
//     (10s) after it was accepted, and at most
//     --sync-max-pending-connections (256) of them are open: one more
//     closes the oldest, so a flood cannot lock agents out (an agent
//     proves itself within milliseconds) and Accept never waits;
//   - a connection carries at most --sync-max-streams-per-connection (4)
//     RPCs at a time; an agent needs one Sync stream (it dials a new
//     connection for every stream) and maybe a health check;
//   - a connection with no RPC for --sync-max-connection-idle (5m) is
//     closed;
//   - after --sync-max-connection-age (24h, plus gRPC's jitter of up to
//     10%) the hub sends GOAWAY. The stream goes on for
//     --sync-max-connection-age-grace (10m) and then ends with
//     UNAVAILABLE; the agent reconnects at once with a new handshake, and
//     its hello makes the snapshot send only what changed. So a handshake
//     is trusted for a day at most, at the price of one cheap resync per
//     agent per day. Expiry, revocation and deletion do not wait for it.
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
// Work whose uid and generation match is skipped. The hello lists every
// Work whose objects the member may still run, including those the agent
// knows only from its applied-set records (after a restart, or a failed
// apply or delete) with generation 0, which match no Work: the hub sends
// those again if it wants them. A held Work the hub no
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
// terminating Work (TerminatingLister) the hello does not list (so an
// agent must list every Work whose objects still run, or their deletion
// would be confirmed before they are gone), and on
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
// Every message is bounded by a maximum size: 16 MiB from the hub, which
// sends whole Works, and 1 MiB from an agent (see Bounded input). Keepalive pings on both sides notice a vanished peer; the hub
// enforces a minimum ping interval. The hub serves the gRPC health service
// (for "" and flotilla.sync.v1.Sync) to agents only: like every RPC it
// needs an agent certificate. Kubernetes probes use the hub's HTTP
// /healthz and /readyz (--health-probe-bind-address) instead.
//
// # Bounded input
//
// A member can be compromised; its agent's certificate then speaks for
// whoever holds it. What it can make the hub do is bounded, so that one
// member cannot take the hub's memory, its apiserver budget or other
// members' heartbeats (server.Config, the hub's flags in brackets):
//
//   - Size. A message from an agent larger than MaxRecvMessageBytes (1 MiB,
//     --sync-max-recv-message-bytes) ends its stream with
//     RESOURCE_EXHAUSTED before the hub reads it. An honest agent's largest
//     message is its hello, about 100 bytes per Work it holds: members of
//     more than some 10,000 Works need a higher limit.
//   - Status contents. Before a report reaches the StatusSink, the server
//     reads the Work from its source and keeps only what the agent may say
//     about it (clampStatus, pure): a report on a Work the hub does not
//     have, or on a generation it never had, is dropped; conditions only of
//     the types the agent owns (Applied, Available, Progressing, Degraded:
//     an allow-list), each once, valid for metav1.Condition, with a reason
//     the hub does not own (a deny-list of the hub's scheduling, rollout,
//     failover, health and prune reasons: the agent passes on reasons it
//     does not choose, such as a container's ImagePullBackOff), messages cut
//     to 1,024 bytes; manifests only of the Work's own objects, each once;
//     replica counts, for a Deployment only, clamped into [0, replicas +
//     maxSurge], the most pods a rolling update of the Work's Deployment
//     runs (25% rounded up by default, none for Recreate); generations
//     not below 0 and conditions' observedGeneration not above the Work's.
//     Counts are clamped one by one, not made consistent with each other.
//     What is cut is counted in
//     flotilla_sync_status_clamped_total{cluster, what} and never ends the
//     stream; a report that does not decode still does (Malformed input).
//     The Work CRD's status schema has matching maxItems, maxLength and
//     minimum bounds, so even a write that bypasses the server is refused.
//   - Status rate. Each stream takes StatusBurst reports at once, then
//     StatusRate per second (1,000 and 50, --member-status-burst and
//     --member-status-rate). A report beyond them is not decoded: it
//     waits in the stream's backlog, the latest per Work replacing the
//     one waiting (its place kept), oldest Work first, at most
//     StatusBacklogBytes (8 MiB, --member-status-buffer-bytes) of them; a
//     report that does not fit is dropped and counted (what
//     rate_backlog_full). The handler takes waiting reports between the
//     messages it receives, at most 64 at a time, so heartbeats never wait
//     behind a member's own status flood, and other members have their
//     own streams and goroutines.
//   - Connects. Each cluster may open ConnectBurst streams at once, then
//     ConnectRate per second (10 and 1, --member-connect-burst and
//     --member-connect-rate); more are refused with RESOURCE_EXHAUSTED
//     before any snapshot work, counted in
//     flotilla_sync_connects_limited_total{cluster}. The agent's backoff
//     (0.5 to 5 seconds) stays below the rate.
//
// The hub's status writer (hub/internal/syncbridge) bounds the rest: its
// pending reports are coalesced per Work and bounded in bytes per cluster
// (the same --member-status-buffer-bytes; a report past it is dropped and
// counted), and a write the apiserver refuses with a 4xx other than a
// conflict or throttling is dropped and counted, not retried forever
// (flotilla_work_status_dropped_total{cluster, what}).
//
// # Malformed input
//
// Both sides receive raw bytes and decode them themselves (see the fuzz
// tests). A message that does not parse, or that breaks the protocol
// (no hello first, a second hello, an empty message, an invalid name or
// JSON payload, a prune report for another epoch), ends that one stream with INVALID_ARGUMENT and a message
// naming the problem; other streams are untouched.
package sync
