package client

import (
	"context"

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
	// or a restart, the hub sends only what changed.
	Held(ctx context.Context) ([]HeldWork, error)
	// Apply makes the member run work, creating or updating what its
	// manifests describe. An error is retried with backoff, with the latest
	// version of the Work, until it succeeds or the hub moves on.
	Apply(ctx context.Context, work *v1alpha1.Work) error
	// Delete removes Work name and everything applied for it. Errors are
	// retried like Apply's.
	Delete(ctx context.Context, name string) error
	// SnapshotComplete says the hub's snapshot is complete: keep names
	// every Work the member should run now, and the applier removes any
	// other Work it runs. It is the only call that prunes, because only a
	// complete snapshot proves a Work is gone rather than not sent yet.
	SnapshotComplete(ctx context.Context, keep []string) error
}

// HeldWork is one Work the member runs.
type HeldWork struct {
	Name       string
	UID        string
	Generation int64
}
