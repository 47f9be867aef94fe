package bootstrap

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/csr"
	"github.com/flotilla-dev/flotilla/hub/internal/syncbridge"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// One apiserver serves the package's tests; it starts on the first test
// that needs it, so the table tests run without it.
var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

const hubNS = "flotilla-system"

// joinHub is a hub's joining half against a real apiserver: the CSR
// controller in a manager, and the sync server serving the Bootstrap
// service on loopback.
type joinHub struct {
	admin client.Client
	ca    *pki.KeyPair
	addr  string
}

var installCRDs sync.Once

func startJoinHub(t *testing.T) *joinHub {
	t.Helper()
	cfg := sharedEnv.Config(t)
	installCRDs.Do(func() {
		if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
			t.Fatalf("installing the CRDs: %v", err)
		}
	})
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hubNS}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("test-hub-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(rest.CopyConfig(cfg), ctrl.Options{
		Scheme:     scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptrTrue()},
	})
	if err != nil {
		t.Fatal(err)
	}
	user, err := csr.HubUsername(ctx, mgr.GetClient())
	if err != nil {
		t.Fatal(err)
	}
	if err := (&csr.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), CA: ca, Lifetime: time.Hour, HubUsername: user}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	source, err := syncbridge.NewWorkSource(ctx, mgr.GetCache())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.IssueHub(nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	leaf := serving.TLSCertificate()
	// The serving chain carries the CA after the leaf: agents find the
	// CA they pinned by hash there (bootstrap.VerifyPinned).
	leaf.Certificate = append(leaf.Certificate, ca.Cert.Raw)
	srv, err := syncserver.New(syncserver.Config{
		FleetID:  "fleet-test",
		Works:    source,
		Clusters: syncbridge.Registry{Reader: mgr.GetCache()},
		TLS: &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf},
			ClientCAs: pool, ClientAuth: tls.RequestClientCert},
		Bootstrap: &Service{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Cache: mgr.GetClient(),
			Namespace: hubNS, CA: ca, Lifetime: time.Hour},
		BootstrapRate: -1, // the tests join often from one address
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := syncbridge.WatchClusters(ctx, mgr.GetCache(), srv.ClusterChanged); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(ctx) }()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := <-mgrDone; err != nil {
			t.Errorf("manager: %v", err)
		}
		// The package's tests share the apiserver, and run again with
		// -count: leave no member or request behind (nothing holds them
		// with a finalizer here).
		for _, obj := range []client.Object{&flotillav1.MemberCluster{}, &certificatesv1.CertificateSigningRequest{}} {
			if err := admin.DeleteAllOf(context.Background(), obj); err != nil {
				t.Errorf("cleaning up %T: %v", obj, err)
			}
		}
	})
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("the manager's cache did not sync")
	}
	return &joinHub{admin: admin, ca: ca, addr: lis.Addr().String()}
}

func ptrTrue() *bool { b := true; return &b }

// dial connects to the hub as a joining agent (cert nil) or with an
// agent certificate.
func (h *joinHub) dial(t *testing.T, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(h.ca.Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (h *joinHub) bootstrapClient(t *testing.T, cert *tls.Certificate) syncv1.BootstrapClient {
	return syncv1.NewBootstrapClient(h.dial(t, cert))
}

// newToken creates a token Secret.
func (h *joinHub) newToken(t *testing.T, opts bootstrap.Options, now time.Time) bootstrap.Token {
	t.Helper()
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.admin.Create(context.Background(), bootstrap.NewSecret(hubNS, tok, opts, now)); err != nil {
		t.Fatal(err)
	}
	return tok
}

func (h *joinHub) usedBy(t *testing.T, tok bootstrap.Token) string {
	t.Helper()
	s := &corev1.Secret{}
	if err := h.admin.Get(context.Background(), client.ObjectKey{Namespace: hubNS, Name: bootstrap.SecretName(tok.ID)}, s); err != nil {
		t.Fatal(err)
	}
	return string(s.Data[bootstrap.KeyUsedBy])
}

// agentKey is a joining agent's key and request for cluster.
type agentKey struct {
	key *ecdsa.PrivateKey
	csr []byte
}

func newAgentKey(t *testing.T, cluster string) agentKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	req, err := pki.NewAgentCSR(key, cluster)
	if err != nil {
		t.Fatal(err)
	}
	return agentKey{key: key, csr: req}
}

const wait = 30 * time.Second

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s: %s", what, wait, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// certificate polls Certificate until the request is no longer PENDING.
func certificate(t *testing.T, bc syncv1.BootstrapClient, request string) *syncv1.CertificateResponse {
	t.Helper()
	var out *syncv1.CertificateResponse
	eventually(t, "request "+request+" being decided", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		resp, err := bc.Certificate(ctx, &syncv1.CertificateRequest{Request: request})
		if err != nil {
			return false, err.Error()
		}
		out = resp
		return resp.GetState() != syncv1.CertificateResponse_PENDING, resp.GetMessage()
	})
	return out
}

