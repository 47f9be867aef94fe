// Package leader elects one replica of a component as its leader and
// helps the leader prove, before it deletes anything, that it still leads.
// Elector runs the election on a coordination.k8s.io Lease, as client-go's
// leader election does, but through the narrow kclient.Client, so that an
// agent without controller-runtime does not link client-go's typed
// clients and their scheme of every API group (docs/architecture.md,
// "Executable size"); leaselock builds client-go's own Lease lock for a
// controller-runtime manager. Fence reads the Lease live and fails unless
// the caller holds it. The agent and the hub's push mode fence pkg/apply's
// deletions with it, so a paused old leader that resumes after a new one
// took over deletes nothing.
package leader

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// NewIdentity returns a leader election holder identity for instance (a
// pod or host name): instance_uuid. The uuid tells apart two processes of
// one instance, such as a restarted agent and the old process it replaces,
// which must not both think they hold the Lease.
func NewIdentity(instance string) string {
	return instance + "_" + string(uuid.NewUUID())
}

// Fence is pkg/apply's Options.Fence: before each batch of deletions it
// reads the caller's leader Lease from its apiserver (never a cache,
// which could be as stale as the paused process reading it) and fails
// unless identity holds it and its last renewal has not expired. So
// an old leader that was paused, and resumes after a new one took over,
// deletes nothing.
func Fence(reader kclient.Reader, key kclient.Key, identity string, now func() time.Time) func(context.Context) error {
	return func(ctx context.Context) error {
		lease := &coordinationv1.Lease{}
		if err := reader.Get(ctx, key, lease); err != nil {
			return fmt.Errorf("fence: reading the leader Lease %s: %w", key, err)
		}
		return Holds(lease, identity, now())
	}
}

// Holds says whether identity holds lease at now.
func Holds(lease *coordinationv1.Lease, identity string, now time.Time) error {
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder != identity {
		return fmt.Errorf("fence: this replica (%s) no longer holds the leader Lease %s/%s (held by %q); deleting nothing", identity, lease.Namespace, lease.Name, holder)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return fmt.Errorf("fence: the leader Lease %s/%s has no renew time or duration; deleting nothing", lease.Namespace, lease.Name)
	}
	expiry := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	if !now.Before(expiry) {
		return fmt.Errorf("fence: this replica's hold on the leader Lease %s/%s expired at %s; deleting nothing", lease.Namespace, lease.Name, expiry.UTC().Format(time.RFC3339))
	}
	return nil
}
