package sync_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// issueAgent issues cluster's agent certificate from p's CA, valid for
// validity from now.
func issueAgent(t *testing.T, p *synctest.PKI, cluster string, validity time.Duration) *pki.KeyPair {
	t.Helper()
	kp, err := p.CA.IssueAgent(cluster, validity)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// withTLS makes an agent present tlsCfg.
func withTLS(tlsCfg *tls.Config) func(*client.Config) {
	return func(c *client.Config) { c.TLS = tlsCfg }
}

// disconnectedWith waits for the hub to hear that cluster's stream ended
// with code and a reason containing msg.
func disconnectedWith(t *testing.T, hub *synctest.Hub, cluster string, code codes.Code, msg string) {
	t.Helper()
	synctest.Eventually(t, wait, "the hub ending "+cluster+"'s stream with "+code.String(), func() (bool, string) {
		reason, ok := hub.Sink.DisconnectReason(cluster)
		if !ok {
			return false, "no disconnect yet"
		}
		return status.Code(reason) == code && strings.Contains(reason.Error(), msg), fmt.Sprintf("reason %v", reason)
	})
}

// untouched checks that the agent of cluster still gets changes on the
// stream it opened first.
func untouched(t *testing.T, hub *synctest.Hub, agent *synctest.Agent, cluster, work string) {
	t.Helper()
	hub.Works.Put(cluster, work, 1)
	converged(t, hub, agent, cluster)
	if n := agent.Client.State().Connects; n != 1 {
		t.Errorf("%s's agent connected %d times; its stream should never have been touched", cluster, n)
	}
}

// TestExpiredCertificateEndsStream gives an agent a certificate that
// expires seconds after issue: the hub ends its stream at expiry with
// UNAUTHENTICATED, refuses it while it presents the expired certificate,
// and takes it back once a new certificate is written over the old one
// (the agent reads its files at every connection). Another agent is
// untouched throughout.
func TestExpiredCertificateEndsStream(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	converged(t, hub, west, "west")

	short := issueAgent(t, p, "east", 4*time.Second)
	var agentLog testutil.LogBuffer
	east := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		c.TLS = p.ClientTLSWith(t, short)
		c.Logger = agentLog.Logger()
	})
	converged(t, hub, east, "east")
	disconnectedWith(t, hub, "east", codes.Unauthenticated, "expired at "+short.Cert.NotAfter.UTC().Format(time.RFC3339))
	if time.Now().Before(short.Cert.NotAfter) {
		t.Errorf("the stream ended before the certificate expired (%s)", short.Cert.NotAfter)
	}
	// With the expired certificate it stays out.
	synctest.Eventually(t, wait, "the agent retrying with its expired certificate", func() (bool, string) {
		st := east.Client.State()
		return st.Connects >= 3 && !st.Connected, fmt.Sprintf("%+v", st)
	})
	// The agent tells the end of a working stream at expiry (routine after
	// a renewal) from the refusals of the reconnects that follow.
	logged := agentLog.String()
	if n := strings.Count(logged, "ended the stream at its certificate's expiry"); n != 1 {
		t.Errorf("the agent logged the end at expiry %d times, want once:\n%s", n, logged)
	}
	if !strings.Contains(logged, "the hub refused this agent") {
		t.Errorf("the agent did not log the refusals of its expired certificate:\n%s", logged)
	}
	if _, ok := hub.Sink.Connected("east"); ok {
		t.Error("the hub counts an agent with an expired certificate as connected")
	}

	// A renewed certificate in the same files brings it back.
	p.ClientTLSWith(t, issueAgent(t, p, "east", time.Hour))
	synctest.Eventually(t, wait, "east reconnecting with its renewed certificate", func() (bool, string) {
		_, ok := hub.Sink.Connected("east")
		return ok, fmt.Sprintf("events %q", hub.Sink.Events())
	})
	hub.Works.Put("east", "e-1", 1)
	converged(t, hub, east, "east")

	untouched(t, hub, west, "west", "w-1")
}

