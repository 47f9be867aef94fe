package setup

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
)

// The agent's record of the fleet it serves, and the Lease read by the
// fence.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get

// Keys of the identity ConfigMap's data.
const (
	identityKeyFleetID = "fleetID"
	identityKeyCluster = "clusterName"
)

// agentNamespace is where the agent keeps its identity record.
func agentNamespace(opts Options) string {
	for _, ns := range []string{opts.Namespace, opts.LeaderElectionNamespace, os.Getenv("POD_NAMESPACE")} {
		if ns != "" {
			return ns
		}
	}
	return flotillav1.SystemNamespace
}

// fleetIdentity is the agent's syncclient.Identity: ConfigMap
// flotilla-agent-identity in the agent's namespace records the fleet id
// and cluster name it serves, and client.DecideIdentity decides. It reads
// the member apiserver on every hello (never a cache), so an admin's
// annotation counts at the next reconnect.
type fleetIdentity struct {
	reader    client.Reader
	writer    client.Client
	namespace string
	// accept is --accept-fleet-id.
	accept string
	// applier learns the identity before anything is applied.
	applier interface{ SetIdentity(fleetID, cluster string) }
	log     logr.Logger
}

var _ syncclient.Identity = (*fleetIdentity)(nil)

// Admit implements syncclient.Identity.
func (f *fleetIdentity) Admit(ctx context.Context, fleetID, cluster string) error {
	key := client.ObjectKey{Namespace: f.namespace, Name: flotillav1.AgentIdentityConfigMapName}
	cm := &corev1.ConfigMap{}
	found := true
	if err := f.reader.Get(ctx, key, cm); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the agent's identity record %s: %w", key, err)
		}
		found = false
	}
	var recorded *syncclient.FleetRecord
	if found && cm.Data[identityKeyFleetID] != "" {
		recorded = &syncclient.FleetRecord{FleetID: cm.Data[identityKeyFleetID], Cluster: cm.Data[identityKeyCluster]}
	}
	offered := syncclient.FleetRecord{FleetID: fleetID, Cluster: cluster}
	accept := f.accept
	if a := cm.Annotations[flotillav1.AnnotationAcceptFleetID]; a != "" && a == fleetID {
		accept = a
	}
	write, err := syncclient.DecideIdentity(recorded, offered, accept)
	if err != nil {
		return err
	}
	if write {
		if err := f.record(ctx, cm, found, offered); err != nil {
			return err
		}
		if recorded == nil {
			f.log.Info("recorded the fleet this agent serves", "fleetID", fleetID, "cluster", cluster, "record", key.String())
		} else {
			f.log.Info("re-pointed on purpose: this agent now serves another fleet or cluster name",
				"fleetID", fleetID, "cluster", cluster, "previousFleetID", recorded.FleetID, "previousCluster", recorded.Cluster)
		}
	}
	if f.applier != nil {
		f.applier.SetIdentity(fleetID, cluster)
	}
	return nil
}

// record writes offered into the identity ConfigMap, dropping a used
// accept annotation. An update conflicts (and the stream is retried) when
// someone changed the ConfigMap since it was read.
func (f *fleetIdentity) record(ctx context.Context, cm *corev1.ConfigMap, found bool, offered syncclient.FleetRecord) error {
	data := map[string]string{identityKeyFleetID: offered.FleetID, identityKeyCluster: offered.Cluster}
	if !found {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace, Name: flotillav1.AgentIdentityConfigMapName},
			Data:       data,
		}
		err := f.writer.Create(ctx, cm)
		if apierrors.IsNotFound(err) {
			// The namespace is missing (an agent run as a local process).
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.namespace}}
			if err := f.writer.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating namespace %s for the agent's identity record: %w", f.namespace, err)
			}
			err = f.writer.Create(ctx, cm)
		}
		if err != nil {
			return fmt.Errorf("recording the fleet this agent serves: %w", err)
		}
		return nil
	}
	cm.Data = data
	delete(cm.Annotations, flotillav1.AnnotationAcceptFleetID)
	if err := f.writer.Update(ctx, cm); err != nil {
		return fmt.Errorf("recording the fleet this agent serves: %w", err)
	}
	return nil
}

// leaderLock is the agent's leader election lock, built here rather than
// by controller-runtime so that the agent knows its own holder identity,
// which the fence compares with the Lease's.
func leaderLock(cfg *rest.Config, namespace, name, instance string) (resourcelock.Interface, string, error) {
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

// leaseFence is the Applier's Fence: before each batch of deletions it
// reads the agent's leader Lease from the member apiserver (never a cache,
// which could be as stale as the paused process reading it) and fails
// unless this instance holds it and its last renewal has not expired. So
// an old leader that was paused, and resumes after a new one took over,
// deletes nothing.
func leaseFence(reader client.Reader, key client.ObjectKey, identity string, now func() time.Time) func(context.Context) error {
	return func(ctx context.Context) error {
		lease := &coordinationv1.Lease{}
		if err := reader.Get(ctx, key, lease); err != nil {
			return fmt.Errorf("fence: reading the leader Lease %s: %w", key, err)
		}
		return holdsLease(lease, identity, now())
	}
}

// holdsLease says whether identity holds lease at now.
func holdsLease(lease *coordinationv1.Lease, identity string, now time.Time) error {
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder != identity {
		return fmt.Errorf("fence: this agent (%s) no longer holds the leader Lease %s/%s (held by %q); deleting nothing", identity, lease.Namespace, lease.Name, holder)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return fmt.Errorf("fence: the leader Lease %s/%s has no renew time or duration; deleting nothing", lease.Namespace, lease.Name)
	}
	expiry := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	if !now.Before(expiry) {
		return fmt.Errorf("fence: this agent's hold on the leader Lease %s/%s expired at %s; deleting nothing", lease.Namespace, lease.Name, expiry.UTC().Format(time.RFC3339))
	}
	return nil
}
