package sync_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// wait bounds every poll in these tests. It is generous because the
// machine may be busy; the polls return as soon as things converge.
const wait = 30 * time.Second

func converged(t *testing.T, hub *synctest.Hub, agent *synctest.Agent, cluster string) {
	t.Helper()
	synctest.Eventually(t, wait, "agent "+cluster+" holding exactly the hub's Works", func() (bool, string) {
		d := synctest.Diff(hub.Works.Desired(cluster), agent.Applier.HeldGenerations())
		return d == "", d
	})
}

// statusConverged waits for the status of every Work of cluster, except
// those named in skip, to reach the hub at the Work's generation.
func statusConverged(t *testing.T, hub *synctest.Hub, cluster string, skip ...string) {
	t.Helper()
	synctest.Eventually(t, wait, "status of every Work of "+cluster+" reaching the hub", func() (bool, string) {
		for name, gen := range hub.Works.Desired(cluster) {
			if slices.Contains(skip, name) {
				continue
			}
			st := hub.Sink.Status(cluster, name)
			if st == nil || st.ObservedGeneration != gen {
				return false, fmt.Sprintf("work %s: status %v, want observedGeneration %d", name, st, gen)
			}
		}
		return true, ""
	})
}

func counterValue(t *testing.T, hub *synctest.Hub, name, label, value string) float64 {
	t.Helper()
	families, err := hub.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || hasLabel(m, label, value) {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// TestSnapshotThenDeltas checks that a connecting agent gets only the
// Works that are new or changed to it, prunes (only) at SnapshotComplete, and then
// gets every change in order; and that status and heartbeats flow back.
func TestSnapshotThenDeltas(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	var kept *v1alpha1.Work
	for i := range 5 {
		w := hub.Works.Put("east", fmt.Sprintf("w-%d", i), 1)
		if i == 0 {
			kept = w
		}
	}

	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		c.HeartbeatInterval = 50 * time.Millisecond
		c.KubernetesVersion = "v1.37.2"
		// What an earlier run left: w-0 at the hub's generation (skipped
		// in the snapshot) and a Work the hub no longer has (deleted).
		c.Applier.(*synctest.Applier).Seed(kept)
		c.Applier.(*synctest.Applier).Seed(synctest.NewWork("east", "gone", 1))
	})

	converged(t, hub, agent, "east")
	synctest.Eventually(t, wait, "snapshot complete", func() (bool, string) {
		return agent.Client.State().SnapshotComplete, "not yet"
	})

	log := agent.Applier.Log()
	snap := slices.Index(log, "snapshot 5")
	if snap < 0 {
		t.Fatalf("no SnapshotComplete keeping 5 Works in %q", log)
	}
	wantSnapshot := []string{"apply w-1@1", "apply w-2@1", "apply w-3@1", "apply w-4@1"}
	// "gone" is not deleted on its own: the prune at SnapshotComplete
	// removes it, through the applier's deletion brake.
	if got := log[:snap]; !slices.Equal(got, wantSnapshot) {
		t.Errorf("snapshot calls = %q, want %q (w-0 is held already, gone is pruned)", got, wantSnapshot)
	}

	// Deltas, after the snapshot, in the order they were made.
	hub.Works.Put("east", "w-1", 2)
	hub.Works.Delete("east", "w-2")
	hub.Works.Put("east", "w-5", 1)
	hub.Works.Put("east", "w-3", 2)
	converged(t, hub, agent, "east")
	want := []string{"apply w-1@2", "delete w-2", "apply w-5@1", "apply w-3@2"}
	if got := agent.Applier.Log()[snap+1:]; !slices.Equal(got, want) {
		t.Errorf("deltas applied as %q, want %q", got, want)
	}

	// w-0 was never applied here, so the fake applier never reports on it
	// (the real one reports on what it holds, applied or not).
	statusConverged(t, hub, "east", "w-0")
	synctest.Eventually(t, wait, "heartbeats reaching the hub", func() (bool, string) {
		n := hub.Sink.Heartbeats("east")
		return n >= 2, fmt.Sprintf("%d heartbeats", n)
	})
	info, ok := hub.Sink.Connected("east")
	if !ok || info.Identity != "flotilla://cluster/east" || info.KubernetesVersion != "v1.37.2" || info.Instance != "east-0" {
		t.Errorf("agent info = %+v, %v", info, ok)
	}
	if n := counterValue(t, hub, "flotilla_sync_connected_agents", "", ""); n != 1 {
		t.Errorf("connected agents metric = %v, want 1", n)
	}
	if n := counterValue(t, hub, "flotilla_sync_messages_sent_total", "type", "upsert"); n != 7 {
		t.Errorf("upserts sent = %v, want 7 (4 in the snapshot, 3 after it)", n)
	}
}

