// Package leader helps a leader-elected component prove, before it
// deletes anything, that it still leads: Lock builds the Lease lock with an
// identity the caller knows, and Fence reads that Lease live and fails
// unless the caller holds it. The agent and the hub's push mode fence
// pkg/apply's deletions with it, so a paused old leader that resumes after
// a new one took over deletes nothing.
package leader

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// Lock is a leader election Lease lock for controller-runtime's
// Options.LeaderElectionResourceLockInterface, built here rather than by
// controller-runtime so that the caller knows its own holder identity
// (instance_uuid, returned), which Fence compares with the Lease's.
func Lock(cfg *rest.Config, namespace, name, instance string) (resourcelock.Interface, string, error) {
	c, err := coordinationclient.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, "", fmt.Errorf("building the leader election client: %w", err)
	}
	id := instance + "_" + string(uuid.NewUUID())
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     c,
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}, id, nil
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
