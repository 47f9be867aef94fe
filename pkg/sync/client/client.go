package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// Defaults for the zero values of Config's tuning fields.
const (
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultInitialBackoff    = 500 * time.Millisecond
	// DefaultMaxBackoff is short because the hub counts a member's
	// heartbeat grace from when it became leader: an agent must be back
	// within the grace after a hub restart (docs/architecture.md, timing
	// budget). Connections refused by a hub that is down or a standby
	// cost little; the jitter spreads them.
	DefaultMaxBackoff       = 5 * time.Second
	DefaultMaxApplyBackoff  = 5 * time.Minute
	DefaultMaxMessageBytes  = 16 << 20
	DefaultKeepaliveTime    = 30 * time.Second
	DefaultKeepaliveTimeout = 10 * time.Second
	DefaultHubHelloTimeout  = 30 * time.Second
)

// Config is what a Client needs. Address, TLS and Applier are required.
type Config struct {
	// Address is the hub's sync endpoint, host:port.
	Address string
	// TLS is the agent's TLS configuration (see pki.ClientTLSConfig): its
	// client certificate names the cluster, RootCAs the hub's CA. The
	// client dials a new connection, and so makes a new handshake, for
	// every stream: a configuration whose GetClientCertificate returns the
	// newest certificate (pki.DynamicClientTLSConfig) presents a renewed
	// one from the next stream on, and an open stream keeps going.
	TLS *tls.Config
	// Cluster is this agent's cluster. Empty means the one named by the
	// client certificate in TLS; when set, it must match that one. The hub
	// goes by the certificate only; the client uses the name to check that
	// what the hub sends is for its namespace.
	Cluster string
	// Applier applies what the hub sends.
	Applier Applier
	// Identity checks each hub's fleet id and cluster name against the
	// member's record before anything is applied. nil accepts every hub
	// that names this agent's cluster (tests only: an agent must record
	// which fleet it serves).
	Identity Identity
	// Resources returns the member's resource summary for hellos and
	// heartbeats; nil sends none.
	Resources func(ctx context.Context) (*v1alpha1.ResourceSummary, error)
	// AgentVersion, Instance and KubernetesVersion describe this agent in
	// its hello.
	AgentVersion      string
	Instance          string
	KubernetesVersion string
	// Logger logs connection events; the zero value discards.
	Logger logr.Logger

	// HeartbeatInterval is how often a heartbeat is sent. Zero means
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// InitialBackoff and MaxBackoff bound the wait between connection
	// attempts, which doubles after each failure, with jitter. Zero means
	// the defaults.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// MaxApplyBackoff caps the wait between retries of a failed Apply or
	// Delete. Zero means DefaultMaxApplyBackoff.
	MaxApplyBackoff time.Duration
	// HubHelloTimeout is how long the client waits for the hub's first
	// message. Zero means DefaultHubHelloTimeout.
	HubHelloTimeout time.Duration
	// MaxMessageBytes bounds every message, both ways. Zero means
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// InitialWindowSize, when set, fixes the HTTP/2 flow-control window
	// (per stream and per connection) and so bounds how far the hub can
	// send ahead of a busy applier; at least 64 KiB. Zero keeps gRPC's
	// default, which grows the window with the measured bandwidth.
	InitialWindowSize int32
	// KeepaliveTime and KeepaliveTimeout: the client pings a hub that has
	// been quiet for KeepaliveTime and reconnects when no answer comes
	// within KeepaliveTimeout. KeepaliveTime must not be below the hub's
	// MinPingInterval. Zero means the defaults.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
}

func (c *Config) defaults() error {
	if c.Address == "" || c.TLS == nil || c.Applier == nil {
		return errors.New("sync client: Config.Address, Config.TLS and Config.Applier are required")
	}
	certCluster, err := clusterFromTLS(c.TLS)
	switch {
	case err != nil && c.Cluster == "":
		return fmt.Errorf("sync client: cannot tell this agent's cluster: %w", err)
	case err == nil && c.Cluster != "" && c.Cluster != certCluster:
		return fmt.Errorf("sync client: Config.Cluster is %q but the client certificate is for cluster %q", c.Cluster, certCluster)
	case c.Cluster == "":
		c.Cluster = certCluster
	}
	if err := pki.ValidateClusterName(c.Cluster); err != nil {
		return fmt.Errorf("sync client: %w", err)
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.InitialBackoff)
	if c.MaxApplyBackoff <= 0 {
		c.MaxApplyBackoff = DefaultMaxApplyBackoff
	}
	c.MaxApplyBackoff = max(c.MaxApplyBackoff, c.InitialBackoff)
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.KeepaliveTime <= 0 {
		c.KeepaliveTime = DefaultKeepaliveTime
	}
	if c.HubHelloTimeout <= 0 {
		c.HubHelloTimeout = DefaultHubHelloTimeout
	}
	if c.KeepaliveTimeout <= 0 {
		c.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	return nil
}

// clusterFromTLS is the cluster the configuration's client certificate
// names: the first of Certificates, else the one GetClientCertificate
// returns now (pki.DynamicClientTLSConfig). A configuration whose
// certificate comes later (an agent that is still joining) names none, so
// Config.Cluster must say it.
func clusterFromTLS(cfg *tls.Config) (string, error) {
	var cert *tls.Certificate
	switch {
	case len(cfg.Certificates) > 0:
		cert = &cfg.Certificates[0]
	case cfg.GetClientCertificate != nil:
		c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			return "", fmt.Errorf("getting the client certificate: %w", err)
		}
		cert = c
	}
	if cert == nil || len(cert.Certificate) == 0 {
		return "", errors.New("the TLS configuration has no client certificate")
	}
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return "", fmt.Errorf("parsing the client certificate: %w", err)
		}
	}
	return pki.ClusterFromCertificate(leaf)
}