// issuedCert checks an ISSUED answer and returns the TLS certificate it
// makes with key.
func (h *joinHub) issuedCert(t *testing.T, resp *syncv1.CertificateResponse, key *ecdsa.PrivateKey, cluster string, uid string) *tls.Certificate {
	t.Helper()
	if resp.GetState() != syncv1.CertificateResponse_ISSUED {
		t.Fatalf("request state %s (%q), want ISSUED", resp.GetState(), resp.GetMessage())
	}
	if string(resp.GetCa()) != string(h.ca.CertPEM()) {
		t.Errorf("the answer's CA is not the hub CA")
	}
	cert, err := pki.ParseCertificatePEM(resp.GetCertificate())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(h.ca.Cert)
	got, err := pki.VerifyAgent([]*x509.Certificate{cert}, pool, time.Now())
	if err != nil || got != cluster {
		t.Fatalf("VerifyAgent = %q, %v; want %s", got, err, cluster)
	}
	if pki.AgentCertificateUID(cert) != uid {
		t.Errorf("certificate UID %q, want the MemberCluster's %q", pki.AgentCertificateUID(cert), uid)
	}
	if !cert.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
		t.Errorf("the certificate is not for the agent's key")
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life > time.Hour+2*time.Minute {
		t.Errorf("certificate lasts %s, more than the hub's lifetime", life)
	}
	return &tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

func (h *joinHub) member(t *testing.T, name string) *flotillav1.MemberCluster {
	t.Helper()
	mc := &flotillav1.MemberCluster{}
	if err := h.admin.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
		t.Fatalf("MemberCluster %s: %v", name, err)
	}
	return mc
}

func (h *joinHub) csrsOf(t *testing.T, cluster string) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list := &certificatesv1.CertificateSigningRequestList{}
	if err := h.admin.List(context.Background(), list, client.MatchingLabels{flotillav1.LabelCluster: cluster}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// healthCheck makes an authenticated RPC with cert.
func (h *joinHub) healthCheck(t *testing.T, cert *tls.Certificate) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := healthpb.NewHealthClient(h.dial(t, cert)).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
		t.Errorf("got %v; want %s containing %q", err, code, msg)
	}
}

