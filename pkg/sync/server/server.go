package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/flotilla-dev/flotilla/pkg/sync/internal/wire"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// Defaults for the zero values of Config's tuning fields.
const (
	DefaultMaxQueueDepth    = 10_000
	DefaultMaxMessageBytes  = 16 << 20
	DefaultHelloTimeout     = 30 * time.Second
	DefaultSyncPollInterval = 100 * time.Millisecond
	DefaultKeepaliveTime    = 30 * time.Second
	DefaultKeepaliveTimeout = 10 * time.Second
	// DefaultMinPingInterval is the shortest keepalive ping interval the
	// server tolerates from agents; an agent pinging more often is sent
	// GOAWAY (too_many_pings). The agent's default is 30s.
	DefaultMinPingInterval = 10 * time.Second

	// DefaultDeleteBurst and DefaultDeleteRate pace the WorkDeletes sent
	// to each member's agent: 50 at once, then 2 per second. Normal use
	// never waits: deleting a MyApp sends one delete per member, and the
	// failover or failback of up to 50 apps from one member goes out at
	// once; even a namespace of 200 MyApps deleted together is gone from a
	// member within about 75 seconds. A hub bug that marks and deletes
	// every Work, though, empties a member of 2,000 Works over some 16
	// minutes instead of in one burst, while flotilla_sync_deletions_pending
	// shows the backlog: time for an alert to reach someone who stops the
	// hub. Deliberate mass deletions (tearing down a whole environment)
	// go at the same pace; raise the hub's --member-delete-rate for them.
	DefaultDeleteBurst = 50
	DefaultDeleteRate  = 2.0
)

// Defaults for the connection hygiene fields of Config.
const (
	// DefaultMaxStreamsPerConnection: an agent needs one Sync stream and
	// at most a health check beside it on a connection (it dials a new
	// connection for every stream), so 4 leaves room and stops a peer
	// from multiplying handlers over one handshake.
	DefaultMaxStreamsPerConnection = 4
	// DefaultMaxConnectionIdle closes a connection that has had no RPC
	// for 5 minutes: an agent's connection always carries its Sync
	// stream, so only leftovers (a health probe's, an agent's whose
	// stream ended) are idle.
	DefaultMaxConnectionIdle = 5 * time.Minute
	// DefaultMaxConnectionAge and DefaultMaxConnectionAgeGrace: after a
	// day (gRPC adds up to 10% jitter, so a fleet does not come back at
	// once) the hub sends GOAWAY, which only stops new RPCs on the
	// connection; the Sync stream on it goes on for the grace, 10 minutes,
	// and then ends with UNAVAILABLE. The agent reconnects at once (a
	// stream that worked resets its backoff), on a new connection with a
	// new TLS handshake, so the certificate is verified again against the
	// CAs the hub trusts now, and its hello lists what it holds, so the
	// snapshot sends only what changed: a daily resync that costs little
	// and bounds how long one handshake is trusted. Expiry, revocation
	// and deletion of the MemberCluster end a stream at once on their
	// own; the age is not what enforces them.
	DefaultMaxConnectionAge      = 24 * time.Hour
	DefaultMaxConnectionAgeGrace = 10 * time.Minute
	// DefaultHandshakeTimeout bounds the TLS handshake, and how long a
	// connection may stay without proving an agent certificate in an RPC
	// (see connGuard): an agent does both in milliseconds.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxPendingConnections bounds the connections that have not
	// proved an agent certificate (see connGuard). A whole fleet
	// reconnecting after a hub restart passes through this in
	// milliseconds per agent, spread by the agents' jittered backoff.
	DefaultMaxPendingConnections = 256
)

// Defaults of the limits on what one member's agent can make the hub do
// (see pkg/sync, Bounded input).
const (
	// DefaultMaxRecvMessageBytes bounds each message from an agent. The
	// largest an honest agent sends is its hello, about 100 bytes per Work
	// it holds, so 1 MiB serves members of some 10,000 Works; a status
	// report, clamped to a few kilobytes, is far smaller. Messages to
	// agents keep MaxMessageBytes: they carry whole Works.
	DefaultMaxRecvMessageBytes = 1 << 20
	// DefaultStatusRate and DefaultStatusBurst pace the status reports
	// the hub takes from each member: 1,000 at once (a reconnect re-sends
	// the status of every Work, and a member of up to 1,000 Works passes
	// at once), then 50 per second; more wait, coalesced per Work, and
	// arrive late rather than use up the hub's apiserver budget, which
	// all members share.
	DefaultStatusRate  = 50.0
	DefaultStatusBurst = 1000
	// DefaultStatusBacklogBytes bounds, per stream, the reports waiting
	// for DefaultStatusRate (their wire size).
	DefaultStatusBacklogBytes = 8 << 20
	// DefaultConnectRate and DefaultConnectBurst limit how often one
	// cluster may open a stream: 10 at once, then one per second. The
	// agent backs off from 0.5 to 5 seconds between attempts, so an agent
	// that keeps failing settles below the rate; one that reconnects in
	// a tight loop is refused with RESOURCE_EXHAUSTED.
	DefaultConnectRate  = 1.0
	DefaultConnectBurst = 10
)

