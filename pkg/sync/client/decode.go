package client

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

type messageKind int

const (
	kindUpsert messageKind = iota + 1
	kindDelete
	kindSnapshotComplete
	kindHubHello
	kindPruneConfirm
	kindOrphan
)

// hubMessage is a decoded, checked HubMessage.
type hubMessage struct {
	kind   messageKind
	upsert *v1alpha1.Work // kindUpsert
	delete string         // kindDelete
	orphan string         // kindOrphan
	keep   []string       // kindSnapshotComplete
	// kindHubHello: the hub's fleet id, the cluster it takes the agent
	// for, and the stream's epoch (also kindPruneConfirm's).
	fleetID string
	cluster string
	epoch   uint64
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// decodeHubMessage parses and checks one message from the hub for the
// agent of cluster. The hub is trusted more than an agent is, but a
// malformed message still ends the stream rather than reaching the
// applier: the agent reconnects and gets a fresh snapshot.
func decodeHubMessage(data []byte, cluster string) (hubMessage, error) {
	m := &syncv1.HubMessage{}
	if err := proto.Unmarshal(data, m); err != nil {
		return hubMessage{}, invalid("malformed hub message: %v", err)
	}
	switch k := m.GetKind().(type) {
	case *syncv1.HubMessage_Upsert:
		w, err := wire.DecodeWork(k.Upsert.GetWork(), cluster)
		if err != nil {
			return hubMessage{}, invalid("upsert: %v", err)
		}
		return hubMessage{kind: kindUpsert, upsert: w}, nil
	case *syncv1.HubMessage_Delete:
		if err := wire.ValidateWorkName(k.Delete.GetName()); err != nil {
			return hubMessage{}, invalid("delete: %v", err)
		}
		return hubMessage{kind: kindDelete, delete: k.Delete.GetName()}, nil
	case *syncv1.HubMessage_Orphan:
		if err := wire.ValidateWorkName(k.Orphan.GetName()); err != nil {
			return hubMessage{}, invalid("orphan: %v", err)
		}
		return hubMessage{kind: kindOrphan, orphan: k.Orphan.GetName()}, nil
	case *syncv1.HubMessage_SnapshotComplete:
		names := k.SnapshotComplete.GetNames()
		if len(names) > wire.MaxHeldWorks {
			return hubMessage{}, invalid("snapshot_complete: %d names is more than the %d allowed", len(names), wire.MaxHeldWorks)
		}
		seen := make(map[string]bool, len(names))
		for _, n := range names {
			if err := wire.ValidateWorkName(n); err != nil {
				return hubMessage{}, invalid("snapshot_complete: %v", err)
			}
			if seen[n] {
				return hubMessage{}, invalid("snapshot_complete: %q is listed twice", n)
			}
			seen[n] = true
		}
		return hubMessage{kind: kindSnapshotComplete, keep: append([]string{}, names...)}, nil
	case *syncv1.HubMessage_HubHello:
		if err := wire.ValidateFleetID(k.HubHello.GetFleetId()); err != nil {
			return hubMessage{}, invalid("hub_hello: %v", err)
		}
		if k.HubHello.GetClusterName() == "" || len(k.HubHello.GetClusterName()) > wire.MaxLabelLength {
			return hubMessage{}, invalid("hub_hello: cluster_name is empty or longer than %d characters", wire.MaxLabelLength)
		}
		return hubMessage{kind: kindHubHello, fleetID: k.HubHello.GetFleetId(), cluster: k.HubHello.GetClusterName(), epoch: k.HubHello.GetEpoch()}, nil
	case *syncv1.HubMessage_PruneConfirm:
		return hubMessage{kind: kindPruneConfirm, epoch: k.PruneConfirm.GetEpoch()}, nil
	default:
		return hubMessage{}, invalid("empty hub message: exactly one of hub_hello, upsert, delete, orphan, snapshot_complete or prune_confirm must be set")
	}
}
