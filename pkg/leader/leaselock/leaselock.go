// Package leaselock builds client-go's leader election Lease lock for a
// controller-runtime manager. It lives apart from pkg/leader because the
// lock needs client-go's typed coordination client, whose package links
// client-go's scheme of every API group; pkg/leader, which an agent without
// controller-runtime imports for its Elector and Fence, must not
// (docs/architecture.md, "Executable size").
package leaselock

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/flotilla-dev/flotilla/pkg/leader"
)

// New returns a leader election Lease lock for controller-runtime's
// Options.LeaderElectionResourceLockInterface, built here rather than by
// controller-runtime so that the caller knows its own holder identity
// (leader.NewIdentity of instance, returned), which leader.Fence compares
// with the Lease's.
func New(cfg *rest.Config, namespace, name, instance string) (resourcelock.Interface, string, error) {
	c, err := coordinationclient.NewForConfig(rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election"))
	if err != nil {
		return nil, "", fmt.Errorf("building the leader election client: %w", err)
	}
	id := leader.NewIdentity(instance)
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     c,
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}, id, nil
}
