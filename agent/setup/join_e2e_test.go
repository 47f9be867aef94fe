package setup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent/join"
	"github.com/flotilla-dev/flotilla/agent/join/jointest"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
)

// TestAgentJoinsAndRotatesKeepingTheStream runs the agent (setup.New)
// against an envtest member with nothing but a bootstrap Secret, and a
// test hub on loopback that issues 4-second certificates. The agent joins,
// opens its stream with the joined certificate, renews the certificate
// (the Secret changes) without closing that stream or opening another,
// and the next stream, after the hub ends the first, presents a renewed
// certificate.
func TestAgentJoinsAndRotatesKeepingTheStream(t *testing.T) {
	cfg, c, ns, hub := joinFixture(t, "agent-join-")
	ctx := context.Background()

	a, err := New(Options{
		Config: cfg, Namespace: ns, MetricsAddr: "0", ProbeAddr: "0",
		HeartbeatInterval: time.Second, ResourceInterval: time.Second,
		Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Credentials == nil {
		t.Fatal("the agent took its identity from files, not from its bootstrap Secret")
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the agent ended with %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop within 30s of its context ending")
		}
	})

	secretSerial := func() (string, error) {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.AgentCredentialsSecretName}, s); err != nil {
			return "", err
		}
		creds, err := join.ReadCredentials(s)
		if err != nil || creds.Cert == nil {
			return "", fmt.Errorf("no certificate in the credentials Secret (%v)", err)
		}
		return creds.Cert.SerialNumber.Text(16), nil
	}
	testutil.Eventually(t, "a stream opened with the joined certificate", 60*time.Second, func() error {
		if n := len(hub.Streams()); n != 1 {
			return fmt.Errorf("%d streams", n)
		}
		return nil
	})
	first := hub.Streams()[0]
	if first.Cluster != "east" {
		t.Fatalf("the stream is for cluster %q", first.Cluster)
	}
	testutil.Eventually(t, "the certificate renewed in the credentials Secret and in memory", 30*time.Second, func() error {
		s, err := secretSerial()
		if err != nil {
			return err
		}
		kp, _ := a.Credentials.Current()
		if s == first.Serial || kp.Cert.SerialNumber.Text(16) == first.Serial {
			return errors.New("still the joined certificate")
		}
		return nil
	}, testutil.Every(50*time.Millisecond))
	if first.Closed() || len(hub.Streams()) != 1 || a.Sync.State().Connects != 1 {
		t.Fatalf("the renewal touched the stream: first closed %v, %d streams, %d connects", first.Closed(), len(hub.Streams()), a.Sync.State().Connects)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.AgentBootstrapSecretName}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the bootstrap Secret after the join: %v, want NotFound", err)
	}

	hub.CloseStreams()
	testutil.Eventually(t, "a second stream after the hub ended the first", 30*time.Second, func() error {
		if n := len(hub.Streams()); n != 2 {
			return fmt.Errorf("%d streams", n)
		}
		return nil
	})
	if second := hub.Streams()[1]; second.Serial == first.Serial {
		t.Errorf("the new stream presented the joined certificate %s, not a renewed one", first.Serial)
	}
}

// TestNewWithoutIdentity: with neither Secret and no certificate files the
// agent refuses to start and says what it looked for.
func TestNewWithoutIdentity(t *testing.T) {
	cfg := startEnv(t)
	_, err := New(Options{
		Config: cfg, Namespace: "agent-noid-" + rand.String(5), HubAddress: "127.0.0.1:1",
		CertFile: "/nonexistent/tls.crt", KeyFile: "/nonexistent/tls.key", CAFile: "/nonexistent/ca.crt",
		MetricsAddr: "0", ProbeAddr: "0", Logger: testr.New(t),
	})
	if err == nil || !strings.Contains(err.Error(), "neither a credentials Secret nor a bootstrap Secret") || !strings.Contains(err.Error(), "--cert-file") {
		t.Fatalf("New: %v; want an error naming the Secrets and the files it looked for", err)
	}
}

