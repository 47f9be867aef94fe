// Package jointest is a small hub for the agent's join and rotation
// tests: a gRPC server on loopback that serves syncv1.Bootstrap, signing
// certificate requests with a pkg/pki CA, and a minimal syncv1.Sync that
// opens streams (hello, an empty snapshot) and records the client
// certificate each one was opened with. The real hub's Bootstrap service
// lives in hub/; this one lets the agent side be tested on its own.
package jointest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// FleetID is the fleet id the hub's Sync says hello with.
const FleetID = "jointest-fleet"

// Options configure a Hub.
type Options struct {
	// Token is the one bootstrap token Register accepts.
	Token string
	// AutoApprove issues certificates without Approve.
	AutoApprove bool
	// Lifetime of the certificates it issues; zero means an hour.
	Lifetime time.Duration
}

// Hub is the test hub. Its methods are safe for concurrent use.
type Hub struct {
	syncv1.UnimplementedBootstrapServer
	syncv1.UnimplementedSyncServer

	// Addr is the loopback address it listens on.
	Addr string
	// CA signs the serving certificate and the agents' certificates.
	CA *pki.KeyPair
	// CAHash is the pin of CA (bootstrap.CAHash).
	CAHash string

	opts Options
	srv  *grpc.Server
	done chan struct{}

	mu            sync.Mutex
	requests      map[string]*request
	order         []string
	registers     int
	renews        int
	denyRenewals  string
	streams       []*Stream
	closeStreams  chan struct{}
	registeredCSR []*x509.CertificateRequest
}

type request struct {
	kind    string // register or renew
	cluster string
	csr     *x509.CertificateRequest
	state   syncv1.CertificateResponse_State
	message string
	cert    []byte
}

// Stream is one Sync stream the hub served.
type Stream struct {
	// Serial is the serial number of the client certificate that opened
	// it, hexadecimal.
	Serial  string
	Cluster string
	closed  chan struct{}
}

// Closed says whether the stream has ended.
func (s *Stream) Closed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Start serves a new Hub with a new CA on loopback until the test ends.
func Start(t testing.TB, opts Options) *Hub {
	t.Helper()
	ca, err := pki.NewCA("jointest-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	return StartWithCA(t, opts, ca)
}

// StartWithCA is Start with a given CA.
func StartWithCA(t testing.TB, opts Options, ca *pki.KeyPair) *Hub {
	t.Helper()
	if opts.Lifetime == 0 {
		opts.Lifetime = time.Hour
	}
	serving, err := ca.IssueHub(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The chain the hub sends ends with its CA, which a joining agent
	// finds by the pinned hash (bootstrap.VerifyPinned).
	cert := tls.Certificate{Certificate: [][]byte{serving.Cert.Raw, ca.Cert.Raw}, PrivateKey: serving.Key, Leaf: serving.Cert}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}
	h := &Hub{CA: ca, CAHash: bootstrap.CAHash(ca.Cert), opts: opts, requests: map[string]*request{}, closeStreams: make(chan struct{}), done: make(chan struct{})}
	h.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}))
	syncv1.RegisterBootstrapServer(h.srv, h)
	syncv1.RegisterSyncServer(h.srv, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Addr = lis.Addr().String()
	go func() {
		defer close(h.done)
		_ = h.srv.Serve(lis)
	}()
	t.Cleanup(h.Stop)
	return h
}

// Stop stops the hub and waits for it.
func (h *Hub) Stop() {
	h.srv.Stop()
	<-h.done
}

// Register implements syncv1.BootstrapServer.
func (h *Hub) Register(_ context.Context, req *syncv1.RegisterRequest) (*syncv1.RegisterResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.registers++
	if req.GetToken() != h.opts.Token {
		return nil, status.Errorf(codes.Unauthenticated, "unknown bootstrap token")
	}
	csr, err := parseCSR(req.GetCsr(), req.GetClusterName())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	h.registeredCSR = append(h.registeredCSR, csr)
	return &syncv1.RegisterResponse{Request: h.newRequest("register", req.GetClusterName(), csr, h.opts.AutoApprove), Accepted: h.opts.AutoApprove}, nil
}

