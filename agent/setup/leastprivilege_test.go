package setup

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
)

// TestAgentRunsWithShippedRBAC runs the agent in process as its service
// account with only the RBAC deploy/agent ships (read from the
// repository), against a real apiserver, and checks that it takes its
// leader Lease in flotilla-system (a Role, not a cluster-wide grant), that
// its /metrics answers 401 without a token, 403 to an unbound service
// account and 200 to one bound to flotilla-metrics-reader, and that its log
// (it loads its key to dial the hub) holds no key material and no refusal.
// No hub listens at the address it dials: this test is about the member
// side.
func TestAgentRunsWithShippedRBAC(t *testing.T) {
	ctx := context.Background()
	adminCfg := startEnv(t)
	admin, err := client.New(adminCfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ns = flotillav1.SystemNamespace
	agentCfg, err := deployrbac.ServiceAccountConfig(ctx, adminCfg, ns, "flotilla-agent")
	if err != nil {
		t.Fatal(err)
	}
	if err := deployrbac.Install(ctx, admin, deployrbac.Agent); err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(t.TempDir(), "certs")
	ca, err := pki.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureAgent(certDir, ca, "east"); err != nil {
		t.Fatal(err)
	}
	agentKey, err := os.ReadFile(filepath.Join(certDir, pki.AgentKeyFile("east")))
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()

	logs := &testutil.LogBuffer{}
	const leaseName = "flotilla-agent.flotilla.dev"
	a, err := New(Options{
		Config: agentCfg, HubAddress: "127.0.0.1:1",
		CertFile: filepath.Join(certDir, pki.AgentCertFile("east")), KeyFile: filepath.Join(certDir, pki.AgentKeyFile("east")),
		CAFile:         filepath.Join(certDir, pki.CACertFile),
		LeaderElection: true, LeaderElectionID: leaseName, LeaderElectionNamespace: ns,
		MetricsAddr: metricsAddr, ProbeAddr: "0", Instance: "agent-0",
		Logger: logs.Logger(),
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
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop within 30s of its context ending")
		}
	}
	t.Cleanup(stop)

	testutil.Eventually(t, "the agent, run with deploy/agent's RBAC, holding its leader Lease in "+ns, 30*time.Second, func() error {
		lease := &coordinationv1.Lease{}
		if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: leaseName}, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != a.LeaderIdentity {
			return fmt.Errorf("held by %v, not %s", lease.Spec.HolderIdentity, a.LeaderIdentity)
		}
		return nil
	})

	reader, err := deployrbac.ServiceAccountToken(ctx, adminCfg, "monitoring", "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := deployrbac.ServiceAccountToken(ctx, adminCfg, "monitoring", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	binding, err := deployrbac.BindMetricsReader(ctx, admin, "monitoring", "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), binding) })
	testutil.Eventually(t, "the agent's /metrics answering 200 to a token bound to flotilla-metrics-reader", 30*time.Second, func() error {
		code, body, err := deployrbac.GetMetrics(ctx, metricsAddr, reader)
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(body, "leader_election_master_status") {
			return fmt.Errorf("status %d: %.200s", code, body)
		}
		return nil
	})
	for _, tt := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the member apiserver never issued", "not-a-token", http.StatusUnauthorized},
		{"a service account not bound to flotilla-metrics-reader", nobody, http.StatusForbidden},
		{"the reader again, after the refusals", reader, http.StatusOK},
	} {
		code, body, err := deployrbac.GetMetrics(ctx, metricsAddr, tt.token)
		if err != nil {
			t.Fatalf("%s: %v", tt.who, err)
		}
		if code != tt.want {
			t.Errorf("the agent's /metrics with %s: status %d, want %d (%.200s)", tt.who, code, tt.want, body)
		}
	}

	// A scraper asking for gzip (Prometheus does) gets the agent's small
	// /metrics as it is: the agent keeps no gzip writer between scrapes.
	code, encoding, body, err := deployrbac.GetMetricsEncoded(ctx, metricsAddr, reader, "gzip")
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || encoding != "" || !strings.Contains(body, "leader_election_master_status") {
		t.Errorf("the agent's /metrics asked for gzip: status %d, Content-Encoding %q, body %.100q; want 200, none, the metrics as text", code, encoding, body)
	}
	// The agent's own registry: its Work queue under controller-runtime's
	// names, Go's and the process's collectors.
	for _, series := range []string{`workqueue_depth{controller="work",name="work",priority=""}`, `workqueue_adds_total{controller="work",name="work"}`, "go_goroutines ", "process_resident_memory_bytes ", "flotilla_agent_certificate_expiry_timestamp_seconds ", `flotilla_agent_certificate_renewals_total{result="issued"}`, "flotilla_lost_lease_restarts_total "} {
		if !strings.Contains(body, series) {
			t.Errorf("the agent's /metrics has no %s", series)
		}
	}

	stop()
	out := logs.String()
	if !strings.Contains(out, "member-gate") && !strings.Contains(out, "leader") {
		t.Fatalf("the captured log lacks the agent's own lines; was the logger wired?\n%.2000s", out)
	}
	for _, secret := range []string{"-----BEGIN", "PRIVATE KEY", string(bytes.TrimSpace(agentKey))[40:80]} {
		if strings.Contains(out, secret) {
			t.Errorf("the agent's log holds key material (%q)", secret)
		}
	}
	if strings.Contains(out, "forbidden") {
		t.Errorf("the agent, run with deploy/agent's RBAC, was refused something:\n%s", linesWith(out, "forbidden"))
	}
}

func linesWith(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