// Client is the agent side of the sync protocol. Build it with New, start
// it with Run, and feed it status with ReportStatus.
type Client struct {
	cfg    Config
	log    logr.Logger
	status *statusQueue

	connects     atomic.Int64
	snapshots    atomic.Int64
	resumes      atomic.Int64
	connected    atomic.Bool
	snapshotDone atomic.Bool
	pruneBlocked atomic.Bool
	// refusal is why the agent refused the last hub it reached; nil once
	// a hub is accepted.
	refusal atomic.Pointer[string]

	runMu sync.Mutex // Run may not be called twice at once.
}

// New builds a Client. It does not connect; call Run.
func New(cfg Config) (*Client, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Client{
		cfg:    cfg,
		log:    cfg.Logger.WithName("sync-client").WithValues("cluster", cfg.Cluster),
		status: newStatusQueue(),
	}, nil
}

// Cluster is the cluster this client speaks for.
func (c *Client) Cluster() string { return c.cfg.Cluster }

// State describes the client's connection, for readiness probes and tests.
type State struct {
	// Connected says a stream is open now.
	Connected bool
	// SnapshotComplete says the current stream delivered its snapshot.
	SnapshotComplete bool
	// Connects counts the streams opened since the client was built.
	Connects int64
	// Snapshots and Resumes count the streams whose snapshot completed,
	// by what the agent held when it said hello: nothing (a full
	// snapshot: the hub sent every Work) or some Works (a resume: the hub
	// sent only what is new or changed to them).
	Snapshots, Resumes int64
	// PendingReports is the number of Works whose latest status report
	// waits to be sent to the hub.
	PendingReports int
	// PruneBlocked says the deletion brake holds the current snapshot's
	// prune, waiting for an admin's confirmation.
	PruneBlocked bool
	// Refusal is why the agent refused the last hub it reached: it serves
	// another fleet or cluster name. Empty once a hub is accepted.
	Refusal string
}

// State returns the client's connection state.
func (c *Client) State() State {
	st := State{
		Connected: c.connected.Load(), SnapshotComplete: c.snapshotDone.Load(), Connects: c.connects.Load(), PruneBlocked: c.pruneBlocked.Load(),
		Snapshots: c.snapshots.Load(), Resumes: c.resumes.Load(), PendingReports: c.status.pendingCount(),
	}
	if r := c.refusal.Load(); r != nil {
		st.Refusal = *r
	}
	return st
}

// ReportStatus queues status for Work name. It never blocks: reports are
// coalesced per Work (the latest wins) and sent as the stream allows; the
// latest report of every Work is sent again after a reconnect, so none is
// lost to a dropped connection. The client keeps st; do not modify it
// afterwards.
func (c *Client) ReportStatus(name string, st *v1alpha1.WorkStatus) {
	c.status.report(name, st)
}