// TestOnlyTheLeaderJoinsAndANewLeaderUsesTheNewestCertificate starts two
// leader-elected agents on one bootstrap Secret: only the leader registers
// (the hub sees one Register) and renews; when it stops, the other replica
// takes over with the newest certificate in the credentials Secret, not
// the one that was there when it started, and without registering again.
func TestOnlyTheLeaderJoinsAndANewLeaderUsesTheNewestCertificate(t *testing.T) {
	cfg, _, ns, hub := joinFixture(t, "agent-join-le-")
	ctx := context.Background()
	// A buffer, not testr: a manager that loses its lease on stop logs
	// after the test has ended.
	logs := &testutil.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs.String())
		}
	})
	start := func(instance string) (*Agent, func()) {
		a, err := New(Options{
			Config: cfg, Namespace: ns, LeaderElection: true, LeaderElectionID: "flotilla-agent.flotilla.dev", LeaderElectionNamespace: ns,
			MetricsAddr: "0", ProbeAddr: "0", Instance: instance,
			HeartbeatInterval: time.Second, ResourceInterval: time.Second,
			Logger: logs.Logger().WithValues("instance", instance),
		})
		if err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Start(mctx) }()
		stopped := false
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("agent %s ended with %v", instance, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("agent %s did not stop within 30s", instance)
			}
		}
		t.Cleanup(stop)
		return a, stop
	}
	first, stopFirst := start("agent-0")
	testutil.Eventually(t, "a stream from the first agent", 60*time.Second, func() error {
		if n := len(hub.Streams()); n != 1 {
			return fmt.Errorf("%d streams", n)
		}
		return nil
	})
	second, _ := start("agent-1")
	joined := hub.Streams()[0].Serial
	testutil.Eventually(t, "the leader renewing", 30*time.Second, func() error {
		kp, _ := first.Credentials.Current()
		if kp.Cert.SerialNumber.Text(16) == joined {
			return errors.New("not renewed yet")
		}
		return nil
	}, testutil.Every(50*time.Millisecond))
	if kp, _ := second.Credentials.Current(); kp != nil {
		t.Errorf("the standby holds certificate %s; only the leader loads one", kp.Cert.SerialNumber.Text(16))
	}
	stopFirst()
	testutil.Eventually(t, "a stream from the new leader", 60*time.Second, func() error {
		if n := len(hub.Streams()); n != 2 {
			return fmt.Errorf("%d streams", n)
		}
		return nil
	})
	if s := hub.Streams()[1].Serial; s == joined {
		t.Errorf("the new leader connected with the joined certificate %s, not the newest one", s)
	}
	if regs, _ := hub.Counts(); regs != 1 {
		t.Errorf("the hub saw %d Register calls; only the first leader registers", regs)
	}
}

// TestDeniedJoinStopsTheAgent: a join the hub denies ends the agent's
// manager with the hub's reason (the process exits non-zero), and the
// agent never opened a stream.
func TestDeniedJoinStopsTheAgent(t *testing.T) {
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := "agent-join-deny-" + rand.String(5)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	hub := jointest.Start(t, jointest.Options{Token: tok.String()})
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: flotillav1.AgentBootstrapSecretName},
		StringData: map[string]string{
			join.BootstrapKeyHubAddress: hub.Addr, join.BootstrapKeyToken: tok.String(),
			join.BootstrapKeyCAHash: hub.CAHash, join.BootstrapKeyClusterName: "east",
		},
	}); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.LogBuffer{}
	a, err := New(Options{Config: cfg, Namespace: ns, MetricsAddr: "0", ProbeAddr: "0", Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Start(mctx) }()
	testutil.Eventually(t, "the agent's certificate request on the hub", 60*time.Second, func() error {
		if n := len(hub.Requests()); n != 1 {
			return fmt.Errorf("%d requests", n)
		}
		return nil
	})
	hub.Deny(hub.Requests()[0], "east is not on the guest list")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not on the guest list") {
			t.Fatalf("the agent ended with %v; want the hub's denial", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent still runs 60s after its join was denied\n%s", logs.String())
	}
	if n := len(hub.Streams()); n != 0 {
		t.Errorf("the denied agent opened %d streams", n)
	}
}

// joinFixture starts an envtest member with a fresh namespace (named
// prefix + random) holding only a bootstrap Secret for cluster east, and a
// test hub on loopback that takes its token, approves at once and issues
// 4-second certificates.
func joinFixture(t *testing.T, prefix string) (*rest.Config, client.Client, string, *jointest.Hub) {
	t.Helper()
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := prefix + rand.String(5)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	hub := jointest.Start(t, jointest.Options{Token: tok.String(), AutoApprove: true, Lifetime: 4 * time.Second})
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: flotillav1.AgentBootstrapSecretName},
		StringData: map[string]string{
			join.BootstrapKeyHubAddress: hub.Addr, join.BootstrapKeyToken: tok.String(),
			join.BootstrapKeyCAHash: hub.CAHash, join.BootstrapKeyClusterName: "east",
		},
	}); err != nil {
		t.Fatal(err)
	}
	return cfg, c, ns, hub
}
