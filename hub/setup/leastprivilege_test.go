package setup

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// TestHubRunsWithShippedRBAC runs the hub in process as its service
// account, with only the RBAC deploy/hub ships (read from the repository)
// and deploy/hub/webhook.yaml applied, against a real apiserver, and
// checks what least privilege must not break and what it must refuse:
//   - the leader elects itself (Lease in flotilla-system, by the Role),
//     creates its fleet identity there and serves agents;
//   - it writes its CA into the shipped webhook configurations' caBundle,
//     and restores it when re-applying the manifests resets it, although
//     it may not create webhook configurations;
//   - the webhook server refuses TLS 1.2 and never negotiates HTTP/2;
//   - /metrics answers 401 without a token, 403 to a service account not
//     bound to flotilla-metrics-reader, and 200 to one that is (the hub's
//     TokenReviews and SubjectAccessReviews run under its own RBAC);
//   - nothing it logs while loading and serving its keys holds key
//     material, and nothing it logs says forbidden.
func TestHubRunsWithShippedRBAC(t *testing.T) {
	ctx := context.Background()
	admin, hubCfg, webhooks := shippedHub(t)
	const ns = flotillav1.SystemNamespace
	// The shipped webhooks call a Service envtest cannot reach; leave no
	// failing webhook behind for the package's other tests.
	t.Cleanup(func() {
		for _, o := range webhooks {
			_ = admin.Delete(context.Background(), o)
		}
	})

	certDir := filepath.Join(t.TempDir(), "certs")
	ca, err := pki.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(certDir, ca, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(certDir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	hubKey, err := os.ReadFile(filepath.Join(certDir, pki.HubKeyFile))
	if err != nil {
		t.Fatal(err)
	}

	logs := &testutil.LogBuffer{}
	metricsAddr, webhookAddr := freeLocalAddr(t), freeLocalAddr(t)
	listening := make(chan string, 1)
	hub, err := New(ctx, Options{
		Config:                  hubCfg,
		LeaderElection:          true,
		LeaderElectionID:        "flotilla-hub.flotilla.dev",
		LeaderElectionNamespace: ns,
		MetricsAddr:             metricsAddr,
		ProbeAddr:               "0",
		SyncAddr:                "127.0.0.1:0",
		CertDir:                 certDir,
		WebhookAddr:             webhookAddr,
		KeepWebhookCABundle:     true,
		WebhookCABundleInterval: 300 * time.Millisecond,
		Logger:                  logs.Logger(),
		Registerer:              prometheus.NewRegistry(),
		SkipNameValidation:      true,
		OnSyncListening:         func(a string) { listening <- a },
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- hub.Manager.Start(runCtx) }()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("the hub stopped with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("the hub did not stop within 30s of its context ending")
			}
		})
	}
	t.Cleanup(stop)

	var syncAddr string
	select {
	case syncAddr = <-listening:
	case <-time.After(60 * time.Second):
		t.Fatalf("the hub, run with deploy/hub's RBAC, did not become leader and serve agents within 60s; its log:\n%s", logs)
	}

	caBundleCurrent := func() error {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := admin.Get(ctx, client.ObjectKey{Name: "flotilla-hub"}, m); err != nil {
			return err
		}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := admin.Get(ctx, client.ObjectKey{Name: "flotilla-hub"}, v); err != nil {
			return err
		}
		if len(m.Webhooks) != 1 || len(v.Webhooks) != 1 {
			return fmt.Errorf("want one webhook in each configuration, got %d and %d", len(m.Webhooks), len(v.Webhooks))
		}
		if !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, caPEM) || !bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, caPEM) {
			return fmt.Errorf("caBundle is not the hub's ca.crt yet")
		}
		return nil
	}
	testutil.Eventually(t, "the hub writing its ca.crt into both shipped webhook configurations' caBundle", 30*time.Second, caBundleCurrent)

	// Re-applying deploy/hub puts the placeholder back; the hub repairs it.
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := admin.Get(ctx, client.ObjectKey{Name: "flotilla-hub"}, v); err != nil {
		t.Fatal(err)
	}
	v.Webhooks[0].ClientConfig.CABundle = []byte("PLACEHOLDER-fill-from-ca.crt")
	if err := admin.Update(ctx, v); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the hub restoring the caBundle a re-apply reset", 30*time.Second, caBundleCurrent)

	checkWebhookTLS(t, webhookAddr, caPEM)
	checkSecureMetrics(t, ctx, admin, metricsAddr)
	checkJoin(t, ctx, admin, syncAddr, ca)

	stop()
	out := logs.String()
	if !strings.Contains(out, "serving agents as fleet") {
		t.Fatalf("the captured log lacks the hub's own lines; was the logger wired?\n%s", out)
	}
	// Not any "-----BEGIN": the hub now sends and reads public PEM, the
	// agents' certificate requests and certificates, which client-go's
	// request tracing (level 8) shows; private keys it must never log.
	for _, secret := range []string{"PRIVATE KEY", string(bytes.TrimSpace(hubKey))[40:80]} {
		if strings.Contains(out, secret) {
			t.Errorf("the hub's log holds key material (%q):\n%s", secret, grepLines(out, secret))
		}
	}
	if strings.Contains(out, "forbidden") {
		t.Errorf("the hub, run with deploy/hub's RBAC, was refused something:\n%s", grepLines(out, "forbidden"))
	}
}

