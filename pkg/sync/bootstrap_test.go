package sync_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	gosync "sync"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// recordingBootstrap is a Bootstrap service that records what reached it
// and the identity the interceptors put in the context.
type recordingBootstrap struct {
	syncv1.UnimplementedBootstrapServer
	mu    gosync.Mutex
	calls []string
}

func (b *recordingBootstrap) record(ctx context.Context, method string) {
	id, ok := server.IdentityFromContext(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		method += ":" + id.Cluster
	}
	b.calls = append(b.calls, method)
}

func (b *recordingBootstrap) Calls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.calls...)
}

func (b *recordingBootstrap) Register(ctx context.Context, _ *syncv1.RegisterRequest) (*syncv1.RegisterResponse, error) {
	b.record(ctx, "Register")
	return &syncv1.RegisterResponse{Request: "r-1"}, nil
}

func (b *recordingBootstrap) Renew(ctx context.Context, _ *syncv1.RenewRequest) (*syncv1.RegisterResponse, error) {
	b.record(ctx, "Renew")
	return &syncv1.RegisterResponse{Request: "r-2", Accepted: true}, nil
}

func (b *recordingBootstrap) Certificate(ctx context.Context, _ *syncv1.CertificateRequest) (*syncv1.CertificateResponse, error) {
	b.record(ctx, "Certificate")
	return &syncv1.CertificateResponse{State: syncv1.CertificateResponse_PENDING}, nil
}

