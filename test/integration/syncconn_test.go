package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// nopApplier holds nothing and applies nothing: these tests are about
// who may hold a stream, not what it carries.
type nopApplier struct{}

func (nopApplier) Held(context.Context) ([]syncclient.HeldWork, error)    { return nil, nil }
func (nopApplier) Apply(context.Context, *flotillav1.Work) error          { return nil }
func (nopApplier) Delete(context.Context, string) error                   { return nil }
func (nopApplier) Orphan(context.Context, string) error                   { return nil }
func (nopApplier) SnapshotComplete(context.Context, []string, bool) error { return nil }

// startSyncClient runs a sync client for cluster with its certificate in
// certDir against addr until the test ends.
func startSyncClient(t *testing.T, certDir, cluster, addr string) *syncclient.Client {
	t.Helper()
	tlsCfg, err := pki.ClientTLSConfig(filepath.Join(certDir, pki.AgentCertFile(cluster)), filepath.Join(certDir, pki.AgentKeyFile(cluster)), filepath.Join(certDir, pki.CACertFile), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	c, err := syncclient.New(syncclient.Config{
		Address: addr, TLS: tlsCfg, Applier: nopApplier{},
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		HeartbeatInterval: 500 * time.Millisecond,
		Logger:            testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runUntilStopped(t, "sync client "+cluster, cancel, func() error { return c.Run(ctx) })
	return c
}

// syncHeld reports whether cluster's agent holds a stream on hub's sync
// server.
func syncHeld(hub *setup.Hub, cluster string) error {
	if _, ok := hub.Sync.Stats(cluster); !ok {
		return fmt.Errorf("%s holds no stream", cluster)
	}
	return nil
}

// TestMemberClusterDeletionAndRevocationEndStreams runs the hub with its
// sync server against a real hub apiserver and real gRPC on loopback:
// deleting a MemberCluster ends its agent's stream within 2 seconds of
// the MemberCluster being gone, and listing a connected agent's
// certificate in spec.revokedCertificates ends its stream within 2
// seconds; the third agent is untouched throughout.
func TestMemberClusterDeletionAndRevocationEndStreams(t *testing.T) {
	certDir := hubCerts(t)
	ca, err := pki.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	members := []string{"member-1", "member-2", "member-3"}
	for _, m := range members {
		if _, err := pki.EnsureAgent(certDir, ca, m); err != nil {
			t.Fatal(err)
		}
	}
	listening := make(chan string, 1)
	env := newHubEnv(t, func(o *setup.Options) {
		o.SyncAddr = "127.0.0.1:0"
		o.CertDir = certDir
		o.OnSyncListening = func(a string) { listening <- a }
	})
	createMembers(t, env.c, members...)
	var addr string
	select {
	case addr = <-listening:
	case <-time.After(time.Minute):
		t.Fatal("the hub's sync server did not listen within a minute")
	}
	clients := map[string]*syncclient.Client{}
	for _, m := range members {
		clients[m] = startSyncClient(t, certDir, m, addr)
	}
	for _, m := range members {
		eventually(t, m+"'s agent holding a stream", time.Minute, func() error { return syncHeld(env.hub, m) })
	}
	ctx := context.Background()

	// Deletion: the drain finalizer goes at once (member-1 has no
	// Works), and then the stream must go within 2 seconds.
	if err := env.c.Delete(ctx, &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-1"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "MemberCluster member-1 gone", time.Minute, func() error {
		err := env.c.Get(ctx, client.ObjectKey{Name: "member-1"}, &flotillav1.MemberCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
	eventually(t, "member-1's stream ending after its MemberCluster was deleted", 2*time.Second, func() error {
		if syncHeld(env.hub, "member-1") == nil {
			return errors.New("member-1 still holds a stream")
		}
		return nil
	})

	// Revocation of a live stream's certificate.
	kp, err := pki.LoadKeyPair(filepath.Join(certDir, pki.AgentCertFile("member-2")), filepath.Join(certDir, pki.AgentKeyFile("member-2")))
	if err != nil {
		t.Fatal(err)
	}
	mc := &flotillav1.MemberCluster{}
	if err := env.c.Get(ctx, client.ObjectKey{Name: "member-2"}, mc); err != nil {
		t.Fatal(err)
	}
	before := mc.DeepCopy()
	mc.Spec.RevokedCertificates = []string{syncserver.Fingerprint(kp.Cert)}
	if err := env.c.Patch(ctx, mc, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "member-2's stream ending after its certificate was revoked", 2*time.Second, func() error {
		if syncHeld(env.hub, "member-2") == nil {
			return errors.New("member-2 still holds a stream")
		}
		return nil
	})
	// It stays out: its reconnects are refused.
	consistently(t, "member-2 staying out with its revoked certificate", 2*time.Second, func() error {
		if syncHeld(env.hub, "member-2") == nil {
			return errors.New("member-2 holds a stream again")
		}
		return nil
	})

	// member-3 never noticed.
	if err := syncHeld(env.hub, "member-3"); err != nil {
		t.Error(err)
	}
	if n := clients["member-3"].State().Connects; n != 1 {
		t.Errorf("member-3's agent connected %d times; its stream should never have been touched", n)
	}
}

// TestAgentCAFile runs the hub with --agent-ca-file pointing at a CA of
// the agents' own: an agent certificate from it is served, while one
// from the CA that issued the hub's serving certificate is refused with
// UNAUTHENTICATED, on the health service as on the Sync stream.
func TestAgentCAFile(t *testing.T) {
	certDir := hubCerts(t)
	servingCA, err := pki.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	agentDir := t.TempDir()
	agentCA, err := pki.EnsureCA(agentDir)
	if err != nil {
		t.Fatal(err)
	}
	// member-1's certificate from the agent CA; member-2's from the
	// serving CA, which no longer vouches for agents.
	if _, err := pki.EnsureAgent(agentDir, agentCA, "member-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureAgent(certDir, servingCA, "member-2"); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	env := newHubEnv(t, func(o *setup.Options) {
		o.SyncAddr = "127.0.0.1:0"
		o.CertDir = certDir
		o.AgentCAFile = filepath.Join(agentDir, pki.CACertFile)
		o.OnSyncListening = func(a string) { listening <- a }
	})
	createMembers(t, env.c, "member-1", "member-2")
	var addr string
	select {
	case addr = <-listening:
	case <-time.After(time.Minute):
		t.Fatal("the hub's sync server did not listen within a minute")
	}

	// The agent trusts the serving CA for the hub, and presents the
	// agent CA's certificate.
	good, err := pki.ClientTLSConfig(filepath.Join(agentDir, pki.AgentCertFile("member-1")), filepath.Join(agentDir, pki.AgentKeyFile("member-1")), filepath.Join(certDir, pki.CACertFile), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	c, err := syncclient.New(syncclient.Config{
		Address: addr, TLS: good, Applier: nopApplier{},
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		Logger: testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runUntilStopped(t, "sync client member-1", cancel, func() error { return c.Run(ctx) })
	eventually(t, "member-1's agent (agent CA) holding a stream", time.Minute, func() error { return syncHeld(env.hub, "member-1") })

	bad, err := pki.ClientTLSConfig(filepath.Join(certDir, pki.AgentCertFile("member-2")), filepath.Join(certDir, pki.AgentKeyFile("member-2")), filepath.Join(certDir, pki.CACertFile), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(bad)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	checkCtx, checkCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer checkCancel()
	_, err = healthpb.NewHealthClient(conn).Check(checkCtx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("health check with the serving CA's agent certificate: %v; want UNAUTHENTICATED, not trusted", err)
	}
	if err := syncHeld(env.hub, "member-2"); err == nil {
		t.Error("member-2 holds a stream with a certificate from the serving CA")
	}
	if n := c.State().Connects; n != 1 {
		t.Errorf("member-1 connected %d times; its stream should never have been touched", n)
	}
}