// TestColdCacheSendsNoSnapshot checks that the hub waits for its Work
// source to sync before it tells an agent what to keep.
func TestColdCacheSendsNoSnapshot(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.SyncPollInterval = 5 * time.Millisecond })
	hub.Works.SetSynced(false)
	hub.Works.Put("east", "w-0", 1)

	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		c.Applier.(*synctest.Applier).Seed(synctest.NewWork("east", "old", 1))
	})
	// The source counts HasSynced calls, so the test knows the session
	// has looked several times without sleeping.
	before := hub.Works.SyncChecks()
	synctest.Eventually(t, wait, "the session polling the cold source", func() (bool, string) {
		n := hub.Works.SyncChecks() - before
		return n >= 5, fmt.Sprintf("%d polls", n)
	})
	if st, ok := hub.Server.Stats("east"); !ok || st.SnapshotSent {
		t.Fatalf("stats = %+v, %v; want a connected stream with no snapshot", st, ok)
	}
	if _, _, snaps := agent.Applier.Counts(); snaps != 0 {
		t.Fatalf("agent pruned %d times from a cold cache", snaps)
	}
	if _, ok := agent.Applier.HeldGenerations()["old"]; !ok {
		t.Fatal("agent lost a Work before the hub's cache synced")
	}

	hub.Works.SetSynced(true)
	converged(t, hub, agent, "east")
}

// TestReconnectAfterCut cuts the connection while changes stream and
// checks that, after the agent reconnects, it holds exactly what the hub
// wants, with no generation of any Work applied twice.
func TestReconnectAfterCut(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	for i := range 50 {
		hub.Works.Put("east", fmt.Sprintf("w-%02d", i), 1)
	}
	proxy := synctest.NewProxy(t, hub.Addr)
	agent := synctest.StartAgent(t, p, "east", proxy.Addr(), nil)
	converged(t, hub, agent, "east")

	// Change things, cutting the connection in the middle of the stream
	// of changes, and keep changing while the agent reconnects.
	for round := range 4 {
		for i := range 50 {
			name := fmt.Sprintf("w-%02d", i)
			switch {
			case i%10 == round:
				hub.Works.Delete("east", name)
			default:
				hub.Works.Put("east", name, round+2)
			}
			if i == 25 && round%2 == 0 {
				if n := proxy.Cut(); n == 0 {
					t.Log("no connection to cut (the agent was reconnecting)")
				}
			}
		}
		hub.Works.Put("east", fmt.Sprintf("new-%d", round), 1)
	}
	converged(t, hub, agent, "east")
	statusConverged(t, hub, "east")

	if n := agent.Client.State().Connects; n < 2 {
		t.Errorf("agent connected %d times; the cut should have forced a reconnect", n)
	}
	for key, n := range agent.Applier.Applies() {
		if n > 1 {
			t.Errorf("%s applied %d times", key, n)
		}
	}
}

// TestStalledAgentDoesNotDelayOthers stalls one agent's applier while
// both clusters' Works change many times, and checks that the healthy
// agent keeps up, that the stalled agent's queue stays within one entry
// per Work, and that it catches up once released.
func TestStalledAgentDoesNotDelayOthers(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"slow", "fast"}, nil)
	const works, rounds, pad = 20, 50, 4 << 10
	for _, c := range []string{"slow", "fast"} {
		for i := range works {
			hub.Works.PutPadded(c, fmt.Sprintf("w-%02d", i), 1, pad)
		}
	}
	// A fixed 64 KiB window makes the stall reach the hub quickly: the hub
	// cannot push more than that ahead of the stuck applier.
	small := func(c *client.Config) { c.InitialWindowSize = 64 << 10 }
	slow := synctest.StartAgent(t, p, "slow", hub.Addr, small)
	fast := synctest.StartAgent(t, p, "fast", hub.Addr, small)
	converged(t, hub, slow, "slow")
	converged(t, hub, fast, "fast")

	slow.Applier.Stall()
	for r := range rounds {
		for i := range works {
			for _, c := range []string{"slow", "fast"} {
				hub.Works.PutPadded(c, fmt.Sprintf("w-%02d", i), r+2, pad)
			}
		}
	}
	converged(t, hub, fast, "fast")
	if slow.Applier.Stalled() == 0 {
		t.Fatal("the slow agent's applier is not stalled; the test proves nothing")
	}
	synctest.Eventually(t, wait, "changes for the stalled agent waiting in its queue", func() (bool, string) {
		st, ok := hub.Server.Stats("slow")
		return ok && st.QueueDepth > 0, fmt.Sprintf("%+v, connected %v", st, ok)
	})
	st, _ := hub.Server.Stats("slow")
	if st.MaxQueueDepth > works {
		t.Errorf("stalled agent's queue reached %d entries; coalescing should keep it at most %d (one per Work)", st.MaxQueueDepth, works)
	}
	t.Logf("stalled agent: %d updates made, queue depth now %d, at most %d", works*rounds, st.QueueDepth, st.MaxQueueDepth)

	slow.Applier.Release()
	converged(t, hub, slow, "slow")
	if n := slow.Client.State().Connects; n != 1 {
		t.Errorf("slow agent connected %d times; coalescing should have kept its stream", n)
	}
}

