package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// Identity is what an agent's client certificate proved. The server's
// interceptors put it in the context of every RPC they let through;
// handlers read it with IdentityFromContext and never from a message.
type Identity struct {
	// Cluster is the cluster the certificate's URI SAN names.
	Cluster string
	// URI is that SAN, flotilla://cluster/<name>.
	URI string
	// Fingerprint is the SHA-256 of the leaf certificate's DER, in
	// lower-case hex: what MemberCluster.spec.revokedCertificates lists.
	Fingerprint string
	// NotAfter is when the first certificate of the verified chain
	// expires; every RPC the identity authorised ends then.
	NotAfter time.Time
	// MemberUID is the MemberCluster UID a join-issued certificate
	// carries (pki.AgentCertificateUID), "" for one made by flotilla-pki.
	MemberUID string
}

type identityKey struct{}

// IdentityFromContext returns the identity the interceptors proved for
// the RPC whose context ctx is.
func IdentityFromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Fingerprint is the SHA-256 of cert's DER in lower-case hex, the form
// MemberCluster.spec.revokedCertificates uses.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// certificateHint tells a refused peer what it should present.
const certificateHint = "an agent must present its cluster's client certificate issued by the hub's agent CA (flotilla-pki agent <cluster>)"

// authenticate proves the peer of ctx an agent: a client certificate
// that chains to the agent CA for client authentication, names one
// cluster, has not expired and is not revoked for that cluster. The TLS
// handshake only asks for a certificate (see pki.ServerTLSConfig), so a
// stranger gets here and is told with a status why it is refused.
func (s *Server) authenticate(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, status.Error(codes.Unauthenticated, "no peer information; the sync server is served only over TLS")
	}
	var tlsInfo credentials.TLSInfo
	switch ai := p.AuthInfo.(type) {
	case connAuthInfo:
		tlsInfo = ai.TLSInfo
	case credentials.TLSInfo:
		tlsInfo = ai
	default:
		return Identity{}, status.Error(codes.Unauthenticated, "connection is not TLS; agents must connect with mutual TLS")
	}
	chain := tlsInfo.State.PeerCertificates
	if len(chain) == 0 {
		return Identity{}, status.Error(codes.Unauthenticated, "no client certificate: "+certificateHint)
	}
	now := time.Now()
	cluster, notAfter, err := pki.VerifyAgentChain(chain, s.cfg.TLS.ClientCAs, now)
	if err != nil {
		return Identity{}, status.Errorf(codes.Unauthenticated, "%v; %s", err, certificateHint)
	}
	id := Identity{
		Cluster:     cluster,
		URI:         pki.ClusterURI(cluster).String(),
		Fingerprint: Fingerprint(chain[0]),
		NotAfter:    notAfter,
		MemberUID:   pki.AgentCertificateUID(chain[0]),
	}
	if err := s.checkRevoked(ctx, id); err != nil {
		return Identity{}, err
	}
	if err := s.checkAdmitted(ctx, id); err != nil {
		return Identity{}, err
	}
	// The connection proved an agent certificate: it no longer counts
	// against the cap on connections that have not.
	if ai, ok := p.AuthInfo.(connAuthInfo); ok && ai.conn != nil {
		ai.conn.authenticated()
	}
	return id, nil
}

// checkRevoked refuses id when its cluster's MemberCluster lists its
// fingerprint in spec.revokedCertificates.
func (s *Server) checkRevoked(ctx context.Context, id Identity) error {
	rc, ok := s.cfg.Clusters.(RevocationChecker)
	if !ok {
		return nil
	}
	revoked, err := rc.Revoked(ctx, id.Cluster, id.Fingerprint)
	if err != nil {
		return status.Errorf(codes.Unavailable, "could not check whether the certificate of cluster %q is revoked: %v", id.Cluster, err)
	}
	if revoked {
		return errRevoked(id)
	}
	return nil
}

// checkAdmitted refuses id when the registry's AdmissionChecker does not
// admit its member (not Accepted, or re-created since the certificate was
// issued).
func (s *Server) checkAdmitted(ctx context.Context, id Identity) error {
	ac, ok := s.cfg.Clusters.(AdmissionChecker)
	if !ok {
		return nil
	}
	admitted, why, err := ac.Admitted(ctx, id.Cluster, id.MemberUID)
	if err != nil {
		return status.Errorf(codes.Unavailable, "could not check whether cluster %q is admitted to the fleet: %v", id.Cluster, err)
	}
	if !admitted {
		return status.Error(codes.PermissionDenied, why)
	}
	return nil
}

func errRevoked(id Identity) error {
	return status.Errorf(codes.PermissionDenied,
		"client certificate %s of cluster %q is revoked (MemberCluster %q lists it in spec.revokedCertificates): issue the agent a new certificate (flotilla-pki agent %s)",
		id.Fingerprint, id.Cluster, id.Cluster, id.Cluster)
}

func errExpired(id Identity) error {
	return status.Errorf(codes.Unauthenticated,
		"client certificate of cluster %q expired at %s: give the agent a new certificate (flotilla-pki agent %s); it presents it when it reconnects",
		id.Cluster, id.NotAfter.UTC().Format(time.RFC3339), id.Cluster)
}

// unaryAuth authenticates every unary RPC (the health service's Check,
// Bootstrap.Renew): only agents may talk to the sync server, except for
// the two Bootstrap RPCs a joining agent makes before it has a
// certificate (see bootstrapAuth).
func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.cfg.Bootstrap != nil && unauthenticatedMethods[info.FullMethod] {
		return s.bootstrapAuth(ctx, req, info, handler)
	}
	id, err := s.authenticate(ctx)
	if err != nil {
		s.log.V(1).Info("refused an RPC", "method", info.FullMethod, "reason", err)
		return nil, err
	}
	ctx, cancel := context.WithDeadlineCause(context.WithValue(ctx, identityKey{}, id), id.NotAfter, errExpired(id))
	defer cancel()
	return handler(ctx, req)
}

// streamAuth authenticates every streaming RPC (Sync.Connect and the
// health service's Watch), puts the identity in the stream's context and
// ends the stream when the certificate expires: the context's deadline
// is NotAfter, with the status to end with as its cause.
func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	id, err := s.authenticate(ss.Context())
	if err != nil {
		if info.FullMethod == syncv1.Sync_Connect_FullMethodName {
			s.log.Info("refused sync stream", "reason", err)
			s.metrics.streamsClosed.WithLabelValues(status.Code(err).String()).Inc()
		} else {
			s.log.V(1).Info("refused an RPC", "method", info.FullMethod, "reason", err)
		}
		return err
	}
	ctx, cancel := context.WithDeadlineCause(context.WithValue(ss.Context(), identityKey{}, id), id.NotAfter, errExpired(id))
	defer cancel()
	return handler(srv, &authedStream{ServerStream: ss, ctx: ctx})
}

// authedStream is a ServerStream whose context carries the identity.
type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authedStream) Context() context.Context { return a.ctx }