// TestJoinAutoAccepted joins a cluster with an auto-accepting token: the
// MemberCluster is created Accepted with the labels, the request is
// approved and signed through the apiserver's CSR API, the certificate
// names the cluster and the member's UID and authenticates; the agent
// renews with it. Then the MemberCluster is deleted (its requests go) and
// created again by an admin: the old certificate is refused as
// re-created, and Renew with it too.
func TestJoinAutoAccepted(t *testing.T) {
	h := startJoinHub(t)
	ctx := context.Background()
	tok := h.newToken(t, bootstrap.Options{TTL: time.Hour, SingleUse: true, AutoAccept: true, Labels: map[string]string{"env": "prod"}}, time.Now())
	k := newAgentKey(t, "auto-east")
	bc := h.bootstrapClient(t, nil)
	resp, err := bc.Register(ctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: "auto-east", Csr: k.csr,
		Labels: map[string]string{"env": "dev", "team": "a"}, Region: "eu", Zone: "eu-1", Provider: "kind"})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if !resp.GetAccepted() || !strings.HasPrefix(resp.GetRequest(), "flotilla-auto-east-") {
		t.Errorf("Register = %+v; want accepted and a request flotilla-auto-east-*", resp)
	}
	mc := h.member(t, "auto-east")
	if mc.Spec.Acceptance != flotillav1.AcceptanceAccepted || mc.Spec.Region != "eu" || mc.Spec.Zone != "eu-1" || mc.Spec.Provider != "kind" {
		t.Errorf("MemberCluster spec %+v; want Accepted in eu/eu-1/kind", mc.Spec)
	}
	if mc.Labels["env"] != "prod" || mc.Labels["team"] != "a" || mc.Labels[flotillav1.LabelJoinToken] != tok.ID {
		t.Errorf("MemberCluster labels %v; want env=prod (the token's), team=a and the join token", mc.Labels)
	}
	if got := h.usedBy(t, tok); got != "auto-east" {
		t.Errorf("token used by %q, want auto-east", got)
	}
	cert := h.issuedCert(t, certificate(t, bc, resp.GetRequest()), k.key, "auto-east", string(mc.UID))
	if err := h.healthCheck(t, cert); err != nil {
		t.Fatalf("an RPC with the issued certificate: %v", err)
	}

	// Renew with the certificate: a new key, a request labelled renew.
	k2 := newAgentKey(t, "auto-east")
	renewed, err := h.bootstrapClient(t, cert).Renew(ctx, &syncv1.RenewRequest{Csr: k2.csr})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	h.issuedCert(t, certificate(t, bc, renewed.GetRequest()), k2.key, "auto-east", string(mc.UID))
	kinds := map[string]int{}
	for _, c := range h.csrsOf(t, "auto-east") {
		kinds[c.Labels[flotillav1.LabelCertificateRequest]]++
	}
	if kinds[RequestRegister] != 1 || kinds[RequestRenew] != 1 {
		t.Errorf("requests of auto-east by kind: %v; want one register and one renew", kinds)
	}
	// Renew for another cluster's name is a matter of permission.
	other := newAgentKey(t, "auto-west")
	_, err = h.bootstrapClient(t, cert).Renew(ctx, &syncv1.RenewRequest{Csr: other.csr})
	wantCode(t, err, codes.PermissionDenied, "auto-west")

	// Deleted: its requests go; re-created by an admin: the old
	// certificate is refused.
	if err := h.admin.Delete(ctx, mc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "auto-east's requests being deleted with it", func() (bool, string) {
		n := len(h.csrsOf(t, "auto-east"))
		return n == 0, fmt.Sprintf("%d left", n)
	})
	eventually(t, "the MemberCluster being gone", func() (bool, string) {
		err := h.admin.Get(ctx, client.ObjectKey{Name: "auto-east"}, &flotillav1.MemberCluster{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if err := h.admin.Create(ctx, &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "auto-east"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old certificate being refused by the re-created member", func() (bool, string) {
		err := h.healthCheck(t, cert)
		return status.Code(err) == codes.PermissionDenied && strings.Contains(err.Error(), "re-created"), fmt.Sprint(err)
	})
	_, err = h.bootstrapClient(t, cert).Renew(ctx, &syncv1.RenewRequest{Csr: k2.csr})
	wantCode(t, err, codes.PermissionDenied, "join it again")
}

// TestJoinPendingUntilAccepted: a token that does not auto-accept makes
// a Pending member whose request waits, saying how to accept; accepting
// issues the certificate, and the agent holds a stream until its member
// is made Pending again. A second Pending member is denied: its request
// is denied with the reason, and its agent is told.
func TestJoinPendingUntilAccepted(t *testing.T) {
	h := startJoinHub(t)
	ctx := context.Background()
	tok := h.newToken(t, bootstrap.Options{TTL: time.Hour}, time.Now())
	bc := h.bootstrapClient(t, nil)
	register := func(cluster string) (agentKey, *syncv1.RegisterResponse) {
		k := newAgentKey(t, cluster)
		resp, err := bc.Register(ctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: cluster, Csr: k.csr})
		if err != nil {
			t.Fatalf("Register %s: %v", cluster, err)
		}
		if resp.GetAccepted() {
			t.Errorf("Register %s says accepted; the token does not auto-accept", cluster)
		}
		return k, resp
	}
	k, resp := register("pend-east")
	_, denied := register("pend-west")
	if got := h.usedBy(t, tok); got != "pend-east,pend-west" {
		t.Errorf("multi-use token used by %q, want both", got)
	}
	// The request waits, and keeps waiting, with the command to run.
	for i := 0; i < 3; i++ {
		r, err := bc.Certificate(ctx, &syncv1.CertificateRequest{Request: resp.GetRequest()})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetState() != syncv1.CertificateResponse_PENDING || !strings.Contains(r.GetMessage(), "kubectl flotilla accept pend-east") {
			t.Fatalf("Certificate = %s %q; want PENDING naming the accept command", r.GetState(), r.GetMessage())
		}
		time.Sleep(200 * time.Millisecond)
	}
	mc := h.member(t, "pend-east")
	mc.Spec.Acceptance = flotillav1.AcceptanceAccepted
	if err := h.admin.Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	cert := h.issuedCert(t, certificate(t, bc, resp.GetRequest()), k.key, "pend-east", string(mc.UID))

	// The accepted agent holds a stream; making its member Pending again
	// ends it at once, naming the command that lets it back.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := syncv1.NewSyncClient(h.dial(t, cert)).Connect(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&syncv1.AgentMessage{Kind: &syncv1.AgentMessage_Hello{Hello: &syncv1.Hello{AgentVersion: "join-test"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("the accepted agent's stream: %v", err)
	}
	recvErr := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				recvErr <- err
				return
			}
		}
	}()
	mc = h.member(t, "pend-east")
	mc.Spec.Acceptance = flotillav1.AcceptancePending
	if err := h.admin.Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-recvErr:
		wantCode(t, err, codes.PermissionDenied, "kubectl flotilla accept pend-east")
	case <-time.After(wait):
		t.Fatal("the stream of a member made Pending again did not end")
	}
	wantCode(t, h.healthCheck(t, cert), codes.PermissionDenied, "not Accepted")

	west := h.member(t, "pend-west")
	west.Spec.Acceptance = flotillav1.AcceptanceDenied
	if err := h.admin.Update(ctx, west); err != nil {
		t.Fatal(err)
	}
	r := certificate(t, bc, denied.GetRequest())
	if r.GetState() != syncv1.CertificateResponse_DENIED || !strings.Contains(r.GetMessage(), "MemberCluster pend-west is Denied") {
		t.Errorf("Certificate = %s %q; want DENIED saying the member is Denied", r.GetState(), r.GetMessage())
	}
}

