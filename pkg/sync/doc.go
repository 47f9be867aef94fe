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
//	  | -- Hello{held: [(name, uid, gen)]} --> |  checks certificate, MemberCluster
//	  |                                        |  waits until its Work cache synced
//	  | <-- WorkUpsert / WorkDelete ...  ----- |  snapshot: only the difference
//	  | <-- SnapshotComplete{names} ---------- |  "keep exactly these"
//	  | <-- WorkUpsert / WorkDelete ...  ----- |  then every change
//	  | -- StatusReport / Heartbeat ... -----> |  at any time after Hello
//
// Objects travel as JSON bytes encoded with the api/v1alpha1 types (a Work
// in WorkUpsert, a WorkStatus in StatusReport, a ResourceSummary in Hello
// and Heartbeat), so a new API field needs no .proto change.
//
// The snapshot is a diff against what the hello says the agent holds: a
// Work whose uid and generation match is skipped, a held Work the hub no
// longer has is deleted. The agent prunes only on SnapshotComplete, since
// before it a missing Work may just not have been sent yet. A hub whose
// Work cache has not synced sends nothing until it has: an empty snapshot
// from a cold cache would make every agent delete everything it runs.
//
// After a dropped connection the agent reconnects with exponential backoff
// and jitter and says again what it holds, so the new snapshot sends only
// what it missed, and it sends the latest status of every Work again. A
// second stream for the same cluster replaces the first, which ends with
// ABORTED ("replaced by a newer stream").
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
// JSON payload), ends that one stream with INVALID_ARGUMENT and a message
// naming the problem; other streams are untouched.
package sync