// anonymousTLS is a joining agent's TLS: it trusts the hub's CA and
// presents no certificate.
func anonymousTLS(p *synctest.PKI) *tls.Config {
	return &tls.Config{RootCAs: p.RootPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// TestBootstrapNeedsNoCertificateForJoinOnly checks the interceptors'
// split: a peer without a certificate reaches Register and Certificate
// and nothing else (Renew, Sync, health are refused before any handler
// runs), Renew with a certificate carries its identity, and a connected
// agent is untouched by all of it.
func TestBootstrapNeedsNoCertificateForJoinOnly(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	boot := &recordingBootstrap{}
	hub := synctest.StartHub(t, p, []string{"east", "west"}, func(c *server.Config) { c.Bootstrap = boot })
	hub.Works.Put("west", "w-0", 1)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	converged(t, hub, west, "west")

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	anon := synctest.Dial(t, hub.Addr, anonymousTLS(p))
	bc := syncv1.NewBootstrapClient(anon)
	if _, err := bc.Register(ctx, &syncv1.RegisterRequest{ClusterName: "new"}); err != nil {
		t.Fatalf("Register without a certificate: %v", err)
	}
	if _, err := bc.Certificate(ctx, &syncv1.CertificateRequest{Request: "r-1"}); err != nil {
		t.Fatalf("Certificate without a certificate: %v", err)
	}
	_, err := bc.Renew(ctx, &syncv1.RenewRequest{})
	wantCode(t, err, codes.Unauthenticated, "no client certificate")
	_, err = healthpb.NewHealthClient(anon).Check(ctx, &healthpb.HealthCheckRequest{})
	wantCode(t, err, codes.Unauthenticated, "no client certificate")
	wantCode(t, refusedWith(t, hub.Addr, anonymousTLS(p)), codes.Unauthenticated, "no client certificate")

	// With east's certificate, Renew reaches the service with east's
	// identity.
	if _, err := syncv1.NewBootstrapClient(synctest.Dial(t, hub.Addr, p.ClientTLS(t, "east"))).Renew(ctx, &syncv1.RenewRequest{}); err != nil {
		t.Fatalf("Renew with east's certificate: %v", err)
	}
	if got, want := strings.Join(boot.Calls(), " "), "Register Certificate Renew:east"; got != want {
		t.Errorf("the service saw %q, want %q", got, want)
	}
	untouched(t, hub, west, "west", "w-1")
}

// TestBootstrapWithoutService: a hub without a Bootstrap service (no CA
// key) serves no Register, and still lets nobody else in without a
// certificate.
func TestBootstrapWithoutService(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	anon := synctest.Dial(t, hub.Addr, anonymousTLS(p))
	_, err := syncv1.NewBootstrapClient(anon).Register(ctx, &syncv1.RegisterRequest{})
	wantCode(t, err, codes.Unimplemented, "unknown service flotilla.sync.v1.Bootstrap")
	_, err = healthpb.NewHealthClient(anon).Check(ctx, &healthpb.HealthCheckRequest{})
	wantCode(t, err, codes.Unauthenticated, "no client certificate")
}

// TestBootstrapIsRateLimitedAndBounded: a peer address over its join
// rate, and a join request over the size limit, are refused with
// RESOURCE_EXHAUSTED before the service sees them; an agent's stream
// goes on.
func TestBootstrapIsRateLimitedAndBounded(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	boot := &recordingBootstrap{}
	hub := synctest.StartHub(t, p, []string{"west"}, func(c *server.Config) {
		c.Bootstrap = boot
		c.BootstrapRate = 0.001 // no token comes back within the test
		c.BootstrapBurst = 3
	})
	hub.Works.Put("west", "w-0", 1)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	converged(t, hub, west, "west")

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	bc := syncv1.NewBootstrapClient(synctest.Dial(t, hub.Addr, anonymousTLS(p)))
	_, err := bc.Register(ctx, &syncv1.RegisterRequest{Csr: make([]byte, server.MaxBootstrapMessageBytes+1)})
	wantCode(t, err, codes.ResourceExhausted, "more than the")
	for i := 0; i < 2; i++ {
		if _, err := bc.Certificate(ctx, &syncv1.CertificateRequest{Request: fmt.Sprint(i)}); err != nil {
			t.Fatalf("call %d within the burst: %v", i+2, err)
		}
	}
	_, err = bc.Certificate(ctx, &syncv1.CertificateRequest{Request: "x"})
	wantCode(t, err, codes.ResourceExhausted, "too many join requests from 127.0.0.1")
	if got := len(boot.Calls()); got != 2 {
		t.Errorf("the service saw %d calls (%v), want the 2 within the limits", got, boot.Calls())
	}
	// Renew is an agent's RPC: the join rate does not apply to it.
	if _, err := syncv1.NewBootstrapClient(synctest.Dial(t, hub.Addr, p.ClientTLS(t, "west"))).Renew(ctx, &syncv1.RenewRequest{}); err != nil {
		t.Errorf("Renew with west's certificate past the join rate: %v", err)
	}
	untouched(t, hub, west, "west", "w-1")
}

// TestNotAdmittedClusterIsRefused: a cluster the registry stops admitting
// (its MemberCluster turned Pending or Denied) loses its stream at once
// and is refused, Renew included, with the registry's reason, until it is
// admitted again; another agent is untouched.
func TestNotAdmittedClusterIsRefused(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, func(c *server.Config) { c.Bootstrap = &recordingBootstrap{} })
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	east := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, west, "west")
	converged(t, hub, east, "east")

	hub.Clusters.Refuse("east", "MemberCluster east is Pending: kubectl flotilla accept east")
	disconnectedWith(t, hub, "east", codes.PermissionDenied, "kubectl flotilla accept east")
	wantCode(t, refusedWith(t, hub.Addr, p.ClientTLS(t, "east")), codes.PermissionDenied, "kubectl flotilla accept east")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := syncv1.NewBootstrapClient(synctest.Dial(t, hub.Addr, p.ClientTLS(t, "east"))).Renew(ctx, &syncv1.RenewRequest{})
	wantCode(t, err, codes.PermissionDenied, "kubectl flotilla accept east")

	hub.Clusters.Refuse("east", "")
	hub.Works.Put("east", "e-1", 1)
	converged(t, hub, east, "east")
	untouched(t, hub, west, "west", "w-1")
}
