package setup

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/deployrbac"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// TestHubReadiness runs a leader-elected hub in process, as a service
// account the test grants privileges to step by step, against a real
// apiserver, and polls its /healthz and /readyz over HTTP on loopback:
//   - with no privileges its caches cannot list anything: /readyz fails,
//     /readyz/caches says the caches have not synced, and /healthz
//     answers 200 all along (a slow or refusing apiserver never restarts
//     the hub);
//   - given the hub's ClusterRole (deploy/hub) its caches sync; it cannot
//     take the leader Lease, so as a standby serving the webhook it is
//     ready, and /readyz?verbose lists every named check;
//   - given the Lease but not its fleet identity ConfigMap it leads
//     without serving agents: /readyz fails and /readyz/sync-server names
//     the fleet identity and the refusal;
//   - given the rest of its Role it serves agents (a TLS handshake with
//     an agent certificate completes) and is ready.
func TestHubReadiness(t *testing.T) {
	ctx := context.Background()
	adminCfg := sharedEnv.Config(t)
	if _, err := envtest.InstallCRDs(adminCfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(adminCfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The hub's ClusterRole, as shipped; the test binds it to its own
	// service account in its own namespace, so no other test's grants
	// reach this hub.
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flotillav1.SystemNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := deployrbac.Install(ctx, admin, deployrbac.Hub); err != nil {
		t.Fatal(err)
	}
	const ns, sa = "flotilla-probes", "probe-hub"
	hubCfg, err := deployrbac.ServiceAccountConfig(ctx, adminCfg, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := deployrbac.Load(filepath.Join(deployrbac.DeployDir(), "hub", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var leaseRules, otherRules []rbacv1.PolicyRule
	for _, o := range shipped {
		if r, ok := o.(*rbacv1.Role); ok {
			for _, rule := range r.Rules {
				if len(rule.APIGroups) == 1 && rule.APIGroups[0] == "coordination.k8s.io" {
					leaseRules = append(leaseRules, rule)
				} else {
					otherRules = append(otherRules, rule)
				}
			}
		}
	}
	if len(leaseRules) == 0 || len(otherRules) == 0 {
		t.Fatalf("deploy/hub/rbac/role.yaml has no Role with Lease rules and other rules (%d, %d)", len(leaseRules), len(otherRules))
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
	clusterBinding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flotilla-probes-hub"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flotilla-hub"},
		Subjects:   subjects,
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe-hub"}, Rules: leaseRules}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe-hub"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "probe-hub"},
		Subjects:   subjects,
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{clusterBinding, role, binding} {
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
	if _, err := pki.EnsureAgent(certDir, ca, "probe-member"); err != nil {
		t.Fatal(err)
	}
	probeAddr := freeLocalAddr(t)
	listening := make(chan string, 1)
	hub, err := New(ctx, Options{
		Config:                  hubCfg,
		LeaderElection:          true,
		LeaderElectionID:        "probe-hub.flotilla.dev",
		LeaderElectionNamespace: ns,
		MetricsAddr:             "0",
		ProbeAddr:               probeAddr,
		SyncAddr:                "127.0.0.1:0",
		CertDir:                 certDir,
		WebhookAddr:             freeLocalAddr(t),
		Logger:                  testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
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
	t.Cleanup(func() {
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

	healthy := testutil.ProbeIs(probeAddr, "/healthz", http.StatusOK)
	every := testutil.Every(200 * time.Millisecond)

	// 1. No privileges: the caches cannot sync.
	testutil.Eventually(t, "/readyz/caches failing, saying the caches have not synced, for a hub that may list nothing", 30*time.Second,
		testutil.ProbeIs(probeAddr, "/readyz/"+CheckCaches, http.StatusInternalServerError, "caches have not synced"), every)
	testutil.Eventually(t, "/readyz?verbose failing with the caches check named", 10*time.Second,
		testutil.ProbeIs(probeAddr, "/readyz?verbose", http.StatusInternalServerError, "[-]"+CheckCaches+" failed"), every)
	if err := healthy(); err != nil {
		t.Errorf("liveness while the apiserver refuses the hub: %v", err)
	}

	// 2. The ClusterRole: caches sync; no Lease, so a ready standby.
	if err := admin.Create(ctx, clusterBinding); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the standby hub becoming ready once its caches synced", 60*time.Second,
		testutil.ProbeIs(probeAddr, "/readyz?verbose", http.StatusOK,
			"[+]"+CheckCaches+" ok", "[+]"+CheckWebhook+" ok", "[+]"+CheckSyncServer+" ok"), every)
	select {
	case a := <-listening:
		t.Fatalf("the hub serves agents on %s without the leader Lease", a)
	default:
	}
	if err := healthy(); err != nil {
		t.Errorf("liveness of the standby: %v", err)
	}

	// 3. The Lease but not the fleet identity: it leads, serves no one.
	if err := admin.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the elected hub that cannot read its fleet identity saying so at /readyz/sync-server", 60*time.Second,
		testutil.ProbeIs(probeAddr, "/readyz/"+CheckSyncServer, http.StatusInternalServerError, "fleet identity", "forbidden"), every)
	if err := testutil.ProbeIs(probeAddr, "/readyz", http.StatusInternalServerError)(); err != nil {
		t.Errorf("readiness of a leader that serves no agents: %v", err)
	}
	select {
	case a := <-listening:
		t.Fatalf("the hub serves agents on %s without its fleet identity", a)
	default:
	}

	// 4. The rest of the Role: it serves agents and is ready.
	role.Rules = append(role.Rules, otherRules...)
	if err := admin.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	var syncAddr string
	select {
	case syncAddr = <-listening:
	case <-time.After(60 * time.Second):
		t.Fatal("the hub did not serve agents within 60s of being granted its fleet identity")
	}
	testutil.Eventually(t, "the leader serving agents becoming ready", 30*time.Second,
		testutil.ProbeIs(probeAddr, "/readyz?verbose", http.StatusOK, "[+]"+CheckSyncServer+" ok", "[+]"+CheckCaches+" ok"), every)
	// The server it reports accepts agents: a TLS handshake with an agent
	// certificate completes.
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, pki.AgentCertFile("probe-member")), filepath.Join(certDir, pki.AgentKeyFile("probe-member")))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := pki.LoadCertPool(filepath.Join(certDir, pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", syncAddr, &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"},
	})
	if err != nil {
		t.Fatalf("the ready leader's sync server on %s refused an agent's TLS handshake: %v", syncAddr, err)
	}
	conn.Close()
	if err := healthy(); err != nil {
		t.Errorf("liveness of the leader: %v", err)
	}
}