// TestRegisterRefusals sends Register requests the hub must refuse: each
// gets the code the proto promises and a message naming what is wrong,
// and none creates a MemberCluster or a request or uses the token; a
// member that exists already is not touched.
func TestRegisterRefusals(t *testing.T) {
	h := startJoinHub(t)
	ctx := context.Background()
	now := time.Now()
	good := h.newToken(t, bootstrap.Options{TTL: time.Hour, SingleUse: true, AutoAccept: true}, now)
	expired := h.newToken(t, bootstrap.Options{TTL: time.Minute}, now.Add(-time.Hour))
	used := h.newToken(t, bootstrap.Options{TTL: time.Hour, SingleUse: true}, now)
	bystander := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "ref-taken", Labels: map[string]string{"owner": "admin"}}}
	if err := h.admin.Create(ctx, bystander); err != nil {
		t.Fatal(err)
	}
	bc := h.bootstrapClient(t, nil)
	// used is used up by ref-first.
	if _, err := bc.Register(ctx, &syncv1.RegisterRequest{Token: used.String(), ClusterName: "ref-first", Csr: newAgentKey(t, "ref-first").csr}); err != nil {
		t.Fatal(err)
	}
	wrongSecret := bootstrap.Token{ID: good.ID, Secret: strings.Repeat("x", 16)}
	unknown := bootstrap.Token{ID: "zzzzzz", Secret: good.Secret}
	csrFor := func(c string) []byte { return newAgentKey(t, c).csr }

	for _, tc := range []struct {
		name    string
		req     *syncv1.RegisterRequest
		code    codes.Code
		msg     string
		cluster string // that must not appear
	}{
		{"malformed token", &syncv1.RegisterRequest{Token: "not-a-token", ClusterName: "ref-a", Csr: csrFor("ref-a")}, codes.Unauthenticated, "malformed bootstrap token", "ref-a"},
		{"unknown token", &syncv1.RegisterRequest{Token: unknown.String(), ClusterName: "ref-b", Csr: csrFor("ref-b")}, codes.Unauthenticated, "no such token", "ref-b"},
		{"expired token", &syncv1.RegisterRequest{Token: expired.String(), ClusterName: "ref-c", Csr: csrFor("ref-c")}, codes.Unauthenticated, "expired", "ref-c"},
		{"wrong secret", &syncv1.RegisterRequest{Token: wrongSecret.String(), ClusterName: "ref-d", Csr: csrFor("ref-d")}, codes.Unauthenticated, "does not match", "ref-d"},
		{"used single-use token", &syncv1.RegisterRequest{Token: used.String(), ClusterName: "ref-e", Csr: csrFor("ref-e")}, codes.Unauthenticated, "was used by cluster ref-first", "ref-e"},
		{"invalid cluster name", &syncv1.RegisterRequest{Token: good.String(), ClusterName: "Ref_F", Csr: csrFor("ref-f")}, codes.InvalidArgument, "cluster_name", "ref-f"},
		{"a request for another cluster", &syncv1.RegisterRequest{Token: good.String(), ClusterName: "ref-g", Csr: csrFor("ref-other")}, codes.InvalidArgument, `names cluster "ref-other"`, "ref-g"},
		{"a name an admin's member has", &syncv1.RegisterRequest{Token: good.String(), ClusterName: "ref-taken", Csr: csrFor("ref-taken")}, codes.AlreadyExists, "not created by a join", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bc.Register(ctx, tc.req)
			wantCode(t, err, tc.code, tc.msg)
			if tc.cluster != "" {
				if err := h.admin.Get(ctx, client.ObjectKey{Name: tc.cluster}, &flotillav1.MemberCluster{}); !apierrors.IsNotFound(err) {
					t.Errorf("MemberCluster %s: %v; want none", tc.cluster, err)
				}
			}
		})
	}
	// A dry run answers as Register would and creates nothing.
	if _, err := bc.Register(ctx, &syncv1.RegisterRequest{Token: good.String(), ClusterName: "ref-dry", DryRun: true}); err != nil {
		t.Errorf("dry run: %v", err)
	}
	_, err := bc.Register(ctx, &syncv1.RegisterRequest{Token: expired.String(), ClusterName: "ref-dry", DryRun: true})
	wantCode(t, err, codes.Unauthenticated, "expired")

	for _, c := range []string{"ref-a", "ref-b", "ref-c", "ref-d", "ref-e", "ref-f", "ref-g", "ref-other", "ref-taken", "ref-dry"} {
		if n := len(h.csrsOf(t, c)); n != 0 {
			t.Errorf("%d certificate requests of %s; want none", n, c)
		}
	}
	if err := h.admin.Get(ctx, client.ObjectKey{Name: "ref-dry"}, &flotillav1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run left MemberCluster ref-dry: %v", err)
	}
	if got := h.usedBy(t, good); got != "" {
		t.Errorf("the token refused joins used: used by %q, want nobody", got)
	}
	if got := h.usedBy(t, used); got != "ref-first" {
		t.Errorf("the used token is now used by %q, want ref-first only", got)
	}
	after := h.member(t, "ref-taken")
	if after.ResourceVersion != bystander.ResourceVersion || after.Labels[flotillav1.LabelJoinToken] != "" {
		t.Errorf("the admin's member was touched: resourceVersion %s -> %s, labels %v", bystander.ResourceVersion, after.ResourceVersion, after.Labels)
	}
	// Certificate reports only this signer's requests.
	foreign := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "ref-foreign", Labels: map[string]string{flotillav1.LabelCluster: "ref-taken"}},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: csrFor("ref-taken"), SignerName: "example.com/other", Usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}}}
	if err := h.admin.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	_, err = bc.Certificate(ctx, &syncv1.CertificateRequest{Request: "ref-foreign"})
	wantCode(t, err, codes.NotFound, "no certificate request ref-foreign")
	// Without a certificate, Renew is refused before the service runs.
	_, err = bc.Renew(ctx, &syncv1.RenewRequest{Csr: csrFor("ref-taken")})
	wantCode(t, err, codes.Unauthenticated, "no client certificate")
}

