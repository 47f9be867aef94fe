package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/deploy"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// testHub serves the Bootstrap service on loopback over TLS, with the CA
// after the leaf in its chain as the hub sends it, checking tokens and
// names against a real apiserver as the hub's Register does. It answers
// dry runs only: a join must never register for real (the agent does).
type testHub struct {
	syncv1.UnimplementedBootstrapServer
	c        client.Client
	tokenNS  string
	ca       *pki.KeyPair
	addr     string
	mu       sync.Mutex
	requests []*syncv1.RegisterRequest
}

func startTestHub(t *testing.T, c client.Client, tokenNS string) *testHub {
	t.Helper()
	ca, err := pki.NewCA("test-hub-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueHub(nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	h := &testHub{c: c, tokenNS: tokenNS, ca: ca}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{leaf.Cert.Raw, ca.Cert.Raw}, PrivateKey: leaf.Key}}}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	syncv1.RegisterBootstrapServer(srv, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = lis.Addr().String()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("test hub: %v", err)
		}
	})
	return h
}

func (h *testHub) Register(ctx context.Context, req *syncv1.RegisterRequest) (*syncv1.RegisterResponse, error) {
	h.mu.Lock()
	h.requests = append(h.requests, req)
	h.mu.Unlock()
	t, err := bootstrap.ParseToken(req.Token)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	s := &corev1.Secret{}
	if err := h.c.Get(ctx, client.ObjectKey{Namespace: h.tokenNS, Name: bootstrap.SecretName(t.ID)}, s); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, status.Error(codes.Internal, err.Error())
		}
		s = nil
	}
	if _, err := bootstrap.Check(s, t, req.ClusterName, time.Now()); err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	err = h.c.Get(ctx, client.ObjectKey{Name: req.ClusterName}, &flotillav1.MemberCluster{})
	if err == nil {
		return nil, status.Errorf(codes.AlreadyExists, "a member named %s is already in the fleet", req.ClusterName)
	}
	if !req.DryRun {
		return nil, status.Error(codes.Unimplemented, "the test hub answers dry runs only")
	}
	return &syncv1.RegisterResponse{}, nil
}

// Certificate answers PENDING for every request, as the hub does until
// the member is accepted.
func (h *testHub) Certificate(_ context.Context, req *syncv1.CertificateRequest) (*syncv1.CertificateResponse, error) {
	return &syncv1.CertificateResponse{State: syncv1.CertificateResponse_PENDING, Message: "request " + req.Request + " waits for approval"}, nil
}

func (h *testHub) seen() []*syncv1.RegisterRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*syncv1.RegisterRequest(nil), h.requests...)
}

// agentObjects are what join installs in a member, the bootstrap Secret
// included.
func agentObjects(t *testing.T) []client.Object {
	t.Helper()
	objs, err := deploy.Objects(deploy.Agent, "")
	if err != nil {
		t.Fatal(err)
	}
	out := []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentBootstrapSecretName}}}
	for _, o := range objs {
		out = append(out, o)
	}
	return out
}

// assertNoAgent fails unless none of what join installs is in the member
// (a namespace being deleted counts as gone: envtest runs no namespace
// controller to finish the deletion).
func assertNoAgent(t *testing.T, member client.Client, when string) {
	t.Helper()
	for _, o := range agentObjects(t) {
		live := &unstructured.Unstructured{}
		gvk, err := member.GroupVersionKindFor(o)
		if err != nil {
			t.Fatal(err)
		}
		live.SetGroupVersionKind(gvk)
		err = member.Get(context.Background(), client.ObjectKeyFromObject(o), live)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			t.Fatal(err)
		case gvk.Kind == "Namespace" && live.GetDeletionTimestamp() != nil:
		default:
			t.Errorf("%s: %s %s is in the member", when, gvk.Kind, objectName(o))
		}
	}
}

