package synctest

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// FleetID is the fleet id StartHub gives its server unless configure
// changes it.
const FleetID = "fleet-test"

// Hub is a sync server on loopback with in-memory fakes behind it.
type Hub struct {
	Server   *server.Server
	Works    *Works
	Clusters *Clusters
	Sink     *Sink
	Registry *prometheus.Registry
	Addr     string
}

// StartHub starts a server on 127.0.0.1:0 that knows clusters, stopped in
// t.Cleanup. configure, if not nil, may change the configuration first.
func StartHub(t testing.TB, p *PKI, clusters []string, configure func(*server.Config)) *Hub {
	t.Helper()
	h := &Hub{
		Works:    NewWorks(),
		Clusters: NewClusters(clusters...),
		Sink:     NewSink(),
		Registry: prometheus.NewRegistry(),
	}
	cfg := server.Config{
		FleetID:    FleetID,
		Works:      h.Works,
		Clusters:   h.Clusters,
		Status:     h.Sink,
		Agents:     h.Sink,
		TLS:        p.ServerTLS(t),
		Registerer: h.Registry,
	}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.Server = srv
	h.Works.Notify(srv.WorkChanged)
	h.Clusters.Notify(srv.ClusterChanged)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Addr = lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// Agent is a sync client running against a hub.
type Agent struct {
	Client   *client.Client
	Applier  *Applier
	Identity *Identity
	cancel   context.CancelFunc
	done     chan error
}

// StartAgent runs cluster's agent against addr until Stop or the end of
// the test. Backoff is short so reconnects are quick. configure, if not
// nil, may change the configuration first; when it sets no TLS, the agent
// presents cluster's certificate from p (issued if needed).
func StartAgent(t testing.TB, p *PKI, cluster, addr string, configure func(*client.Config)) *Agent {
	t.Helper()
	a := &Agent{Applier: NewApplier(), Identity: &Identity{}, done: make(chan error, 1)}
	cfg := client.Config{
		Address:           addr,
		Applier:           a.Applier,
		Identity:          a.Identity,
		AgentVersion:      "test",
		Instance:          cluster + "-0",
		InitialBackoff:    10 * time.Millisecond,
		MaxBackoff:        200 * time.Millisecond,
		HeartbeatInterval: time.Second,
	}
	if configure != nil {
		configure(&cfg)
	}
	if cfg.TLS == nil {
		// Only now: ClientTLS issues a certificate into the files a
		// TLS configuration given by configure may read.
		cfg.TLS = p.ClientTLS(t, cluster)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Client = c
	a.Applier.ReportTo(c.ReportStatus)
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- c.Run(ctx) }()
	t.Cleanup(a.Stop)
	return a
}

// Stop ends the agent's Run and waits for it; it may be called twice.
func (a *Agent) Stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	a.cancel = nil
	<-a.done
}

// Dial opens a gRPC connection to addr with tlsCfg, closed in t.Cleanup.
// It uses the sync codec, so streams can send and receive wire.Raw.
func Dial(t testing.TB, addr string, tlsCfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(wire.Codec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// OpenStream opens a Sync.Connect stream on conn, cancelled in t.Cleanup.
func OpenStream(t testing.TB, conn *grpc.ClientConn) syncv1.Sync_ConnectClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := syncv1.NewSyncClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// RecvUntilError reads from stream until it fails, within timeout, and
// returns the error.
func RecvUntilError(t testing.TB, stream syncv1.Sync_ConnectClient, timeout time.Duration) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(timeout):
		t.Fatalf("stream did not end within %s", timeout)
		return nil
	}
}

// Hello is a hello message holding nothing.
func Hello() *syncv1.AgentMessage {
	return &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: &syncv1.Hello{AgentVersion: "raw-test"}}}
}