// Run connects to the hub and keeps connecting, with exponential backoff
// and jitter, until ctx ends; then it returns nil, once every goroutine it
// started has ended.
func (c *Client) Run(ctx context.Context) error {
	if !c.runMu.TryLock() {
		return errors.New("sync client: Run is already running")
	}
	defer c.runMu.Unlock()

	attempt, refusals := 0, 0
	for {
		healthy, err := c.runStream(ctx)
		c.connected.Store(false)
		c.snapshotDone.Store(false)
		c.pruneBlocked.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if status.Code(err) == codes.PermissionDenied {
			if s, ok := c.cfg.Applier.(Stander); ok {
				s.StandDown(ctx)
			}
		}
		if healthy {
			// The stream worked; a drop after that is news, not a pattern.
			attempt = 0
		}
		delay := c.nextDelay(err, &attempt)
		c.logStreamEnd(err, healthy, delay, &refusals)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// logStreamEnd says why the stream ended. healthy is whether it had
// worked: the hub authenticates a stream when it opens, so one that worked
// and then ends UNAUTHENTICATED ended with its certificate (the hub cuts a
// stream at its certificate's NotAfter). After a renewal that is the
// routine move to the new certificate, not a refusal; if the certificate
// was not renewed, the next attempt is refused and says so loudly.
//
// Refused connections come every half second while nothing listens (see
// nextDelay): *refusals counts them in a row, and only the first of a run
// and every refusalLogEvery-th are logged at the default level.
func (c *Client) logStreamEnd(err error, healthy bool, delay time.Duration, refusals *int) {
	if !refused(err) {
		*refusals = 0
	} else {
		*refusals++
		if *refusals > 1 && *refusals%refusalLogEvery != 0 {
			c.log.V(1).Info("connection refused again; reconnecting", "refusals", *refusals, "reason", err, "retryIn", delay)
			return
		}
		if *refusals > 1 {
			c.log.Info("connection refused again; reconnecting (one in "+fmt.Sprint(refusalLogEvery)+" refusals is logged)", "refusals", *refusals, "reason", err, "retryIn", delay)
			return
		}
	}
	var mismatch *FleetMismatchError
	if errors.As(err, &mismatch) {
		// Loud, and on every attempt: this member applies nothing from
		// this hub until a person decides.
		c.log.Error(err, "refused the hub: this agent serves another fleet or cluster; it applied and deleted nothing. To move this member to that hub on purpose, start the agent with --accept-fleet-id or annotate its identity ConfigMap with "+v1alpha1.AnnotationAcceptFleetID,
			"hubFleetID", mismatch.FleetID, "hubCluster", mismatch.Cluster, "recordedFleetID", mismatch.RecordedFleetID, "recordedCluster", mismatch.RecordedCluster, "retryIn", delay)
		return
	}
	code := status.Code(err)
	switch {
	case healthy && code == codes.Unauthenticated:
		c.log.Info("the hub ended the stream at its certificate's expiry; reconnecting with the current certificate", "reason", err, "retryIn", delay)
	case code == codes.Unauthenticated || code == codes.PermissionDenied:
		// Only a person can fix these; say exactly what the hub said.
		c.log.Error(err, "the hub refused this agent; retrying in case it is fixed", "code", code.String(), "retryIn", delay)
	default:
		c.log.Info("sync stream ended; reconnecting", "code", code.String(), "reason", err, "retryIn", delay)
	}
}

// refusalLogEvery is how many refused connections in a row make one log
// line at the default level (some 7 s apart at the initial backoff).
const refusalLogEvery = 20

// nextDelay is the wait before the next connection attempt after a stream
// that ended with err, the attempt-th failure in a row; it counts the
// failure in *attempt, except a refused connection. Nothing listened
// where that attempt went, which costs the hub nothing, and behind a
// Service that spreads connections over the hub's replicas (the chart
// runs two; only the leader serves streams) the next attempt may reach the
// leader: so a refused attempt is retried at the initial backoff, never
// growing, and an agent finds a new leader within the heartbeat grace
// however often the standby answered first (docs/architecture.md, timing
// budget). Waits that grew to MaxBackoff let the standby refuse an agent
// past the grace after a hub restart on kind, and its replicas failed
// over.
func (c *Client) nextDelay(err error, attempt *int) time.Duration {
	if refused(err) {
		return backoff(0, c.cfg.InitialBackoff, c.cfg.MaxBackoff)
	}
	d := backoff(*attempt, c.cfg.InitialBackoff, c.cfg.MaxBackoff)
	*attempt++
	return d
}

// refused says err is a connection attempt that nothing accepted (TCP
// connection refused: no process listens there). gRPC gives the dial's
// error only as the text of an Unavailable status.
func refused(err error) bool {
	return status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), syscall.ECONNREFUSED.Error())
}

// backoff is the wait before connection attempt n+1: initial doubled n
// times, capped at max, then scaled by a random factor in [0.5, 1] so
// agents cut off together (a hub restart) do not come back together.
func backoff(attempt int, initial, max time.Duration) time.Duration {
	d := initial
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d/2 + rand.N(d/2+1)
}

// dial opens a fresh connection for one stream. A connection per stream
// keeps the client's own backoff the only one in play and guarantees a
// new TLS handshake (and so the current certificate) on every attempt.
func (c *Client) dial() (*grpc.ClientConn, error) {
	var opts []grpc.DialOption
	if c.cfg.InitialWindowSize > 0 {
		opts = append(opts,
			grpc.WithInitialWindowSize(c.cfg.InitialWindowSize),
			grpc.WithInitialConnWindowSize(c.cfg.InitialWindowSize))
	}
	return grpc.NewClient(c.cfg.Address, append(opts,
		grpc.WithTransportCredentials(credentials.NewTLS(c.cfg.TLS)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                c.cfg.KeepaliveTime,
			Timeout:             c.cfg.KeepaliveTimeout,
			PermitWithoutStream: true,
		}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(c.cfg.MaxMessageBytes),
			grpc.MaxCallSendMsgSize(c.cfg.MaxMessageBytes),
		),
	)...)
}