// TestJoinLifecycle joins a member to a hub and takes it out again, with
// a real member apiserver, a real hub apiserver and the Bootstrap service
// over real gRPC and TLS: every refusal (wrong CA hash, unknown, expired
// or used token, name taken) leaves the member without a trace and, for
// the hash, without the token ever sent; the join installs the agent and
// reports the member pending, then joined; unjoin waits for the hub's
// drain, removes the member's certificate requests and nobody else's, and
// the agent but not the workloads.
func TestJoinLifecycle(t *testing.T) {
	hub, member := hubEnv.client(t), memberEnv.client(t)
	ctx := context.Background()
	const tokenNS = "join-test"
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tokenNS}}); err != nil {
		t.Fatal(err)
	}
	th := startTestHub(t, hub, tokenNS)
	valid, err := CreateToken(ctx, hub, tokenNS, bootstrap.Options{TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expired, err := CreateToken(ctx, hub, tokenNS, bootstrap.Options{TTL: time.Minute}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	used, err := CreateToken(ctx, hub, tokenNS, bootstrap.Options{SingleUse: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	usedSecret := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: tokenNS, Name: bootstrap.SecretName(used.ID)}, usedSecret); err != nil {
		t.Fatal(err)
	}
	bootstrap.MarkUsed(usedSecret, "member-0")
	if err := hub.Update(ctx, usedSecret); err != nil {
		t.Fatal(err)
	}
	if err := hub.Create(ctx, &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "taken"}}); err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("not-the-hub", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	base := JoinOptions{
		HubAddress: th.addr, Token: valid.String(), CAHash: bootstrap.CAHash(th.ca.Cert), ClusterName: "member-9",
		Labels: map[string]string{"env": "test"}, Region: "eu", Zone: "eu-1", Provider: "kwok",
		Image: "registry.local/flotilla-agent:test", Namespace: flotillav1.SystemNamespace,
		DialTimeout: 5 * time.Second, Timeout: 30 * time.Second, Out: &out,
	}

	for _, tc := range []struct {
		name     string
		change   func(*JoinOptions)
		wantErr  []string
		wantCall bool
	}{
		{"wrong CA hash", func(o *JoinOptions) { o.CAHash = bootstrap.CAHash(otherCA.Cert) }, []string{"does not match the pinned hash", bootstrap.CAHash(otherCA.Cert)}, false},
		{"unknown token", func(o *JoinOptions) { o.Token = "zzzzzz.0123456789abcdef" }, []string{"the hub refused the token", "unknown bootstrap token zzzzzz"}, true},
		{"token secret wrong", func(o *JoinOptions) { o.Token = valid.ID + ".0123456789abcdef" }, []string{"the hub refused the token", "does not match"}, true},
		{"expired token", func(o *JoinOptions) { o.Token = expired.String() }, []string{"the hub refused the token", "expired"}, true},
		{"used single-use token", func(o *JoinOptions) { o.Token = used.String() }, []string{"the hub refused the token", "already used", "member-0"}, true},
		{"name taken", func(o *JoinOptions) { o.ClusterName = "taken" }, []string{"the hub refused cluster name taken", "already in the fleet"}, true},
		{"hub not there", func(o *JoinOptions) { o.HubAddress = "127.0.0.1:1" }, []string{"checking the hub at 127.0.0.1:1"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(th.seen())
			o := base
			tc.change(&o)
			err := Join(ctx, member, o)
			if err == nil {
				t.Fatal("joined")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			calls := th.seen()[before:]
			if tc.wantCall != (len(calls) > 0) {
				t.Errorf("%d Register calls reached the hub, want any: %t", len(calls), tc.wantCall)
			}
			assertNoAgent(t, member, tc.name)
		})
	}

	// The join: the agent is installed with its bootstrap Secret, and the
	// wait reports the member pending once the hub holds it so.
	joined := make(chan error, 1)
	go func() {
		o := base
		o.Wait, o.Hub = true, hub
		joined <- Join(ctx, member, o)
	}()
	testutil.Eventually(t, "the bootstrap Secret in the member", 30*time.Second, func() error {
		return member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentBootstrapSecretName}, &corev1.Secret{})
	})
	// What the hub's Register creates for a token without auto-accept.
	pending := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member-9", Finalizers: []string{flotillav1.MemberClusterFinalizer}},
		Spec: flotillav1.MemberClusterSpec{Acceptance: flotillav1.AcceptancePending, Region: "eu"}}
	if err := hub.Create(ctx, pending); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-joined:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("join did not return after the member turned Pending; it printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "pending: run `kubectl flotilla accept member-9` on the hub") {
		t.Errorf("join printed\n%s\nwithout the pending line", out.String())
	}
	for _, r := range th.seen() {
		if !r.DryRun {
			t.Errorf("join sent a real Register for %s: only the agent registers", r.ClusterName)
		}
	}
	d := &appsv1.Deployment{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: "flotilla-agent"}, d); err != nil {
		t.Fatalf("the agent Deployment: %v", err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != base.Image {
		t.Errorf("agent image %q, want %q", img, base.Image)
	}
	bs := &corev1.Secret{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentBootstrapSecretName}, bs); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		BootstrapKeyHubAddress: th.addr, BootstrapKeyToken: valid.String(), BootstrapKeyCAHash: base.CAHash,
		BootstrapKeyClusterName: "member-9", BootstrapKeyLabels: "env=test", BootstrapKeyRegion: "eu", BootstrapKeyZone: "eu-1", BootstrapKeyProvider: "kwok",
	} {
		if got := string(bs.Data[k]); got != v {
			t.Errorf("bootstrap Secret %s = %q, want %q", k, got, v)
		}
	}
	ns := &corev1.Namespace{}
	if err := member.Get(ctx, client.ObjectKey{Name: flotillav1.SystemNamespace}, ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[LabelJoinCreated] != "true" {
		t.Errorf("namespace labels %v: join created it but did not say so", ns.Labels)
	}

	// Without access to the hub's API, the wait reads the agent's
	// progress in the member and asks the hub about its request.
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentCredentialsSecretName},
		Data: map[string][]byte{credentialsKeyRequest: []byte("csr-member-9")}}
	if err := member.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := waitJoined(ctx, member, base); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "pending: run `kubectl flotilla accept member-9` on the hub") {
		t.Errorf("the member-side wait printed %q, want pending", out.String())
	}

	// Accepted and Ready: the wait says joined.
	if err := SetAcceptance(ctx, hub, flotillav1.AcceptanceAccepted, []string{"member-9"}); err != nil {
		t.Fatal(err)
	}
	setReady(t, hub, "member-9")
	out.Reset()
	o := base
	o.Hub = hub
	if err := waitJoined(ctx, member, o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "joined: member-9 is Ready") {
		t.Errorf("the wait printed %q, want joined", out.String())
	}

	// What the agent and the hub add once joined, and what must survive.
	creds.Data = map[string][]byte{corev1.TLSCertKey: []byte("x")}
	if err := member.Update(ctx, creds); err != nil {
		t.Fatal(err)
	}
	agentState := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentIdentityConfigMapName}, Data: map[string]string{"clusterName": "member-9"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: AgentLeaseName}},
	}
	for _, o := range agentState {
		if err := member.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	if err := waitJoined(ctx, member, base); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "joined: member-9 holds its certificate and its agent connected") {
		t.Errorf("the member-side wait printed %q, want joined", out.String())
	}
	agentState = append(agentState, creds)
	workload := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: map[string]string{flotillav1.LabelWork: "shop.web"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}},
		},
	}
	if err := member.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	if err := member.Create(ctx, workload); err != nil {
		t.Fatal(err)
	}
	mine := newCSR(t, "member-9-renew", "member-9", flotillav1.AgentSignerName)
	others := []*certificatesv1.CertificateSigningRequest{
		newCSR(t, "member-8-register", "member-8", flotillav1.AgentSignerName),
		newCSR(t, "member-9-other-signer", "member-9", "example.com/other"),
	}
	for _, csr := range append(others, mine) {
		if err := hub.Create(ctx, csr); err != nil {
			t.Fatal(err)
		}
	}

	// The hub has not drained the member in time: unjoin says so and
	// leaves the member as it is.
	out.Reset()
	err = Unjoin(ctx, hub, UnjoinOptions{Name: "member-9", Namespace: flotillav1.SystemNamespace, Timeout: 300 * time.Millisecond, Member: member, Out: &out})
	if err == nil || !strings.Contains(err.Error(), "member-9") || !strings.Contains(err.Error(), "waited") {
		t.Fatalf("unjoin before the drain: %v, want a timeout naming member-9", err)
	}
	if err := member.Get(ctx, client.ObjectKeyFromObject(d), &appsv1.Deployment{}); err != nil {
		t.Errorf("an unjoin that timed out removed the agent: %v", err)
	}

	// The hub namespace that held member-9's Works, empty once drained.
	workNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flotillav1.ClusterNamespacePrefix + "member-9"}}
	if err := hub.Create(ctx, workNS); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Now the hub drains it (removes its finalizer) while unjoin waits.
	unjoined := make(chan error, 1)
	go func() {
		unjoined <- Unjoin(ctx, hub, UnjoinOptions{Name: "member-9", Namespace: flotillav1.SystemNamespace, Timeout: 60 * time.Second, Member: member, Out: &out})
	}()
	testutil.Consistently(t, "unjoin waiting while the MemberCluster drains", 500*time.Millisecond, func() error {
		select {
		case err := <-unjoined:
			return fmt.Errorf("unjoin returned (%v) while the MemberCluster still existed", err)
		default:
			return nil
		}
	})
	cur := &flotillav1.MemberCluster{}
	if err := hub.Get(ctx, client.ObjectKey{Name: "member-9"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Finalizers = nil
	if err := hub.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-unjoined:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("unjoin did not return after the drain; it printed:\n%s", out.String())
	}
	if err := hub.Get(ctx, client.ObjectKey{Name: "member-9"}, &flotillav1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("MemberCluster member-9 after unjoin: %v, want NotFound", err)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(workNS), workNS); err == nil && workNS.DeletionTimestamp == nil {
		t.Errorf("namespace %s after unjoin: still there, not deleted", workNS.Name)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(mine), &certificatesv1.CertificateSigningRequest{}); !apierrors.IsNotFound(err) {
		t.Errorf("member-9's CSR after unjoin: %v, want NotFound", err)
	}
	for _, csr := range others {
		if err := hub.Get(ctx, client.ObjectKeyFromObject(csr), &certificatesv1.CertificateSigningRequest{}); err != nil {
			t.Errorf("CSR %s of another cluster or signer: %v", csr.Name, err)
		}
	}
	assertNoAgent(t, member, "after unjoin")
	for _, o := range agentState {
		if err := member.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after unjoin: %v, want NotFound", o, o.GetName(), err)
		}
	}
	if err := member.Get(ctx, client.ObjectKeyFromObject(workload), &appsv1.Deployment{}); err != nil {
		t.Errorf("the workload after unjoin: %v (unjoin must leave workloads to the deletion policy)", err)
	}
	if err := hub.Get(ctx, client.ObjectKey{Name: "taken"}, &flotillav1.MemberCluster{}); err != nil {
		t.Errorf("another member after unjoin: %v", err)
	}
}

// setReady marks a MemberCluster Ready, as the hub does when its agent
// heartbeats.
func setReady(t *testing.T, c client.Client, name string) {
	t.Helper()
	mc := &flotillav1.MemberCluster{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
		t.Fatal(err)
	}
	mc.Status.Conditions = []metav1.Condition{{Type: flotillav1.ConditionReady, Status: metav1.ConditionTrue, Reason: flotillav1.ReasonHeartbeating, LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
}

// newCSR is a CertificateSigningRequest for cluster as the hub labels it.
func newCSR(t *testing.T, name, cluster, signer string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cluster}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{flotillav1.LabelCluster: cluster, flotillav1.LabelCertificateRequest: "renew"}},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: signer,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}