// Config is what a Server needs. Works, Clusters and TLS are required.
type Config struct {
	// FleetID is the hub's persistent identity, sent to every agent in
	// HubHello (see pkg/sync). It may be set later with SetFleetID; until
	// one is set, streams are refused with UNAVAILABLE.
	FleetID string

	// Works is the source of each cluster's desired Works.
	Works WorkSource
	// Clusters says which clusters exist.
	Clusters ClusterRegistry
	// Status receives agents' status reports; nil drops them.
	Status StatusSink
	// Deletions hears which Works agents are done with; nil: nobody.
	Deletions DeletionSink
	// Agents receives connect, disconnect and heartbeat events; nil drops
	// them.
	Agents AgentSink
	// Bootstrap, when set, is served beside Sync: the hub's join service
	// (Register, Renew, Certificate). Register and Certificate need no
	// client certificate and are limited by BootstrapRate and
	// BootstrapBurst per peer address; Renew needs one like Sync does.
	// nil: the server serves no Bootstrap (a hub without a CA key).
	Bootstrap syncv1.BootstrapServer

	// TLS is the server's TLS configuration (see pki.ServerTLSConfig). Its
	// ClientCAs are the CAs whose agent certificates are accepted: the
	// server verifies every client chain against them itself, whatever
	// ClientAuth says, so it can refuse strangers with a clear status.
	TLS *tls.Config

	// Registerer is where the server's metrics are registered; nil
	// registers them nowhere.
	Registerer prometheus.Registerer
	// Logger logs stream lifecycle events; the zero value discards.
	Logger logr.Logger

	// MaxQueueDepth bounds each agent's queue of changed Works (see
	// queue). Zero means DefaultMaxQueueDepth.
	MaxQueueDepth int
	// MaxMessageBytes bounds every message to agents. Zero means
	// DefaultMaxMessageBytes. (Messages from agents: MaxRecvMessageBytes.)
	MaxMessageBytes int
	// HelloTimeout is how long a new stream may take to send its hello.
	// Zero means DefaultHelloTimeout.
	HelloTimeout time.Duration
	// SyncPollInterval is how often a new stream checks whether the source
	// has synced. Zero means DefaultSyncPollInterval.
	SyncPollInterval time.Duration
	// KeepaliveTime and KeepaliveTimeout: the server pings an agent that
	// has been quiet for KeepaliveTime and drops the connection if no
	// answer comes within KeepaliveTimeout, so a vanished agent is noticed
	// even when TCP is not. Zero means the defaults.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// MinPingInterval is the keepalive enforcement policy: the shortest
	// ping interval allowed from agents. Zero means DefaultMinPingInterval.
	MinPingInterval time.Duration

	// DeleteRate and DeleteBurst pace the WorkDeletes sent to each agent,
	// with a token bucket per stream: DeleteBurst at once, then DeleteRate
	// per second. A delete that must wait does not hold up anything else;
	// flotilla_sync_deletions_pending{cluster} counts those waiting (see
	// pkg/sync, Deletion intent). Zero means DefaultDeleteRate and
	// DefaultDeleteBurst; a negative (or infinite) DeleteRate turns the
	// limit off. A negative DeleteBurst or a NaN DeleteRate is an error.
	DeleteRate  float64
	DeleteBurst int

	// Connection hygiene: how many streams one connection may carry, when
	// idle and old connections are closed, how long the TLS handshake
	// may take and how many connections may be open without having
	// proved an agent certificate (see connGuard and the Default*
	// constants for why these values). Zero means the default; a negative
	// value is an error. MaxConnectionAgeGrace must leave the agent time
	// to move: it may not be shorter than a second.
	MaxStreamsPerConnection int
	MaxConnectionIdle       time.Duration
	MaxConnectionAge        time.Duration
	MaxConnectionAgeGrace   time.Duration
	HandshakeTimeout        time.Duration
	MaxPendingConnections   int
	// Limits on what one member's agent can make the hub do (see
	// pkg/sync, Bounded input). Zero values mean the defaults.
	//
	// MaxRecvMessageBytes bounds every message from an agent; a larger
	// one ends its stream with RESOURCE_EXHAUSTED (the hub's
	// --sync-max-recv-message-bytes). Negative is an error.
	MaxRecvMessageBytes int
	// StatusRate and StatusBurst pace each stream's status reports
	// (--member-status-rate, --member-status-burst); reports beyond them
	// wait, the latest per Work, in a backlog of at most
	// StatusBacklogBytes. A negative (or infinite) StatusRate turns the
	// pacing off; NaN, a negative burst or backlog is an error.
	StatusRate         float64
	StatusBurst        int
	StatusBacklogBytes int
	// ConnectRate and ConnectBurst limit how often each cluster may open
	// a stream (--member-connect-rate, --member-connect-burst); a
	// stream over the limit is refused with RESOURCE_EXHAUSTED. A negative
	// (or infinite) ConnectRate turns the limit off; NaN or a negative
	// burst is an error.
	ConnectRate  float64
	ConnectBurst int
	// BootstrapRate and BootstrapBurst limit how often each peer address
	// may call the Bootstrap RPCs that need no certificate (--bootstrap-rate,
	// --bootstrap-burst); a call over the limit is refused with
	// RESOURCE_EXHAUSTED. A negative (or infinite) BootstrapRate turns the
	// limit off; NaN or a negative burst is an error.
	BootstrapRate  float64
	BootstrapBurst int
}

