package works

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
)

// Keys of the identity ConfigMap's data.
const (
	IdentityKeyFleetID = "fleetID"
	IdentityKeyCluster = "clusterName"
)

// FleetIdentity is a member's syncclient.Identity: ConfigMap
// flotilla-agent-identity in the member's flotilla-system records the fleet id
// and cluster name it serves, and client.DecideIdentity decides. It reads
// the member apiserver on every hello (never a cache), so an admin's
// annotation counts at the next reconnect.
type FleetIdentity struct {
	// Reader reads the record live (never a cache); Writer writes it.
	Reader kclient.Reader
	Writer kclient.Client
	// Namespace holds the record (the agent's namespace, flotilla-system).
	Namespace string
	// Accept is --accept-fleet-id: a fleet id the record may be re-pointed
	// to.
	Accept string
	// Applier learns the identity before anything is applied.
	Applier interface{ SetIdentity(fleetID, cluster string) }
	Log     logr.Logger
}

var _ syncclient.Identity = (*FleetIdentity)(nil)

// Admit implements syncclient.Identity.
func (f *FleetIdentity) Admit(ctx context.Context, fleetID, cluster string) error {
	key := kclient.Key{Namespace: f.Namespace, Name: flotillav1.AgentIdentityConfigMapName}
	cm := &corev1.ConfigMap{}
	found := true
	if err := f.Reader.Get(ctx, key, cm); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the agent's identity record %s: %w", key, err)
		}
		found = false
	}
	var recorded *syncclient.FleetRecord
	if found && cm.Data[IdentityKeyFleetID] != "" {
		recorded = &syncclient.FleetRecord{FleetID: cm.Data[IdentityKeyFleetID], Cluster: cm.Data[IdentityKeyCluster]}
	}
	offered := syncclient.FleetRecord{FleetID: fleetID, Cluster: cluster}
	accept := f.Accept
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
			f.Log.Info("recorded the fleet this agent serves", "fleetID", fleetID, "cluster", cluster, "record", key.String())
		} else {
			f.Log.Info("re-pointed on purpose: this agent now serves another fleet or cluster name",
				"fleetID", fleetID, "cluster", cluster, "previousFleetID", recorded.FleetID, "previousCluster", recorded.Cluster)
		}
	}
	if f.Applier != nil {
		f.Applier.SetIdentity(fleetID, cluster)
	}
	return nil
}

// record writes offered into the identity ConfigMap, dropping a used
// accept annotation. An update conflicts (and the stream is retried) when
// someone changed the ConfigMap since it was read.
func (f *FleetIdentity) record(ctx context.Context, cm *corev1.ConfigMap, found bool, offered syncclient.FleetRecord) error {
	data := map[string]string{IdentityKeyFleetID: offered.FleetID, IdentityKeyCluster: offered.Cluster}
	if !found {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: flotillav1.AgentIdentityConfigMapName},
			Data:       data,
		}
		err := f.Writer.Create(ctx, cm, "")
		if apierrors.IsNotFound(err) {
			// The namespace is missing (an agent run as a local process).
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.Namespace}}
			if err := f.Writer.Create(ctx, ns, ""); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating namespace %s for the agent's identity record: %w", f.Namespace, err)
			}
			err = f.Writer.Create(ctx, cm, "")
		}
		if err != nil {
			return fmt.Errorf("recording the fleet this agent serves: %w", err)
		}
		return nil
	}
	cm.Data = data
	delete(cm.Annotations, flotillav1.AnnotationAcceptFleetID)
	if err := f.Writer.Update(ctx, cm, ""); err != nil {
		return fmt.Errorf("recording the fleet this agent serves: %w", err)
	}
	return nil
}