// TestRevokedCertificate revokes a live agent's certificate: its stream
// ends with PERMISSION_DENIED at once, every reconnect with it is
// refused (the Sync stream and the health service alike), and a new
// certificate is accepted. Another agent is untouched.
func TestRevokedCertificate(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	converged(t, hub, west, "west")

	stolen := issueAgent(t, p, "east", time.Hour)
	stolenTLS := p.ClientTLSWith(t, stolen)
	east := synctest.StartAgent(t, p, "east", hub.Addr, withTLS(stolenTLS))
	converged(t, hub, east, "east")

	fp := server.Fingerprint(stolen.Cert)
	hub.Clusters.Revoke("east", fp)
	disconnectedWith(t, hub, "east", codes.PermissionDenied, "revoked")

	// At connect: a stream and a health check with the revoked
	// certificate are refused.
	err := refusedWith(t, hub.Addr, stolenTLS)
	wantCode(t, err, codes.PermissionDenied, fp)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err = healthpb.NewHealthClient(synctest.Dial(t, hub.Addr, stolenTLS)).Check(ctx, &healthpb.HealthCheckRequest{})
	wantCode(t, err, codes.PermissionDenied, "spec.revokedCertificates")
	synctest.Eventually(t, wait, "the agent retrying with its revoked certificate", func() (bool, string) {
		st := east.Client.State()
		return st.Connects >= 3 && !st.Connected, fmt.Sprintf("%+v", st)
	})

	// A new certificate for the same cluster is not revoked.
	p.ClientTLSWith(t, issueAgent(t, p, "east", time.Hour))
	hub.Works.Put("east", "e-1", 1)
	converged(t, hub, east, "east")

	untouched(t, hub, west, "west", "w-1")
}

// TestDeletedClusterEndsStream removes a connected agent's cluster from
// the registry, as deleting its MemberCluster does: the stream ends with
// PERMISSION_DENIED within 2 seconds and reconnects are refused, while
// another agent is untouched.
func TestDeletedClusterEndsStream(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	east := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, west, "west")
	converged(t, hub, east, "east")

	hub.Clusters.Remove("east")
	synctest.Eventually(t, 2*time.Second, "east's stream ending after its cluster was deleted", func() (bool, string) {
		reason, ok := hub.Sink.DisconnectReason("east")
		return ok && status.Code(reason) == codes.PermissionDenied && strings.Contains(reason.Error(), "was deleted"), fmt.Sprintf("%v, %v", reason, ok)
	})
	err := refusedWith(t, hub.Addr, p.ClientTLS(t, "east"))
	wantCode(t, err, codes.PermissionDenied, `create MemberCluster "east"`)

	untouched(t, hub, west, "west", "w-1")
}

// TestAgentCABundle verifies agents against a CA bundle of their own (the
// hub's --agent-ca-file), apart from the CA of the serving certificate: a
// certificate from the serving CA is refused, one from the agent CA is
// served.
func TestAgentCABundle(t *testing.T) {
	synctest.CheckGoroutines(t)
	serving := synctest.NewPKI(t)
	agents := synctest.NewPKI(t)
	hub := synctest.StartHub(t, serving, []string{"east", "west"}, func(c *server.Config) {
		c.TLS.ClientCAs = agents.RootPool()
	})
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)

	// The agent CA's certificate, trusting the serving CA for the hub.
	eastTLS := agents.ClientTLS(t, "east")
	eastTLS.RootCAs = serving.RootPool()
	east := synctest.StartAgent(t, serving, "east", hub.Addr, withTLS(eastTLS))
	converged(t, hub, east, "east")

	// The serving CA's certificate for west is a stranger's now.
	err := refusedWith(t, hub.Addr, serving.ClientTLS(t, "west"))
	wantCode(t, err, codes.Unauthenticated, "not trusted")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err = healthpb.NewHealthClient(synctest.Dial(t, hub.Addr, serving.ClientTLS(t, "west"))).Check(ctx, &healthpb.HealthCheckRequest{})
	wantCode(t, err, codes.Unauthenticated, "not trusted")

	untouched(t, hub, east, "east", "e-1")
}