// checkWebhookTLS checks that the webhook server refuses a client that
// offers at most TLS 1.2, and that a TLS 1.3 client offering HTTP/2 first
// gets HTTP/1.1.
func checkWebhookTLS(t *testing.T, addr string, caPEM []byte) {
	t.Helper()
	roots, err := pki.LoadCertPool(writeTemp(t, caPEM))
	if err != nil {
		t.Fatal(err)
	}
	var proto string
	testutil.Eventually(t, "the webhook server completing a TLS 1.3 handshake", 30*time.Second, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{
			RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13, NextProtos: []string{"h2", "http/1.1"},
		})
		if err != nil {
			return err
		}
		defer conn.Close()
		proto = conn.ConnectionState().NegotiatedProtocol
		return nil
	})
	if proto != "http/1.1" {
		t.Errorf("the webhook server negotiated %q, want http/1.1 (HTTP/2 off)", proto)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{
		RootCAs: roots, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12,
	})
	if err == nil {
		conn.Close()
		t.Error("the webhook server accepted a TLS 1.2 handshake, want TLS 1.3 at least")
	}
}

// checkSecureMetrics scrapes the hub's /metrics without a token, as a
// service account with no binding, and as one bound to the shipped
// flotilla-metrics-reader ClusterRole.
func checkSecureMetrics(t *testing.T, ctx context.Context, admin client.Client, addr string) {
	t.Helper()
	cfg := sharedEnv.Config(t)
	scraper, err := deployrbac.ServiceAccountToken(ctx, cfg, "monitoring", "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := deployrbac.ServiceAccountToken(ctx, cfg, "monitoring", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	binding, err := deployrbac.BindMetricsReader(ctx, admin, "monitoring", "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), binding) })
	get := func(token string) (int, string, error) { return deployrbac.GetMetrics(ctx, addr, token) }
	var body string
	testutil.Eventually(t, "/metrics answering 200 to the token bound to flotilla-metrics-reader", 30*time.Second, func() error {
		code, b, err := get(scraper)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("status %d: %s", code, b)
		}
		body = b
		return nil
	})
	if !strings.Contains(body, "leader_election_master_status") {
		t.Errorf("/metrics answered 200 without the hub's metrics:\n%.500s", body)
	}
	for _, tt := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a service account not bound to flotilla-metrics-reader", nobody, http.StatusForbidden},
	} {
		code, b, err := get(tt.token)
		if err != nil {
			t.Fatalf("%s: %v", tt.who, err)
		}
		if code != tt.want {
			t.Errorf("/metrics with %s: status %d, want %d (%.200s)", tt.who, code, tt.want, b)
		}
	}
	// A token the apiserver never issued: its TokenReview comes back with
	// an error; refused as unauthenticated, like kube-apiserver does.
	if code, b, err := get("not-a-token"); err != nil || code != http.StatusUnauthorized || strings.Contains(b, "leader_election_master_status") {
		t.Errorf("/metrics with a made-up token: status %d, %v; want 401 and no metrics (%.200s)", code, err, b)
	}
	// The refusals disturbed no one: the reader is still served.
	if code, _, err := get(scraper); err != nil || code != http.StatusOK {
		t.Errorf("/metrics with the reader's token after the refusals: %d, %v; want 200", code, err)
	}
	// Plain HTTP gets no metrics either.
	if resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("/metrics answered 200 over plain HTTP")
		}
	}
}

func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// shippedHub prepares the shared envtest apiserver for a hub that runs
// with only what deploy/hub ships: the CRDs, the hub's RBAC and
// webhook.yaml applied. It returns an admin client, the hub service
// account's config and the applied webhook configurations (a test removes
// them again: envtest cannot reach the Service they call).
func shippedHub(t *testing.T) (client.Client, *rest.Config, []client.Object) {
	t.Helper()
	ctx := context.Background()
	adminCfg := sharedEnv.Config(t)
	if _, err := envtest.InstallCRDs(adminCfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(adminCfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hubCfg, err := deployrbac.ServiceAccountConfig(ctx, adminCfg, flotillav1.SystemNamespace, "flotilla-hub")
	if err != nil {
		t.Fatal(err)
	}
	if err := deployrbac.Install(ctx, admin, deployrbac.Hub); err != nil {
		t.Fatal(err)
	}
	webhooks, err := deployrbac.Load(filepath.Join(deployrbac.DeployDir(), "hub", "webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := deployrbac.Apply(ctx, admin, webhooks); err != nil {
		t.Fatal(err)
	}
	return admin, hubCfg, webhooks
}