// connDefaults fills in and checks the connection hygiene fields.
func (c *Config) connDefaults() error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"MaxConnectionIdle", c.MaxConnectionIdle},
		{"MaxConnectionAge", c.MaxConnectionAge},
		{"MaxConnectionAgeGrace", c.MaxConnectionAgeGrace},
		{"HandshakeTimeout", c.HandshakeTimeout},
	} {
		if f.v < 0 {
			return fmt.Errorf("sync server: Config.%s is %s; it must not be negative (0 means the default)", f.name, f.v)
		}
	}
	if c.MaxStreamsPerConnection < 0 || int64(c.MaxStreamsPerConnection) > math.MaxUint32 {
		return fmt.Errorf("sync server: Config.MaxStreamsPerConnection is %d; give a positive number (0 means the default, %d)", c.MaxStreamsPerConnection, DefaultMaxStreamsPerConnection)
	}
	if c.MaxPendingConnections < 0 {
		return fmt.Errorf("sync server: Config.MaxPendingConnections is %d; it must not be negative (0 means the default, %d)", c.MaxPendingConnections, DefaultMaxPendingConnections)
	}
	if c.MaxConnectionAgeGrace > 0 && c.MaxConnectionAgeGrace < time.Second {
		return fmt.Errorf("sync server: Config.MaxConnectionAgeGrace is %s; give at least 1s, so a stream is not cut the moment its connection ages", c.MaxConnectionAgeGrace)
	}
	if c.MaxStreamsPerConnection == 0 {
		c.MaxStreamsPerConnection = DefaultMaxStreamsPerConnection
	}
	if c.MaxConnectionIdle == 0 {
		c.MaxConnectionIdle = DefaultMaxConnectionIdle
	}
	if c.MaxConnectionAge == 0 {
		c.MaxConnectionAge = DefaultMaxConnectionAge
	}
	if c.MaxConnectionAgeGrace == 0 {
		c.MaxConnectionAgeGrace = DefaultMaxConnectionAgeGrace
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.MaxPendingConnections == 0 {
		c.MaxPendingConnections = DefaultMaxPendingConnections
	}
	return nil
}