// TestSingleUseTokenRace registers two clusters at once with one
// single-use token: exactly one wins, the other is refused, and only the
// winner's MemberCluster and request exist. Then the winner retries its
// Register (an answer it lost): it gets a new request for the same
// member.
func TestSingleUseTokenRace(t *testing.T) {
	h := startJoinHub(t)
	ctx := context.Background()
	tok := h.newToken(t, bootstrap.Options{TTL: time.Hour, SingleUse: true}, time.Now())
	bc := h.bootstrapClient(t, nil)
	names := []string{"race-a", "race-b"}
	keys := []agentKey{newAgentKey(t, names[0]), newAgentKey(t, names[1])}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = bc.Register(ctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: names[i], Csr: keys[i].csr})
		}()
	}
	wg.Wait()
	winner, loser := -1, -1
	for i, err := range errs {
		switch {
		case err == nil:
			winner = i
		case status.Code(err) == codes.Unauthenticated && strings.Contains(err.Error(), "already used"):
			loser = i
		default:
			t.Fatalf("Register %s: %v", names[i], err)
		}
	}
	if winner < 0 || loser < 0 {
		t.Fatalf("results %v; want exactly one success and one refusal", errs)
	}
	if err := h.admin.Get(ctx, client.ObjectKey{Name: names[loser]}, &flotillav1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the loser's MemberCluster %s: %v; want none", names[loser], err)
	}
	if n := len(h.csrsOf(t, names[loser])); n != 0 {
		t.Errorf("the loser has %d requests; want none", n)
	}
	if got := h.usedBy(t, tok); got != names[winner] {
		t.Errorf("token used by %q, want %s", got, names[winner])
	}
	// The winner retries before its member is accepted.
	again, err := bc.Register(ctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: names[winner], Csr: keys[winner].csr})
	if err != nil {
		t.Fatalf("the winner retrying: %v", err)
	}
	if n := len(h.csrsOf(t, names[winner])); n != 2 {
		t.Errorf("the winner has %d requests after its retry; want 2", n)
	}
	mc := h.member(t, names[winner])
	mc.Spec.Acceptance = flotillav1.AcceptanceAccepted
	if err := h.admin.Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	cert := h.issuedCert(t, certificate(t, bc, again.GetRequest()), keys[winner].key, names[winner], string(mc.UID))
	if err := h.healthCheck(t, cert); err != nil {
		t.Fatalf("an RPC with the retry's certificate: %v", err)
	}
	// Now that it holds a certificate, the name is no longer free for
	// the token: a third Register is refused.
	_, err = bc.Register(ctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: names[winner], Csr: keys[winner].csr})
	wantCode(t, err, codes.AlreadyExists, "got its certificate already")
}

