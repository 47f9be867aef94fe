package client

import (
	"context"
	"fmt"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Applier makes the member cluster run what the hub sends. The agent backs
// it with server-side apply (pkg/apply); tests back it with a map.
//
// The client calls it from one goroutine, in the order the hub's messages
// arrived, and waits for each call: an applier that blocks holds up the
// stream, and the hub's coalescing queue (not memory in this process)
// absorbs what arrives meanwhile. Calls get the context given to Run, not
// the stream's, so an apply in progress is not cut off because the
// connection dropped.
type Applier interface {
	// Held lists the Works the member runs now, with the uid and generation
	// applied. It is called before every hello so that, after a reconnect
	// or a restart, the hub sends only what changed. A Work whose objects
	// may still run but whose applied version is not known (generation 0)
	// is sent again if the hub still wants it; if the hub is deleting it,
	// the hub confirms its deletion only after the agent is done with it
	// (a WorkGone, or the snapshot's prune), never from the hello alone.
	Held(ctx context.Context) ([]HeldWork, error)
	// Apply makes the member run work, creating or updating what its
	// manifests describe. An error is retried with backoff, with the latest
	// version of the Work, until it succeeds or the hub moves on.
	Apply(ctx context.Context, work *v1alpha1.Work) error
	// Delete removes Work name and everything applied for it. Errors are
	// retried like Apply's.
	Delete(ctx context.Context, name string) error
	// Orphan forgets Work name without deleting anything it applied: the
	// Work vanished from the hub without the hub meaning to delete it. The
	// applier stops applying and reporting it and drops its record of what
	// it applied, so that no later prune or delete touches those objects;
	// they keep running, and a Work of the same name applied later adopts
	// them again. Errors are retried like Apply's.
	Orphan(ctx context.Context, name string) error
	// SnapshotComplete says the hub's snapshot is complete: keep names
	// every Work the member should run now, and the applier removes any
	// other Work it runs. It is the only call that prunes, because only a
	// complete snapshot proves a Work is gone rather than not sent yet.
	//
	// An applier with a deletion brake returns an error wrapping a
	// *PruneBlockedError when the prune would delete too much, and prunes
	// nothing; the client reports it to the hub and calls again, with
	// confirmed set and what the hub wants by then as keep, once an admin
	// confirms. Other errors are retried with backoff, with keep computed
	// again at each attempt.
	SnapshotComplete(ctx context.Context, keep []string, confirmed bool) error
}

// Stander is implemented by an Applier that can stand down: stop applying
// and reconciling every Work it holds, deleting nothing and keeping its
// records, so the objects run on as they are. The client calls it when the
// hub refuses this agent (PERMISSION_DENIED: the member is not Accepted, is
// in Push mode, or its certificate was revoked), because then someone else
// may be applying the member's Works (the hub itself in Push mode), and an
// agent repairing "drift" from its old copies would fight it. The next
// accepted stream's snapshot hands the applier everything again.
type Stander interface {
	StandDown(ctx context.Context)
}

// PruneBlockedError says an Applier's deletion brake held a prune: it
// would delete WouldDelete of the Held objects the member holds, those of
// Works. Nothing was deleted.
type PruneBlockedError struct {
	WouldDelete, Held int
	Works             []string
}

func (e *PruneBlockedError) Error() string {
	return fmt.Sprintf("the deletion brake holds a prune that would delete %d of %d objects (of Works %v); an admin must confirm it", e.WouldDelete, e.Held, e.Works)
}

// Identity records, persistently in the member, which fleet (hub) and
// which cluster name this agent serves, so that an agent pointed at
// another hub, or at a hub restored from a backup, refuses it instead of
// obeying it.
type Identity interface {
	// Admit is called with each stream's HubHello, before the agent says
	// what it holds or applies anything. It returns nil when the agent
	// serves fleetID as cluster: the record says so, there was no record
	// (Admit records them), or an admin re-pointed the agent on purpose
	// (Admit replaces the record). It returns an error wrapping a
	// *FleetMismatchError when the agent must refuse the hub; the client
	// then sends a Refusal and reconnects with backoff. Any other error
	// (the member apiserver did not answer) ends the stream, to be tried
	// again.
	Admit(ctx context.Context, fleetID, cluster string) error
}

// FleetMismatchError says why an agent refuses a hub.
type FleetMismatchError struct {
	// FleetID and Cluster are what the hub said; RecordedFleetID and
	// RecordedCluster what the agent serves.
	FleetID, Cluster                 string
	RecordedFleetID, RecordedCluster string
	// Reason says, for a person, what differs and how to accept it.
	Reason string
}

func (e *FleetMismatchError) Error() string { return "refusing the hub: " + e.Reason }

// HeldWork is one Work the member runs.
type HeldWork struct {
	Name       string
	UID        string
	Generation int64
}