// inputLimitDefaults checks and fills in the limits on agent input.
func (c *Config) inputLimitDefaults() error {
	if c.MaxRecvMessageBytes < 0 {
		return fmt.Errorf("sync server: Config.MaxRecvMessageBytes is %d; it must not be negative (0 means the default, %d)", c.MaxRecvMessageBytes, DefaultMaxRecvMessageBytes)
	}
	if c.MaxRecvMessageBytes == 0 {
		c.MaxRecvMessageBytes = DefaultMaxRecvMessageBytes
	}
	for _, f := range []struct {
		name     string
		rate     *float64
		burst    *int
		defRate  float64
		defBurst int
		unit     string
	}{
		{"Status", &c.StatusRate, &c.StatusBurst, DefaultStatusRate, DefaultStatusBurst, "reports"},
		{"Connect", &c.ConnectRate, &c.ConnectBurst, DefaultConnectRate, DefaultConnectBurst, "connects"},
		{"Bootstrap", &c.BootstrapRate, &c.BootstrapBurst, DefaultBootstrapRate, DefaultBootstrapBurst, "join requests"},
	} {
		if math.IsNaN(*f.rate) {
			return fmt.Errorf("sync server: Config.%sRate is NaN; give %s per second, 0 for the default, or a negative value for no limit", f.name, f.unit)
		}
		if *f.rate == 0 {
			*f.rate = f.defRate
		}
		if *f.burst < 0 {
			return fmt.Errorf("sync server: Config.%sBurst is %d; it must not be negative (0 means the default, %d)", f.name, *f.burst, f.defBurst)
		}
		if *f.burst == 0 {
			*f.burst = f.defBurst
		}
	}
	if c.StatusBacklogBytes < 0 {
		return fmt.Errorf("sync server: Config.StatusBacklogBytes is %d; it must not be negative (0 means the default, %d)", c.StatusBacklogBytes, DefaultStatusBacklogBytes)
	}
	if c.StatusBacklogBytes == 0 {
		c.StatusBacklogBytes = DefaultStatusBacklogBytes
	}
	return nil
}

