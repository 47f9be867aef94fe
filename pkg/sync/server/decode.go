package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// This file turns what an agent sent into values the server can trust.
// Every function here takes peer input; each error is the gRPC status that
// ends the stream, INVALID_ARGUMENT for malformed input and
// PERMISSION_DENIED for input the agent's identity does not allow.

// heldWork is what an agent says it has applied of one Work.
type heldWork struct {
	uid        string
	generation int64
}

// hello is a decoded Hello.
type hello struct {
	version           string
	instance          string
	kubernetesVersion string
	held              map[string]heldWork
	resources         *v1alpha1.ResourceSummary
}

// decodeAgentMessage parses one message as it came off the wire.
func decodeAgentMessage(data []byte) (*syncv1.AgentMessage, error) {
	m := &syncv1.AgentMessage{}
	if err := proto.Unmarshal(data, m); err != nil {
		return nil, invalid("malformed agent message: %v", err)
	}
	if m.GetKind() == nil {
		return nil, invalid("empty agent message: exactly one of hello, refusal, status, heartbeat, prune_blocked or snapshot_pruned must be set")
	}
	return m, nil
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func decodeHello(m *syncv1.Hello) (*hello, error) {
	for _, f := range []struct{ name, value string }{
		{"agent_version", m.GetAgentVersion()},
		{"instance", m.GetInstance()},
		{"kubernetes_version", m.GetKubernetesVersion()},
	} {
		if err := wire.ValidateLabel(f.name, f.value); err != nil {
			return nil, invalid("hello: %v", err)
		}
	}
	if n := len(m.GetHeld()); n > wire.MaxHeldWorks {
		return nil, invalid("hello: %d held Works is more than the %d allowed", n, wire.MaxHeldWorks)
	}
	h := &hello{
		version:           m.GetAgentVersion(),
		instance:          m.GetInstance(),
		kubernetesVersion: m.GetKubernetesVersion(),
		held:              make(map[string]heldWork, len(m.GetHeld())),
	}
	for _, w := range m.GetHeld() {
		if err := wire.ValidateWorkName(w.GetName()); err != nil {
			return nil, invalid("hello: held: %v", err)
		}
		if err := wire.ValidateUID(w.GetUid()); err != nil {
			return nil, invalid("hello: held work %q: %v", w.GetName(), err)
		}
		if w.GetGeneration() < 0 {
			return nil, invalid("hello: held work %q has negative generation %d", w.GetName(), w.GetGeneration())
		}
		if _, dup := h.held[w.GetName()]; dup {
			return nil, invalid("hello: held work %q is listed twice", w.GetName())
		}
		h.held[w.GetName()] = heldWork{uid: w.GetUid(), generation: w.GetGeneration()}
	}
	rs, err := wire.DecodeResourceSummary(m.GetResourceSummary())
	if err != nil {
		return nil, invalid("hello: %v", err)
	}
	h.resources = rs
	return h, nil
}

// decodeStatus checks a status report from cluster's agent. A report on a
// Work outside cluster's namespace is refused whatever else it holds: an
// agent may speak only for its own cluster.
func decodeStatus(m *syncv1.StatusReport, cluster string) (string, *v1alpha1.WorkStatus, error) {
	if err := checkStatusTarget(m, cluster); err != nil {
		return "", nil, err
	}
	st, err := wire.DecodeWorkStatus(m.GetStatus())
	if err != nil {
		return "", nil, invalid("status of work %q: %v", m.GetName(), err)
	}
	return m.GetName(), st, nil
}

// checkStatusTarget checks, before the report is paced or decoded, that
// it names a valid Work of cluster's namespace.
func checkStatusTarget(m *syncv1.StatusReport, cluster string) error {
	if want := v1alpha1.ClusterNamespace(cluster); m.GetNamespace() != want {
		return status.Errorf(codes.PermissionDenied,
			"the certificate for cluster %q may report only on Works in namespace %q, not on %q in %q",
			cluster, want, truncate.String(m.GetName(), maxQuoted), truncate.String(m.GetNamespace(), maxQuoted))
	}
	if err := wire.ValidateWorkName(m.GetName()); err != nil {
		return invalid("status: %v", err)
	}
	return nil
}

func decodeRefusal(m *syncv1.Refusal) (Refusal, error) {
	for _, f := range []struct{ name, value string }{
		{"reason", m.GetReason()},
		{"recorded_fleet_id", m.GetRecordedFleetId()},
		{"recorded_cluster_name", m.GetRecordedClusterName()},
	} {
		if len(f.value) > wire.MaxReasonLength {
			return Refusal{}, invalid("refusal: %s is longer than %d characters", f.name, wire.MaxReasonLength)
		}
	}
	return Refusal{Reason: m.GetReason(), RecordedFleetID: m.GetRecordedFleetId(), RecordedCluster: m.GetRecordedClusterName()}, nil
}

// decodePruneBlocked checks a prune report against the epoch of the
// stream it came on: an agent can only report on its own snapshot.
func decodePruneBlocked(m *syncv1.PruneBlocked, epoch uint64) (PruneBlocked, error) {
	if m.GetEpoch() != epoch {
		return PruneBlocked{}, invalid("prune_blocked: epoch %d is not this stream's (%d)", m.GetEpoch(), epoch)
	}
	if m.GetWouldDelete() < 0 || m.GetHeld() < 0 {
		return PruneBlocked{}, invalid("prune_blocked: negative counts (%d of %d)", m.GetWouldDelete(), m.GetHeld())
	}
	if n := len(m.GetWorks()); n > wire.MaxBlockedWorks {
		return PruneBlocked{}, invalid("prune_blocked: %d Works is more than the %d allowed", n, wire.MaxBlockedWorks)
	}
	for _, w := range m.GetWorks() {
		if err := wire.ValidateWorkName(w); err != nil {
			return PruneBlocked{}, invalid("prune_blocked: %v", err)
		}
	}
	return PruneBlocked{Epoch: m.GetEpoch(), WouldDelete: m.GetWouldDelete(), Held: m.GetHeld(), Works: m.GetWorks()}, nil
}

func decodeHeartbeat(m *syncv1.Heartbeat) (*v1alpha1.ResourceSummary, error) {
	rs, err := wire.DecodeResourceSummary(m.GetResourceSummary())
	if err != nil {
		return nil, invalid("heartbeat: %v", err)
	}
	return rs, nil
}

// maxQuoted bounds a peer-chosen string quoted in an error message.
const maxQuoted = 64
