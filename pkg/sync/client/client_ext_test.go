package client_test

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// badHub answers every stream with one message the client must refuse.
type badHub struct {
	syncv1.UnimplementedSyncServer
	streams atomic.Int64
	msg     *syncv1.HubMessage
}

func (h *badHub) Connect(stream syncv1.Sync_ConnectServer) error {
	h.streams.Add(1)
	hello := &syncv1.HubMessage{Kind: &syncv1.HubMessage_HubHello{HubHello: &syncv1.HubHello{FleetId: synctest.FleetID, ClusterName: "east", Epoch: 1}}}
	if err := stream.Send(hello); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil { // the hello
		return err
	}
	if err := stream.Send(h.msg); err != nil {
		return err
	}
	// Wait for the client to give up on the stream.
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// TestMalformedHubMessageEndsStream checks that the client drops a stream
// carrying a message it cannot trust, applies nothing from it, and tries
// again.
func TestMalformedHubMessageEndsStream(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	for name, msg := range map[string]*syncv1.HubMessage{
		"not JSON": {Kind: &syncv1.HubMessage_Upsert{Upsert: &syncv1.WorkUpsert{Work: []byte("{")}}},
		"another cluster's Work": {Kind: &syncv1.HubMessage_Upsert{Upsert: &syncv1.WorkUpsert{
			Work: []byte(`{"metadata":{"name":"w","namespace":"flotilla-cluster-west"},"spec":{"manifests":[{}]}}`)}}},
		"empty": {},
	} {
		t.Run(name, func(t *testing.T) {
			hub := &badHub{msg: msg}
			srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(p.ServerTLS(t))))
			syncv1.RegisterSyncServer(srv, hub)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(lis)
			t.Cleanup(srv.Stop)

			agent := synctest.StartAgent(t, p, "east", lis.Addr().String(), nil)
			synctest.Eventually(t, 30*time.Second, "the client reconnecting after a bad message", func() (bool, string) {
				n := hub.streams.Load()
				return n >= 3, fmt.Sprintf("%d streams", n)
			})
			agent.Stop()
			if applies, deletes, snaps := agent.Applier.Counts(); applies+deletes+snaps != 0 {
				t.Errorf("the applier was called (%d applies, %d deletes, %d snapshots) for a bad message", applies, deletes, snaps)
			}
		})
	}
}

// TestApplyFailuresAreRetried makes the first applies fail and checks the
// client retries them on the same stream until they succeed.
func TestApplyFailuresAreRetried(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	for i := range 3 {
		hub.Works.Put("east", fmt.Sprintf("w-%d", i), 1)
	}
	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		c.Applier.(*synctest.Applier).FailApplies(4)
		c.MaxApplyBackoff = 50 * time.Millisecond
	})
	synctest.Eventually(t, 30*time.Second, "failed applies succeeding on retry", func() (bool, string) {
		d := synctest.Diff(hub.Works.Desired("east"), agent.Applier.HeldGenerations())
		return d == "", d
	})
	if n := agent.Client.State().Connects; n != 1 {
		t.Errorf("connected %d times; retrying an apply should not need a new stream", n)
	}
}