func (c *Config) defaults() error {
	if c.Works == nil || c.Clusters == nil {
		return errors.New("sync server: Config.Works and Config.Clusters are required")
	}
	if c.TLS == nil || c.TLS.ClientCAs == nil {
		return errors.New("sync server: Config.TLS with ClientCAs is required; agents are identified by their client certificates")
	}
	if c.MaxQueueDepth <= 0 {
		c.MaxQueueDepth = DefaultMaxQueueDepth
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.HelloTimeout <= 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.SyncPollInterval <= 0 {
		c.SyncPollInterval = DefaultSyncPollInterval
	}
	if c.KeepaliveTime <= 0 {
		c.KeepaliveTime = DefaultKeepaliveTime
	}
	if c.KeepaliveTimeout <= 0 {
		c.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if c.MinPingInterval <= 0 {
		c.MinPingInterval = DefaultMinPingInterval
	}
	if math.IsNaN(c.DeleteRate) {
		return errors.New("sync server: Config.DeleteRate is NaN; give deletes per second, 0 for the default, or a negative value for no limit")
	}
	if c.DeleteRate == 0 {
		c.DeleteRate = DefaultDeleteRate
	}
	if c.DeleteBurst < 0 {
		return fmt.Errorf("sync server: Config.DeleteBurst is %d; it must not be negative (0 means the default, %d)", c.DeleteBurst, DefaultDeleteBurst)
	}
	if c.DeleteBurst == 0 {
		c.DeleteBurst = DefaultDeleteBurst
	}
	if err := c.inputLimitDefaults(); err != nil {
		return err
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	return c.connDefaults()
}

// Server is the hub side of the sync protocol: a gRPC server for the Sync
// service, with the health service beside it.
type Server struct {
	syncv1.UnimplementedSyncServer

	cfg     Config
	log     logr.Logger
	metrics *metrics
	grpc    *grpc.Server
	health  *health.Server
	// conns bounds the connections that have not authenticated.
	conns *connGuard

	// stopCtx ends when Stop is called; every stream watches it.
	stopCtx context.Context
	stop    context.CancelFunc

	// lifecycle serialises connect and disconnect, so the AgentSink sees
	// them in order for each cluster.
	lifecycle sync.Mutex

	mu       sync.RWMutex
	sessions map[string]*session // by cluster: the stream that is current
	nextID   uint64

	fleetID atomic.Pointer[string]
	// connects limits how often each cluster opens a stream (nil: no
	// limit).
	connects *connectLimiter
	// bootstraps limits, per peer address, the Bootstrap RPCs that need
	// no certificate (nil: no limit).
	bootstraps *connectLimiter

	// epochs hands out HubHello epochs: it starts from the server's start
	// time in microseconds, so epochs do not repeat across hub restarts,
	// and grows by one per stream.
	epochs atomic.Uint64
}

var _ syncv1.SyncServer = (*Server)(nil)

// New builds a Server. It does not listen; call Serve.
func New(cfg Config) (*Server, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger.WithName("sync-server"),
		metrics:  m,
		health:   health.NewServer(),
		sessions: make(map[string]*session),
		connects: newConnectLimiter(cfg.ConnectRate, cfg.ConnectBurst),

		bootstraps: newConnectLimiter(cfg.BootstrapRate, cfg.BootstrapBurst),
	}
	s.conns = newConnGuard(cfg.MaxPendingConnections, cfg.HandshakeTimeout, s.log)
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.epochs.Store(uint64(time.Now().UnixMicro()))
	if cfg.FleetID != "" {
		s.SetFleetID(cfg.FleetID)
	}
	s.grpc = grpc.NewServer(
		grpc.Creds(guardCreds{TransportCredentials: credentials.NewTLS(cfg.TLS)}),
		// Every RPC, the health service's too, must come from an agent:
		// the interceptors authenticate and put the Identity in the
		// context (see auth.go).
		grpc.ChainUnaryInterceptor(s.unaryAuth),
		grpc.ChainStreamInterceptor(s.streamAuth),
		grpc.MaxConcurrentStreams(uint32(cfg.MaxStreamsPerConnection)),
		grpc.ConnectionTimeout(cfg.HandshakeTimeout),
		// Memory per connected agent: an agent's connection is idle most
		// of the time (a heartbeat every 10s), so its 32 KiB write buffer
		// is taken from a pool for each flush and returned after, not
		// held per connection; and reads have no buffer of gRPC's own:
		// the TLS connection below already holds each whole record it
		// decrypts (up to 16 KiB), so the HTTP/2 framer's small reads are
		// served from it without a system call, and a second 16 KiB per
		// connection bought nothing. Measured by the scale harness
		// (docs/benchmarks.md, Scale: hub memory per agent).
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(0),
		// The Sync handler receives raw bytes and decodes them itself,
		// so malformed input ends the stream with INVALID_ARGUMENT.
		grpc.ForceServerCodecV2(wire.Codec{}),
		// Agents' messages are small (see DefaultMaxRecvMessageBytes);
		// the hub's carry whole Works.
		grpc.MaxRecvMsgSize(cfg.MaxRecvMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:                  cfg.KeepaliveTime,
			Timeout:               cfg.KeepaliveTimeout,
			MaxConnectionIdle:     cfg.MaxConnectionIdle,
			MaxConnectionAge:      cfg.MaxConnectionAge,
			MaxConnectionAgeGrace: cfg.MaxConnectionAgeGrace,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: cfg.MinPingInterval,
			// Agents ping between streams too, while they back off.
			PermitWithoutStream: true,
		}),
	)
	syncv1.RegisterSyncServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(syncv1.Sync_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	if cfg.Bootstrap != nil {
		syncv1.RegisterBootstrapServer(s.grpc, cfg.Bootstrap)
		s.health.SetServingStatus(syncv1.Bootstrap_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	}
	return s, nil
}

// Serve accepts connections on lis until Stop is called. It returns nil
// after Stop. Connections that have not proved an agent certificate are
// bounded in number and time (Config.MaxPendingConnections and
// HandshakeTimeout; see connGuard).
func (s *Server) Serve(lis net.Listener) error {
	err := s.grpc.Serve(&guardedListener{Listener: lis, guard: s.conns})
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// stopGrace is how long Stop waits for RPCs other than sync streams (a
// health Watch, say) before it closes their connections.
const stopGrace = 10 * time.Second

// Stop ends every stream with UNAVAILABLE ("hub is shutting down"), so
// agents reconnect elsewhere or later, marks the health service NOT_SERVING
// and stops the gRPC server. It returns when every handler has returned.
func (s *Server) Stop() {
	s.health.Shutdown()
	s.stop()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// Sync streams end at once; what is left is some other
		// long-lived RPC that would hold the hub up forever.
		s.grpc.Stop()
		<-done
	}
}

// WorkChanged tells the server that Work name of cluster changed (created,
// updated or deleted). The hub calls it from its Work informer's event
// handlers. It never blocks on an agent: it only marks the Work in the
// cluster's queue, and when that queue is full it ends the cluster's stream
// (the agent resyncs on reconnect). Clusters without a stream are ignored:
// their agent gets a snapshot when it connects.
func (s *Server) WorkChanged(cluster, name string) {
	s.mu.RLock()
	sess := s.sessions[cluster]
	s.mu.RUnlock()
	if sess != nil {
		sess.enqueue(name)
	}
}

// SetFleetID sets the fleet id sent in every HubHello from now on. The hub
// sets it once, when it becomes leader and has read (or created) its
// identity object.
func (s *Server) SetFleetID(id string) { s.fleetID.Store(&id) }

// FleetID returns the fleet id, or "" when none is set yet.
func (s *Server) FleetID() string {
	if id := s.fleetID.Load(); id != nil {
		return *id
	}
	return ""
}

// ConfirmPrune releases the prune that cluster's agent held for the
// snapshot of epoch: it sends that agent a PruneConfirm, unless its current
// stream has another epoch (the agent reconnected and has a new snapshot,
// which is confirmed on its own). It reports whether a confirmation is on
// its way. It never blocks: the confirmation waits in a one-slot mailbox
// for the stream's send loop, and a second one for the same stream while
// the first waits is the same message.
func (s *Server) ConfirmPrune(cluster string, epoch uint64) bool {
	s.mu.RLock()
	sess := s.sessions[cluster]
	s.mu.RUnlock()
	if sess == nil || sess.epoch != epoch {
		return false
	}
	select {
	case sess.confirm <- struct{}{}:
	default:
	}
	return true
}

// Stats describes one cluster's current stream, for tests and debugging.
type Stats struct {
	// QueueDepth is how many changed Works wait to be sent now, and
	// MaxQueueDepth the most that ever waited on this stream.
	QueueDepth    int
	MaxQueueDepth int
	// SnapshotSent says the snapshot (with SnapshotComplete) went out.
	SnapshotSent bool
	// DeletionsPending is how many WorkDeletes wait for the delete rate
	// limit (Config.DeleteRate).
	DeletionsPending int
}

// Stats returns cluster's stream statistics; ok is false when cluster has
// no stream.
func (s *Server) Stats(cluster string) (st Stats, ok bool) {
	s.mu.RLock()
	sess := s.sessions[cluster]
	s.mu.RUnlock()
	if sess == nil {
		return Stats{}, false
	}
	st.QueueDepth, st.MaxQueueDepth = sess.queue.depth()
	st.SnapshotSent = sess.snapshotSent.Load()
	st.DeletionsPending = int(sess.deletesWaiting.Load())
	return st, true
}

// ConnStats describes the connections that have not proved an agent
// certificate, for tests and debugging.
type ConnStats struct {
	// Pending is how many are open now (at most
	// Config.MaxPendingConnections).
	Pending int
	// Evicted and Expired count those closed since the server started:
	// to make room for a newer one, and for staying pending longer than
	// Config.HandshakeTimeout.
	Evicted, Expired uint64
}

// ConnStats returns the server's ConnStats.
func (s *Server) ConnStats() ConnStats {
	p, ev, ex := s.conns.counts()
	return ConnStats{Pending: p, Evicted: ev, Expired: ex}
}

// register makes sess the current stream of its cluster, replacing (and
// ending) an older one.
func (s *Server) register(sess *session) {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.mu.Lock()
	old := s.sessions[sess.cluster]
	s.sessions[sess.cluster] = sess
	s.metrics.connected.Set(float64(len(s.sessions)))
	// A new stream starts with no deletes waiting, whatever the one it
	// replaces had.
	s.metrics.deletionsPending.WithLabelValues(sess.cluster).Set(0)
	s.metrics.initCluster(sess.cluster)
	s.mu.Unlock()
	if old != nil {
		old.cancel(status.Errorf(codes.Aborted,
			"replaced by a newer stream for cluster %q (from %s); only one agent per cluster may hold a stream", sess.cluster, sess.info.Peer))
	}
	if s.cfg.Agents != nil {
		s.cfg.Agents.AgentConnected(sess.cluster, sess.info)
	}
}

// unregister removes sess if it is still its cluster's current stream.
func (s *Server) unregister(sess *session, reason error) {
	s.lifecycle.Lock()
	defer s.lifecycle.Unlock()
	s.mu.Lock()
	current := s.sessions[sess.cluster] == sess
	if current {
		delete(s.sessions, sess.cluster)
		s.metrics.queueDepth.DeleteLabelValues(sess.cluster)
		s.metrics.deletionsPending.DeleteLabelValues(sess.cluster)
	}
	s.metrics.connected.Set(float64(len(s.sessions)))
	s.mu.Unlock()
	if current && s.cfg.Agents != nil {
		s.cfg.Agents.AgentDisconnected(sess.cluster, reason)
	}
}
