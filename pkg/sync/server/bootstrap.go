package server

import (
	"context"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// Defaults of the limits on the Bootstrap RPCs that need no certificate.
const (
	// DefaultBootstrapRate and DefaultBootstrapBurst limit how often one
	// network address may call Register or Certificate: 50 at once, then
	// 5 per second. A joining agent registers once and then asks for its
	// certificate every second or few, so a handful of agents joining
	// from behind one address (a NAT, or the testbed's loopback) stay
	// below it, while a peer hammering the hub's apiserver through these
	// RPCs does not. (Guessing a token is hopeless anyway: 80 bits.)
	DefaultBootstrapRate  = 5.0
	DefaultBootstrapBurst = 50
	// MaxBootstrapMessageBytes bounds a Register or Certificate request:
	// a certificate request (pki.MaxCSRBytes) and a few labels.
	MaxBootstrapMessageBytes = 64 << 10
	// bootstrapTimeout bounds the hub's work for one unauthenticated RPC.
	bootstrapTimeout = 30 * time.Second
)

// unauthenticatedMethods are the RPCs a peer without a client certificate
// may make: a joining agent has none yet. Everything else, Renew
// included, needs a verified agent certificate.
var unauthenticatedMethods = map[string]bool{
	syncv1.Bootstrap_Register_FullMethodName:    true,
	syncv1.Bootstrap_Certificate_FullMethodName: true,
}

// bootstrapAuth lets a Register or Certificate through without a client
// certificate, bounded: the connection must be TLS, the peer's address
// within its rate (Config.BootstrapRate), the message small, and the
// handler's work within bootstrapTimeout. The connection stays pending
// for the connection guard (it proved no agent certificate), so it is
// closed HandshakeTimeout after it opened, and a flood of them is capped
// by MaxPendingConnections; a joining agent's gRPC client dials again for
// its next RPC. The token (Register) and the unguessable request name
// (Certificate) are what the handler checks.
func (s *Server) bootstrapAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no peer information; the sync server is served only over TLS")
	}
	switch p.AuthInfo.(type) {
	case connAuthInfo, credentials.TLSInfo:
	default:
		return nil, status.Error(codes.Unauthenticated, "connection is not TLS; agents join over TLS, verifying the hub by its CA's hash")
	}
	if ok, wait := s.bootstraps.allow(peerHost(p.Addr), time.Now()); !ok {
		s.log.V(1).Info("refused a bootstrap RPC: over the rate", "method", info.FullMethod, "peer", p.Addr.String())
		return nil, status.Errorf(codes.ResourceExhausted,
			"too many join requests from %s (the hub's --bootstrap-rate); retry in %s", peerHost(p.Addr), wait.Round(time.Millisecond))
	}
	if m, ok := req.(proto.Message); ok {
		if n := proto.Size(m); n > MaxBootstrapMessageBytes {
			return nil, status.Errorf(codes.ResourceExhausted, "request is %d bytes, more than the %d a join request may be", n, MaxBootstrapMessageBytes)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, bootstrapTimeout)
	defer cancel()
	return handler(ctx, req)
}

// peerHost is addr without its port: the rate is per address, not per
// connection.
func peerHost(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
