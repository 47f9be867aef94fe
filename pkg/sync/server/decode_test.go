package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

const fuzzCluster = "east"

// handleAgentBytes runs the checks the server applies to one message off
// the wire: decoding, then the checks for its kind. It returns nil for a
// message the server would act on.
func handleAgentBytes(data []byte, cluster string) error {
	m, err := decodeAgentMessage(data)
	if err != nil {
		return err
	}
	switch k := m.GetKind().(type) {
	case *syncv1.AgentMessage_Hello:
		_, err = decodeHello(k.Hello)
	case *syncv1.AgentMessage_Status:
		_, _, err = decodeStatus(k.Status, cluster)
	case *syncv1.AgentMessage_Heartbeat:
		_, err = decodeHeartbeat(k.Heartbeat)
	case *syncv1.AgentMessage_Refusal:
		_, err = decodeRefusal(k.Refusal)
	case *syncv1.AgentMessage_PruneBlocked:
		_, err = decodePruneBlocked(k.PruneBlocked, fuzzEpoch)
	}
	return err
}

// fuzzEpoch is the stream epoch prune reports are checked against.
const fuzzEpoch = 7

func mustMarshal(t testing.TB, m proto.Message) []byte {
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func agentSeeds(t testing.TB) [][]byte {
	return [][]byte{
		mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: &syncv1.Hello{
			AgentVersion: "v1", Instance: "agent-0",
			Held:            []*syncv1.HeldWork{{Name: "web", Uid: "u1", Generation: 3}},
			ResourceSummary: []byte(`{"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"},"nodes":2}`),
		}}}),
		mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Status{Status: &syncv1.StatusReport{
			Namespace: "flotilla-cluster-east", Name: "web",
			Status: []byte(`{"observedGeneration":3,"conditions":[{"type":"Applied","status":"True","reason":"Applied","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}],` +
				`"manifests":[{"group":"apps","version":"v1","kind":"Deployment","namespace":"default","name":"web","workload":{"replicas":3,"readyReplicas":2}}]}`),
		}}}),
		mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Status{Status: &syncv1.StatusReport{
			Namespace: "flotilla-cluster-west", Name: "web", Status: []byte(`{}`),
		}}}),
		mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Heartbeat{Heartbeat: &syncv1.Heartbeat{
			ResourceSummary: []byte(`{"allocated":{"cpu":"500m"}}`),
		}}}),
		{},
		{0xff, 0x01},
		mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Refusal{Refusal: &syncv1.Refusal{
			Reason: "this agent serves fleet a", RecordedFleetId: "a", RecordedClusterName: "east"}}}),
		mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_PruneBlocked{PruneBlocked: &syncv1.PruneBlocked{
			Epoch: fuzzEpoch, WouldDelete: 3, Held: 4, Works: []string{"b", "c", "d"}}}}),
		mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_PruneBlocked{PruneBlocked: &syncv1.PruneBlocked{
			Epoch: fuzzEpoch + 1, WouldDelete: 3, Held: 4}}}),
	}
}

func TestDecodeAgentMessages(t *testing.T) {
	seeds := agentSeeds(t)
	tests := []struct {
		name string
		data []byte
		code codes.Code
		msg  string
	}{
		{name: "hello", data: seeds[0], code: codes.OK},
		{name: "status", data: seeds[1], code: codes.OK},
		{name: "status for another cluster", data: seeds[2], code: codes.PermissionDenied, msg: "may report only on Works in namespace"},
		{name: "heartbeat", data: seeds[3], code: codes.OK},
		{name: "empty", data: seeds[4], code: codes.InvalidArgument, msg: "empty agent message"},
		{name: "garbage", data: seeds[5], code: codes.InvalidArgument, msg: "malformed"},
		{name: "refusal", data: seeds[6], code: codes.OK},
		{name: "prune blocked", data: seeds[7], code: codes.OK},
		{name: "prune blocked for another epoch", data: seeds[8], code: codes.InvalidArgument, msg: "not this stream's"},
		{name: "prune blocked with a bad Work name", data: mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_PruneBlocked{PruneBlocked: &syncv1.PruneBlocked{
			Epoch: fuzzEpoch, Works: []string{"a/b"}}}}), code: codes.InvalidArgument, msg: "not valid"},
		{name: "long refusal", data: mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Refusal{Refusal: &syncv1.Refusal{
			Reason: strings.Repeat("r", 2000)}}}), code: codes.InvalidArgument, msg: "reason is longer"},
		{name: "negative generation", data: mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: &syncv1.Hello{
			Held: []*syncv1.HeldWork{{Name: "web", Generation: -1}}}}}), code: codes.InvalidArgument, msg: "negative generation"},
		{name: "duplicate held", data: mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: &syncv1.Hello{
			Held: []*syncv1.HeldWork{{Name: "web"}, {Name: "web"}}}}}), code: codes.InvalidArgument, msg: "listed twice"},
		{name: "long version", data: mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: &syncv1.Hello{
			AgentVersion: strings.Repeat("v", 300)}}}), code: codes.InvalidArgument, msg: "agent_version"},
		{name: "bad resource summary", data: mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Heartbeat{Heartbeat: &syncv1.Heartbeat{
			ResourceSummary: []byte(`{"allocatable":{"cpu":"lots"}}`)}}}), code: codes.InvalidArgument, msg: "resource summary"},
		{name: "status with camel-cased field", data: mustMarshal(t, &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Status{Status: &syncv1.StatusReport{
			Namespace: "flotilla-cluster-east", Name: "web", Status: []byte(`{"ObservedGeneration":"x"}`)}}}), code: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := handleAgentBytes(tt.data, fuzzCluster)
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Errorf("got %v; want %s containing %q", err, tt.code, tt.msg)
			}
		})
	}
}

// FuzzAgentMessage feeds arbitrary bytes, as an agent could send them, to
// the server's decoding and checks. It must never panic, every refusal
// must be INVALID_ARGUMENT or PERMISSION_DENIED, and an accepted status
// report must be for the agent's own namespace.
func FuzzAgentMessage(f *testing.F) {
	for _, s := range agentSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := handleAgentBytes(data, fuzzCluster)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.PermissionDenied {
				t.Fatalf("refused with %s, want InvalidArgument or PermissionDenied: %v", c, err)
			}
			return
		}
		m, _ := decodeAgentMessage(data)
		if s := m.GetStatus(); s != nil && s.GetNamespace() != "flotilla-cluster-"+fuzzCluster {
			t.Fatalf("accepted a status report for namespace %q", s.GetNamespace())
		}
	})
}