// TestFullQueueEndsStream makes a stalled agent's queue overflow and
// checks that the hub ends that stream with RESOURCE_EXHAUSTED and the
// agent resyncs after its applier recovers.
func TestFullQueueEndsStream(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	const limit = 5
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.MaxQueueDepth = limit })
	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) { c.InitialWindowSize = 64 << 10 })
	hub.Works.Put("east", "first", 1)
	converged(t, hub, agent, "east")

	agent.Applier.Stall()
	// Far more distinct Works than the window and the queue can hold.
	for i := range 60 {
		hub.Works.PutPadded("east", fmt.Sprintf("w-%02d", i), 1, 8<<10)
	}
	synctest.Eventually(t, wait, "the hub ending the overflowing stream", func() (bool, string) {
		n := counterValue(t, hub, "flotilla_sync_streams_closed_total", "code", codes.ResourceExhausted.String())
		return n >= 1, fmt.Sprintf("%v streams closed with ResourceExhausted", n)
	})
	agent.Applier.Release()
	converged(t, hub, agent, "east")
	if n := agent.Client.State().Connects; n < 2 {
		t.Errorf("agent connected %d times, want a reconnect after the overflow", n)
	}
}

// TestNewerStreamReplacesOlder opens two streams for one cluster and
// checks that the older one ends with ABORTED and the hub sees one
// connection throughout.
func TestNewerStreamReplacesOlder(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	hub.Works.Put("east", "w-0", 1)
	tlsCfg := p.ClientTLS(t, "east")

	first := synctest.OpenStream(t, synctest.Dial(t, hub.Addr, tlsCfg))
	if err := first.Send(synctest.Hello()); err != nil {
		t.Fatal(err)
	}
	recvSnapshot(t, first)

	second := synctest.OpenStream(t, synctest.Dial(t, hub.Addr, tlsCfg))
	if err := second.Send(synctest.Hello()); err != nil {
		t.Fatal(err)
	}
	recvSnapshot(t, second)

	err := synctest.RecvUntilError(t, first, wait)
	if status.Code(err) != codes.Aborted || !strings.Contains(err.Error(), "replaced by a newer stream") {
		t.Errorf("older stream ended with %v, want Aborted: replaced by a newer stream", err)
	}
	// The newer stream still works.
	hub.Works.Put("east", "w-1", 1)
	m, err := second.Recv()
	if err != nil || m.GetUpsert() == nil {
		t.Fatalf("newer stream: %v, %v; want an upsert", m, err)
	}
	if err := second.CloseSend(); err != nil {
		t.Fatal(err)
	}
	synctest.RecvUntilError(t, second, wait)
	synctest.Eventually(t, wait, "the disconnect event", func() (bool, string) {
		ev := hub.Sink.Events()
		return slices.Equal(ev, []string{"connect east", "connect east", "disconnect east"}), fmt.Sprintf("%q", ev)
	})
}

func recvSnapshot(t *testing.T, stream syncv1.Sync_ConnectClient) {
	t.Helper()
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("waiting for the snapshot: %v", err)
		}
		if m.GetSnapshotComplete() != nil {
			return
		}
	}
}

