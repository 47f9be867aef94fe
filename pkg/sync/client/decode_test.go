package client

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

const fuzzCluster = "east"

func mustMarshal(t testing.TB, m proto.Message) []byte {
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func upsert(t testing.TB, workJSON string) []byte {
	return mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_Upsert{Upsert: &syncv1.WorkUpsert{Work: []byte(workJSON)}}})
}

const goodWork = `{"apiVersion":"flotilla.dev/v1alpha1","kind":"Work","metadata":{"name":"web","namespace":"flotilla-cluster-east","uid":"u1","generation":2},` +
	`"spec":{"manifests":[{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"}}]}}`

func hubSeeds(t testing.TB) [][]byte {
	return [][]byte{
		upsert(t, goodWork),
		upsert(t, strings.Replace(goodWork, "flotilla-cluster-east", "flotilla-cluster-west", 1)),
		mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_Delete{Delete: &syncv1.WorkDelete{Name: "web"}}}),
		mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_SnapshotComplete{SnapshotComplete: &syncv1.SnapshotComplete{Names: []string{"a", "web"}}}}),
		mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_SnapshotComplete{SnapshotComplete: &syncv1.SnapshotComplete{}}}),
		{},
		{0x0a, 0xff},
		mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_HubHello{HubHello: &syncv1.HubHello{FleetId: "f-1", ClusterName: fuzzCluster, Epoch: 9}}}),
		mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_HubHello{HubHello: &syncv1.HubHello{ClusterName: fuzzCluster}}}),
		mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_PruneConfirm{PruneConfirm: &syncv1.PruneConfirm{Epoch: 9}}}),
		mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_Orphan{Orphan: &syncv1.WorkOrphan{Name: "web"}}}),
	}
}

func TestDecodeHubMessages(t *testing.T) {
	seeds := hubSeeds(t)
	tests := []struct {
		name string
		data []byte
		kind messageKind
		msg  string
	}{
		{name: "upsert", data: seeds[0], kind: kindUpsert},
		{name: "upsert for another cluster", data: seeds[1], msg: "not this cluster's"},
		{name: "delete", data: seeds[2], kind: kindDelete},
		{name: "snapshot complete", data: seeds[3], kind: kindSnapshotComplete},
		{name: "empty snapshot complete", data: seeds[4], kind: kindSnapshotComplete},
		{name: "empty", data: seeds[5], msg: "empty hub message"},
		{name: "garbage", data: seeds[6], msg: "malformed"},
		{name: "hub hello", data: seeds[7], kind: kindHubHello},
		{name: "hub hello without a fleet id", data: seeds[8], msg: "fleet id is empty"},
		{name: "prune confirm", data: seeds[9], kind: kindPruneConfirm},
		{name: "orphan", data: seeds[10], kind: kindOrphan},
		{name: "orphan with bad name", data: mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_Orphan{Orphan: &syncv1.WorkOrphan{Name: "a/b"}}}), msg: "not valid"},
		{name: "upsert that is not JSON", data: upsert(t, "{"), msg: "decoding work"},
		{name: "upsert without name", data: upsert(t, `{"metadata":{"namespace":"flotilla-cluster-east"}}`), msg: "empty"},
		{name: "delete with bad name", data: mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_Delete{Delete: &syncv1.WorkDelete{Name: "a/b"}}}), msg: "not valid"},
		{name: "snapshot with duplicates", data: mustMarshal(t, &syncv1.HubMessage{Kind: &syncv1.HubMessage_SnapshotComplete{SnapshotComplete: &syncv1.SnapshotComplete{Names: []string{"a", "a"}}}}), msg: "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := decodeHubMessage(tt.data, fuzzCluster)
			if tt.msg == "" {
				if err != nil || m.kind != tt.kind {
					t.Fatalf("got %+v, %v; want kind %d", m, err, tt.kind)
				}
				if m.kind == kindSnapshotComplete && m.keep == nil {
					t.Error("an empty snapshot must still be a list (keep nothing), not nil")
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v; want InvalidArgument containing %q", err, tt.msg)
			}
		})
	}
}

// FuzzHubMessage feeds arbitrary bytes, as the hub (or whatever answers in
// its place) could send them, to the client's decoding. It must never
// panic, refuse with INVALID_ARGUMENT only, and accept only Works of its
// own namespace.
func FuzzHubMessage(f *testing.F) {
	for _, s := range hubSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeHubMessage(data, fuzzCluster)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("refused with %v, want InvalidArgument", err)
			}
			return
		}
		switch m.kind {
		case kindUpsert:
			if m.upsert == nil || m.upsert.Namespace != "flotilla-cluster-"+fuzzCluster || m.upsert.Name == "" {
				t.Fatalf("accepted upsert %+v", m.upsert)
			}
		case kindDelete:
			if m.delete == "" {
				t.Fatal("accepted a delete without a name")
			}
		case kindOrphan:
			if m.orphan == "" {
				t.Fatal("accepted an orphan without a name")
			}
		case kindSnapshotComplete:
			if m.keep == nil {
				t.Fatal("accepted a snapshot with a nil keep list")
			}
		case kindHubHello:
			if m.fleetID == "" || m.cluster == "" {
				t.Fatalf("accepted a hub hello without fleet or cluster: %+v", m)
			}
		case kindPruneConfirm:
		default:
			t.Fatalf("accepted a message of kind %d", m.kind)
		}
	})
}