// Renew implements syncv1.BootstrapServer: the caller's certificate names
// the cluster.
func (h *Hub) Renew(ctx context.Context, req *syncv1.RenewRequest) (*syncv1.RegisterResponse, error) {
	cluster, _, err := h.peerCluster(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renews++
	if h.denyRenewals != "" {
		return nil, status.Error(codes.PermissionDenied, h.denyRenewals)
	}
	csr, err := parseCSR(req.GetCsr(), cluster)
	if err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return &syncv1.RegisterResponse{Request: h.newRequest("renew", cluster, csr, true), Accepted: true}, nil
}

// Certificate implements syncv1.BootstrapServer.
func (h *Hub) Certificate(_ context.Context, req *syncv1.CertificateRequest) (*syncv1.CertificateResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.requests[req.GetRequest()]
	if r == nil {
		return nil, status.Errorf(codes.NotFound, "no certificate request %q", req.GetRequest())
	}
	if r.state == syncv1.CertificateResponse_ISSUED && r.cert == nil {
		der, err := h.sign(r)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		r.cert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	return &syncv1.CertificateResponse{State: r.state, Certificate: r.cert, Ca: h.CA.CertPEM(), Message: r.message}, nil
}

// newRequest records a request; the caller holds mu.
func (h *Hub) newRequest(kind, cluster string, csr *x509.CertificateRequest, approved bool) string {
	name := fmt.Sprintf("%s-%s-%d", cluster, kind, len(h.order)+1)
	r := &request{kind: kind, cluster: cluster, csr: csr, state: syncv1.CertificateResponse_PENDING, message: "waiting for approval"}
	if approved {
		r.state, r.message = syncv1.CertificateResponse_ISSUED, ""
	}
	h.requests[name] = r
	h.order = append(h.order, name)
	return name
}

func (h *Hub) sign(r *request) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "flotilla-agent:" + r.cluster, Organization: []string{"flotilla"}},
		NotBefore:    now.Add(-time.Second),
		NotAfter:     now.Add(h.opts.Lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         r.csr.URIs,
	}
	return x509.CreateCertificate(rand.Reader, tmpl, h.CA.Cert, r.csr.PublicKey, h.CA.Key)
}

// parseCSR checks a PEM PKCS #10 request: signed by its key, with exactly
// the URI SAN of cluster.
func parseCSR(data []byte, cluster string) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("csr: no CERTIFICATE REQUEST PEM block")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("csr: %w", err)
	}
	if len(csr.URIs) != 1 || csr.URIs[0].String() != pki.ClusterURI(cluster).String() || len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses) != 0 {
		return nil, fmt.Errorf("csr must carry exactly the URI SAN %s", pki.ClusterURI(cluster))
	}
	return csr, nil
}

// peerCluster verifies the caller's client certificate against the CA.
func (h *Hub) peerCluster(ctx context.Context) (cluster, serial string, err error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", "", fmt.Errorf("no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", "", fmt.Errorf("not TLS")
	}
	roots := x509.NewCertPool()
	roots.AddCert(h.CA.Cert)
	chain := info.State.PeerCertificates
	cluster, err = pki.VerifyAgent(chain, roots, time.Now())
	if err != nil {
		return "", "", err
	}
	return cluster, chain[0].SerialNumber.Text(16), nil
}

// Connect implements syncv1.SyncServer: hello, an empty snapshot, then it
// reads (heartbeats, status) until the agent or CloseStreams ends it.
func (h *Hub) Connect(stream syncv1.Sync_ConnectServer) error {
	cluster, serial, err := h.peerCluster(stream.Context())
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	s := &Stream{Serial: serial, Cluster: cluster, closed: make(chan struct{})}
	h.mu.Lock()
	h.streams = append(h.streams, s)
	epoch := uint64(len(h.streams))
	closeAll := h.closeStreams
	h.mu.Unlock()
	defer close(s.closed)
	if err := stream.Send(&syncv1.HubMessage{Kind: &syncv1.HubMessage_HubHello{HubHello: &syncv1.HubHello{FleetId: FleetID, ClusterName: cluster, Epoch: epoch}}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.Send(&syncv1.HubMessage{Kind: &syncv1.HubMessage_SnapshotComplete{SnapshotComplete: &syncv1.SnapshotComplete{}}}); err != nil {
		return err
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
	select {
	case <-recvErr:
		return nil
	case <-closeAll:
		return status.Error(codes.Unavailable, "jointest hub closed the stream")
	}
}

// Approve issues request's certificate.
func (h *Hub) Approve(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.requests[name]; r != nil {
		r.state, r.message = syncv1.CertificateResponse_ISSUED, ""
	}
}

// Deny denies request with message.
func (h *Hub) Deny(name, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.requests[name]; r != nil {
		r.state, r.message = syncv1.CertificateResponse_DENIED, message
	}
}

// Forget drops request, as a hub whose CSR was garbage-collected would.
func (h *Hub) Forget(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.requests, name)
}

// DenyRenewals makes Renew answer PERMISSION_DENIED with message; ""
// renews again.
func (h *Hub) DenyRenewals(message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.denyRenewals = message
}

// CloseStreams ends every open Sync stream.
func (h *Hub) CloseStreams() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.closeStreams)
	h.closeStreams = make(chan struct{})
}

// Counts are the Register and Renew calls the hub received.
func (h *Hub) Counts() (registers, renews int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.registers, h.renews
}

// Requests are the names of the requests the hub created, oldest first.
func (h *Hub) Requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.order...)
}

// RegisteredKeys are the public keys of the CSRs Register accepted.
func (h *Hub) RegisteredKeys() []any {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]any, 0, len(h.registeredCSR))
	for _, c := range h.registeredCSR {
		out = append(out, c.PublicKey)
	}
	return out
}

// Streams are the Sync streams served, oldest first.
func (h *Hub) Streams() []*Stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Stream(nil), h.streams...)
}