// TestConnectionFlood opens 500 connections without an agent certificate
// (half raw TCP that never speaks, half finished TLS handshakes without
// a client certificate) and holds them, while a connected agent keeps
// receiving Work changes and sending heartbeats, and a second agent
// connects in the middle of it. The hub never holds more pending
// connections than its cap.
func TestConnectionFlood(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	const maxPending = 64
	hub := synctest.StartHub(t, p, []string{"east", "west"}, func(c *server.Config) {
		c.MaxPendingConnections = maxPending
	})
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)
	east := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, east, "east")

	// h2 as ALPN, as gRPC clients offer, so the hub finishes the
	// handshake rather than refusing the protocol at once.
	strangerTLS := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: p.RootPool(), ServerName: "localhost", NextProtos: []string{"h2"}}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	tlsDone, tlsFailed := 0, 0
	for i := range 500 {
		c, err := net.DialTimeout("tcp", hub.Addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		if i%2 == 1 {
			tc := tls.Client(c, strangerTLS)
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			// The hub may already have closed this one to make room:
			// that is the cap at work, not a failure.
			if err := tc.Handshake(); err != nil {
				tlsFailed++
			} else {
				tlsDone++
			}
			_ = tc.SetDeadline(time.Time{})
		}
		if st := hub.Server.ConnStats(); st.Pending > maxPending {
			t.Fatalf("after %d connections the hub holds %d pending; the cap is %d", i+1, st.Pending, maxPending)
		}
	}
	st := hub.Server.ConnStats()
	t.Logf("TLS handshakes without a certificate: %d done, %d cut; hub: %+v", tlsDone, tlsFailed, st)
	if st.Evicted == 0 {
		t.Errorf("500 connections against a cap of %d evicted none: %+v", maxPending, st)
	}

	// While the strangers are held: east gets a change and heartbeats.
	beats := hub.Sink.Heartbeats("east")
	hub.Works.Put("east", "e-1", 1)
	converged(t, hub, east, "east")
	synctest.Eventually(t, wait, "east's heartbeats during the flood", func() (bool, string) {
		n := hub.Sink.Heartbeats("east")
		return n >= beats+2, fmt.Sprintf("%d heartbeats, %d before", n, beats)
	})
	// A new agent gets in while the pending table is full.
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	converged(t, hub, west, "west")
	if st := hub.Server.ConnStats(); st.Pending > maxPending {
		t.Errorf("the hub holds %d pending connections; the cap is %d", st.Pending, maxPending)
	}
	if n := east.Client.State().Connects; n != 1 {
		t.Errorf("east connected %d times; the flood must not touch its stream", n)
	}
	if ev := hub.Sink.Events(); slices.Contains(ev, "disconnect east") {
		t.Errorf("events %q: east was disconnected", ev)
	}

	for _, c := range held {
		c.Close()
	}
	held = nil
	synctest.Eventually(t, wait, "the hub letting go of the strangers' connections", func() (bool, string) {
		st := hub.Server.ConnStats()
		return st.Pending == 0, fmt.Sprintf("%+v", st)
	})
}

// TestStreamsPerConnectionAreCapped opens more Sync streams on one
// connection than the hub allows: the extra ones wait (HTTP/2 flow
// control on streams) rather than run, so one handshake cannot multiply
// handlers.
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) {
		c.MaxStreamsPerConnection = 2
	})
	conn := synctest.Dial(t, hub.Addr, p.ClientTLS(t, "east"))
	// Two streams are open, each waiting in the handler (no hello yet).
	for range 2 {
		s := synctest.OpenStream(t, conn)
		if _, err := s.Recv(); err != nil {
			t.Fatalf("the first streams should get the hub's hello: %v", err)
		}
	}
	// The third cannot start until one of them ends.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	third, err := syncv1.NewSyncClient(conn).Connect(ctx)
	if err == nil {
		_, err = third.Recv()
	}
	if status.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a third stream on the connection got %v; want it held back until its deadline", err)
	}
}

// TestConnectionAgeMovesAgent ages an agent's connection quickly: the
// hub's GOAWAY leaves the stream running through the grace period, then
// the agent reconnects on a new connection and is up to date again.
func TestConnectionAgeMovesAgent(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	const age, grace = time.Second, 2 * time.Second
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) {
		c.MaxConnectionAge, c.MaxConnectionAgeGrace = age, grace
	})
	hub.Works.Put("east", "e-0", 1)
	start := time.Now()
	east := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, east, "east")
	synctest.Eventually(t, wait, "east moving to a new connection", func() (bool, string) {
		st := east.Client.State()
		return st.Connects >= 2 && st.Connected, fmt.Sprintf("%+v", st)
	})
	// gRPC jitters the age by up to 10%; the stream must have outlived
	// the age and most of the grace, since GOAWAY alone does not end it.
	if lived := time.Since(start); lived < age*9/10+grace {
		t.Errorf("the first stream ended after %s; GOAWAY should leave it the grace period (%s after %s)", lived, grace, age)
	}
	hub.Works.Put("east", "e-1", 1)
	converged(t, hub, east, "east")
}