// TestRefusals checks each way a peer is refused, and that the refusals
// say what to do.
func TestRefusals(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)

	t.Run("certificate from another CA", func(t *testing.T) {
		other := synctest.NewPKI(t)
		cfg := other.ClientTLS(t, "east")
		cfg.RootCAs = p.RootPool() // It trusts the real hub; the hub does not trust it.
		err := refusedWith(t, hub.Addr, cfg)
		wantCode(t, err, codes.Unauthenticated, "not trusted")
	})
	t.Run("no client certificate", func(t *testing.T) {
		cfg := p.ClientTLS(t, "east")
		cfg.Certificates, cfg.GetClientCertificate = nil, nil
		err := refusedWith(t, hub.Addr, cfg)
		wantCode(t, err, codes.Unauthenticated, "no client certificate")
	})
	t.Run("unknown cluster", func(t *testing.T) {
		err := refusedWith(t, hub.Addr, p.ClientTLS(t, "ghost"))
		wantCode(t, err, codes.PermissionDenied, `create MemberCluster "ghost"`)
	})
	t.Run("status for another cluster's Work", func(t *testing.T) {
		stream := synctest.OpenStream(t, synctest.Dial(t, hub.Addr, p.ClientTLS(t, "east")))
		if err := stream.Send(synctest.Hello()); err != nil {
			t.Fatal(err)
		}
		recvSnapshot(t, stream)
		data, _ := wire.EncodeWorkStatus(&v1alpha1.WorkStatus{ObservedGeneration: 1})
		err := stream.Send(&syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Status{Status: &syncv1.StatusReport{
			Namespace: v1alpha1.ClusterNamespace("west"), Name: "w-0", Status: data,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		err = synctest.RecvUntilError(t, stream, wait)
		wantCode(t, err, codes.PermissionDenied, "may report only on Works in namespace")
		if st := hub.Sink.Status("west", "w-0"); st != nil {
			t.Errorf("the hub recorded a status for west from east's certificate: %+v", st)
		}
	})
	t.Run("an agent receives only its own cluster's Works", func(t *testing.T) {
		agent := synctest.StartAgent(t, p, "east", hub.Addr, nil)
		converged(t, hub, agent, "east")
		if held := agent.Applier.HeldGenerations(); len(held) != 1 || held["e-0"] != 1 {
			t.Errorf("east holds %v, want only e-0", held)
		}
	})
	t.Run("health needs a client certificate", func(t *testing.T) {
		cfg := p.ClientTLS(t, "east")
		cfg.Certificates, cfg.GetClientCertificate = nil, nil
		conn := synctest.Dial(t, hub.Addr, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		hc := healthpb.NewHealthClient(conn)
		_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: syncv1.Sync_ServiceDesc.ServiceName})
		wantCode(t, err, codes.Unauthenticated, "no client certificate")
		watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = watch.Recv()
		}
		wantCode(t, err, codes.Unauthenticated, "no client certificate")
	})
	t.Run("health answers an agent", func(t *testing.T) {
		conn := synctest.Dial(t, hub.Addr, p.ClientTLS(t, "east"))
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: syncv1.Sync_ServiceDesc.ServiceName})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health = %v, %v; want SERVING", resp, err)
		}
	})
}

func refusedWith(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	stream := synctest.OpenStream(t, synctest.Dial(t, addr, cfg))
	_ = stream.Send(synctest.Hello())
	return synctest.RecvUntilError(t, stream, wait)
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
		t.Errorf("got %v; want %s containing %q", err, code, msg)
	}
}

// TestMalformedInputEndsOnlyThatStream sends broken messages on streams
// of another cluster and checks each ends with INVALID_ARGUMENT while a
// healthy agent's stream carries on.
func TestMalformedInputEndsOnlyThatStream(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "e-0", 1)
	healthy := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, healthy, "east")

	raw := func(b []byte) *wire.Raw { r := wire.Raw(b); return &r }
	badStatus := &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Status{Status: &syncv1.StatusReport{
		Namespace: v1alpha1.ClusterNamespace("west"), Name: "w-0", Status: []byte("{not json"),
	}}}
	tests := []struct {
		name  string
		hello bool // send a valid hello first
		msg   any
		want  string
	}{
		{name: "bytes that are not protobuf", msg: raw([]byte{0xff, 0xff, 0xff, 0xff}), want: "malformed agent message"},
		{name: "empty message", msg: &syncv1.AgentMessage{}, want: "empty agent message"},
		{name: "status before hello", msg: badStatus, want: "first message on a stream must be hello"},
		{name: "invalid held name", msg: &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: &syncv1.Hello{
			Held: []*syncv1.HeldWork{{Name: "Not_A_Name"}}}}}, want: "not valid"},
		{name: "status that is not JSON", hello: true, msg: badStatus, want: "decoding work status"},
		{name: "second hello", hello: true, msg: synctest.Hello(), want: "only once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := synctest.OpenStream(t, synctest.Dial(t, hub.Addr, p.ClientTLS(t, "west")))
			if tt.hello {
				if err := stream.Send(synctest.Hello()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.SendMsg(tt.msg); err != nil {
				t.Fatal(err)
			}
			wantCode(t, synctest.RecvUntilError(t, stream, wait), codes.InvalidArgument, tt.want)
		})
	}

	hub.Works.Put("east", "e-1", 1)
	converged(t, hub, healthy, "east")
	if n := healthy.Client.State().Connects; n != 1 {
		t.Errorf("the healthy agent connected %d times; its stream should never have been touched", n)
	}
}