// TestRegisterUndoesWhenTheRequestFails makes the apiserver refuse the
// CertificateSigningRequest of a Register: the MemberCluster it created
// is deleted again and the single-use token is free again, so the agent
// can retry with it.
func TestRegisterUndoesWhenTheRequestFails(t *testing.T) {
	h := startJoinHub(t)
	ctx := context.Background()
	failing := interceptor.NewClient(h.admin.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
				return apierrors.NewServiceUnavailable("the test refuses certificate requests")
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	svc := &Service{Client: failing, APIReader: h.admin, Cache: h.admin, Namespace: hubNS, CA: h.ca, Lifetime: time.Hour}
	tok := h.newToken(t, bootstrap.Options{TTL: time.Hour, SingleUse: true, AutoAccept: true}, time.Now())
	k := newAgentKey(t, "undo-east")
	_, err := svc.Register(ctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: "undo-east", Csr: k.csr})
	wantCode(t, err, codes.Unavailable, "the test refuses certificate requests")
	if err := h.admin.Get(ctx, client.ObjectKey{Name: "undo-east"}, &flotillav1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("MemberCluster undo-east after the failed Register: %v; want none", err)
	}
	if got := h.usedBy(t, tok); got != "" {
		t.Errorf("the token is used by %q after the failed Register; want nobody", got)
	}
	// The agent retries once the apiserver takes requests again.
	svc.Client = h.admin
	if _, err := svc.Register(ctx, &syncv1.RegisterRequest{Token: tok.String(), ClusterName: "undo-east", Csr: k.csr}); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := h.usedBy(t, tok); got != "undo-east" {
		t.Errorf("token used by %q after the retry, want undo-east", got)
	}
}
