package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ClusterChanged tells the server that cluster's MemberCluster changed or
// was deleted. The hub calls it from its MemberCluster informer's event
// handlers, after the cache it reads through Config.Clusters has the
// change. The server checks cluster's stream again and ends it when the
// MemberCluster is gone (PERMISSION_DENIED) or now lists the stream's
// certificate in spec.revokedCertificates, or is no longer admitted (see
// AdmissionChecker: not Accepted, re-created) (PERMISSION_DENIED). It does not
// wait for the stream to end, and never blocks on an agent. A cluster whose
// MemberCluster is gone loses its per-cluster metric series.
func (s *Server) ClusterChanged(cluster string) {
	s.mu.RLock()
	sess := s.sessions[cluster]
	s.mu.RUnlock()
	if sess != nil {
		sess.recheck()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if known, err := s.cfg.Clusters.ClusterKnown(ctx, cluster); err == nil && !known {
		s.metrics.forgetCluster(cluster)
	}
}

// recheck ends the stream when its cluster is no longer registered, its
// certificate is revoked or its member is no longer admitted. A registry
// that cannot answer ends nothing: a hub-side failure must not disconnect
// the fleet; the next change, or the agent's next connect, asks again.
func (sess *session) recheck() {
	s := sess.srv
	known, err := s.cfg.Clusters.ClusterKnown(sess.ctx, sess.cluster)
	if err == nil && !known {
		sess.end(status.Errorf(codes.PermissionDenied,
			"MemberCluster %q was deleted from the hub: this agent is no longer served; create it again to reconnect", sess.cluster))
		s.metrics.forgetCluster(sess.cluster)
		return
	}
	if err := s.checkRevoked(sess.ctx, sess.ident); status.Code(err) == codes.PermissionDenied {
		sess.end(err)
		return
	}
	if err := s.checkAdmitted(sess.ctx, sess.ident); status.Code(err) == codes.PermissionDenied {
		sess.end(err)
	}
}

// end ends the stream with err, unless it has ended already.
func (sess *session) end(err error) {
	if sess.ctx.Err() != nil {
		return
	}
	sess.log.Info("ending the agent's stream", "reason", err)
	sess.cancel(err)
}
