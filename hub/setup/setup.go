// Package setup wires the hub manager: the MyApp and MemberCluster
// controllers, the admission webhook, and the sync server with its bridge to
// the hub's caches. The hub binary calls Run; tests call it too, in process,
// against testbed or envtest apiservers.
package setup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/membercluster"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/myapp"
	"github.com/flotilla-dev/flotilla/hub/internal/push"
	"github.com/flotilla-dev/flotilla/hub/internal/syncbridge"
	hubwebhook "github.com/flotilla-dev/flotilla/hub/internal/webhook"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/internal/promreg"
	"github.com/flotilla-dev/flotilla/internal/truncate/recorder"
	"github.com/flotilla-dev/flotilla/pkg/idlemem"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
	"github.com/flotilla-dev/flotilla/pkg/leader"
	"github.com/flotilla-dev/flotilla/pkg/leader/leaselock"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/serving"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// The hub's leader election Lease lives in its own namespace, so the
// markers grant Leases by a namespaced Role there, not across the cluster.
// Events stay cluster-wide: the hub records them on MyApps in tenant
// namespaces and on cluster-scoped MemberClusters (whose events go to
// "default"). deploy/hub installs the hub in flotilla-system; a hub run
// with another --leader-election-namespace needs the Role moved there too.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=flotilla-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Serving /metrics securely (the default) authenticates each scrape with
// a TokenReview and authorizes it with a SubjectAccessReview.
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Options configure the hub.
type Options struct {
	// MyAppWorkers is how many MyApps the hub reconciles at once (zero:
	// the MyApp controller's default). A reconcile mostly waits for the
	// apiserver, so more workers than cores pay.
	MyAppWorkers int
	// Config is the hub apiserver's client config.
	Config *rest.Config
	// LeaderElection, LeaderElectionID and LeaderElectionNamespace
	// configure the Lease that makes one replica the leader.
	LeaderElection          bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// Namespace is the hub's own namespace, which holds its fleet identity
	// (ConfigMap flotilla-fleet). Empty means LeaderElectionNamespace,
	// else $POD_NAMESPACE, else flotilla-system.
	Namespace string
	// Lease are the leader election timings (DefaultLease when zero).
	Lease leader.LeaseTimings
	// MetricsAddr and ProbeAddr serve /metrics and /healthz, /readyz
	// ("0" disables).
	MetricsAddr, ProbeAddr string
	// PprofAddr serves Go's /debug/pprof (empty: off). Plain HTTP with no
	// authentication: bind it to loopback.
	PprofAddr string
	// InsecureMetrics serves /metrics as plain HTTP open to anyone who
	// reaches it (--metrics-secure=false, for the local testbed). The
	// zero value serves HTTPS and admits only bearer tokens the apiserver
	// authenticates whose identity may get /metrics (pkg/serving).
	InsecureMetrics bool
	// SyncAddr is where the gRPC sync server listens (leader only).
	SyncAddr string
	// CertDir, when set, holds the hub's provided certificates: ca.crt,
	// hub.crt and hub.key (pkg/pki's layout), reread as they change (see
	// hubca.Files). The sync server and the webhook server present hub.crt
	// followed by ca.crt, and agents' certificates must chain to ca.crt;
	// a ca.key beside them lets the hub sign agent certificates. Empty
	// (the default) means self-managed: the hub CA in Secret
	// flotilla-hub-ca (created once) and serving certificates issued in
	// memory and rotated (Certificates, pki.go).
	CertDir string
	// Certificates configure the self-managed serving certificates.
	Certificates CertificateOptions
	// WebhookAddr is the webhook server's host:port ("" disables the
	// webhook).
	WebhookAddr string
	// HeartbeatGrace is how long a member may go without a heartbeat.
	HeartbeatGrace time.Duration
	// HeartbeatWriteInterval bounds heartbeat-only status writes.
	HeartbeatWriteInterval time.Duration
	// Evictions configure the partition brake and the eviction rate limit
	// (zero values: the defaults).
	Evictions membercluster.EvictionOptions
	// MemberDeleteRate and MemberDeleteBurst pace the Work deletions the
	// sync server sends each member's agent: MemberDeleteBurst at once,
	// then MemberDeleteRate per second (syncserver.Config.DeleteRate and
	// DeleteBurst). Zero values mean the defaults; a negative rate turns
	// the limit off; a negative burst is refused.
	MemberDeleteRate  float64
	MemberDeleteBurst int
	// AgentCAFile, when set, is a PEM bundle of CAs the agents' client
	// certificates may chain to (--agent-ca-file). Self-managed, they are
	// trusted besides the hub CA (which signs joined agents). With
	// CertDir, they are trusted instead of CertDir/ca.crt; empty means
	// ca.crt, which then both issues the hub's certificate and vouches
	// for agents.
	AgentCAFile string
	// SyncConnections bound the sync server's connections
	// (--sync-max-streams-per-connection and the other --sync-* flags).
	SyncConnections SyncConnectionOptions
	// Limits on what one member's agent can make the hub do (see
	// pkg/sync, Bounded input); zero values mean the defaults.
	// SyncMaxRecvMessageBytes bounds each message from an agent
	// (syncserver.Config.MaxRecvMessageBytes). MemberStatusRate and
	// MemberStatusBurst pace each member's status reports (a negative rate
	// turns the pacing off); MemberStatusBufferBytes bounds each member's
	// waiting reports, in the sync server's backlog and in the status
	// writer each. MemberConnectRate and MemberConnectBurst limit how
	// often a member's agent may open a stream (a negative rate turns the
	// limit off). Negative sizes and bursts and NaN rates are refused.
	SyncMaxRecvMessageBytes int
	// WorkStatusLinger is how long a status report waits before it is
	// written into its Work's status (syncbridge.StatusWriter.Linger).
	WorkStatusLinger        time.Duration
	MemberStatusRate        float64
	MemberStatusBurst       int
	MemberStatusBufferBytes int
	MemberConnectRate       float64
	MemberConnectBurst      int
	// WorkCleanupTimeout bounds how long a deleted Work waits for its
	// member's confirmation (myapp.DefaultWorkCleanupTimeout when zero;
	// negative is refused).
	WorkCleanupTimeout time.Duration
	// MaxWorkBytes bounds one Work's manifests (render.DefaultMaxWorkBytes
	// when zero; negative or above what the sync server sends in one
	// message is refused).
	MaxWorkBytes int
	// Logger is the manager's logger.
	Logger logr.Logger
	// Registerer is where the sync server's metrics go (default:
	// controller-runtime's registry, served on MetricsAddr).
	Registerer prometheus.Registerer
	// SkipNameValidation lets tests run several managers in one process.
	SkipNameValidation bool
	// RegisterWebhookURL, when set, makes the hub register its webhook
	// configurations with the hub apiserver at this base URL (e.g.
	// https://127.0.0.1:9444), trusting the hub's CA. For hubs run as
	// local processes (testbed, demo); in a cluster the manifests do it.
	RegisterWebhookURL string
	// KeepWebhookCABundle, for a hub in its cluster, keeps the caBundle of
	// the webhook configurations deploy/hub ships equal to the hub's CA
	// (the hub CA, or CertDir/ca.crt as last reread)
	// (--webhook-ca-bundle-sync): the leader patches it at start and
	// checks it every WebhookCABundleInterval. The hub never creates the
	// configurations. Ignored with RegisterWebhookURL, which writes them
	// whole.
	KeepWebhookCABundle bool
	// WebhookCABundleInterval is how often KeepWebhookCABundle checks
	// (DefaultWebhookCABundleInterval when zero).
	WebhookCABundleInterval time.Duration
	// OnSyncListening, when set, is told the sync server's address once it
	// listens (tests pass ":0").
	OnSyncListening func(addr string)
	// AgentCertificateLifetime is how long the agent certificates the hub
	// signs last (--agent-certificate-lifetime; 0: 30 days, at least a
	// minute). BootstrapRate and BootstrapBurst limit the join requests
	// per peer address (syncserver.Config.BootstrapRate and
	// BootstrapBurst). See setupJoin.
	AgentCertificateLifetime time.Duration
	BootstrapRate            float64
	BootstrapBurst           int
	// PushResync is how often the kubeconfig Secret of every Push member
	// is read again (--push-resync; 0: DefaultPushResync); a MemberCluster
	// change reads at once. PushHeartbeatInterval is how often a Push
	// member's /readyz is asked (0: 2s, as agents heartbeat).
	PushResync            time.Duration
	PushHeartbeatInterval time.Duration
	// KeepIdleMemory turns off the return of the free heap to the
	// operating system while the hub is at rest (--release-idle-memory=false;
	// pkg/idlemem).
	KeepIdleMemory bool
}

// SyncConnectionOptions are syncserver.Config's connection hygiene
// fields, one hub flag each; zero values mean the server's defaults.
type SyncConnectionOptions struct {
	MaxStreamsPerConnection int
	MaxConnectionIdle       time.Duration
	MaxConnectionAge        time.Duration
	MaxConnectionAgeGrace   time.Duration
	HandshakeTimeout        time.Duration
	MaxPendingConnections   int
}

// validate refuses values the --sync-* flags must not have, naming the
// flag.
func (o SyncConnectionOptions) validate() error {
	if o.MaxStreamsPerConnection < 0 || int64(o.MaxStreamsPerConnection) > math.MaxUint32 {
		return fmt.Errorf("--sync-max-streams-per-connection is %d: give a positive number (0 means the default, %d)", o.MaxStreamsPerConnection, syncserver.DefaultMaxStreamsPerConnection)
	}
	if o.MaxPendingConnections < 0 {
		return fmt.Errorf("--sync-max-pending-connections is %d: it must not be negative (0 means the default, %d)", o.MaxPendingConnections, syncserver.DefaultMaxPendingConnections)
	}
	for _, f := range []struct {
		flag string
		v    time.Duration
	}{
		{"--sync-max-connection-idle", o.MaxConnectionIdle},
		{"--sync-max-connection-age", o.MaxConnectionAge},
		{"--sync-max-connection-age-grace", o.MaxConnectionAgeGrace},
		{"--sync-handshake-timeout", o.HandshakeTimeout},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s is %s: it must not be negative (0 means the default)", f.flag, f.v)
		}
	}
	if o.MaxConnectionAgeGrace > 0 && o.MaxConnectionAgeGrace < time.Second {
		return fmt.Errorf("--sync-max-connection-age-grace is %s: give at least 1s, so an agent's stream is not cut the moment its connection ages", o.MaxConnectionAgeGrace)
	}
	return nil
}

// Scheme returns the hub's scheme: core types and Flotilla's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := flotillav1.AddToScheme(s); err != nil {
		return nil, err
	}
	// HTTPRoutes whose weights spec.traffic.httpRoute has the hub write.
	if err := gatewayv1.Install(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs the hub until ctx ends.
func Run(ctx context.Context, opts Options) error {
	hub, err := New(ctx, opts)
	if err != nil {
		return err
	}
	return hub.Manager.Start(ctx)
}

// Hub is a wired hub manager and the parts tests reach into.
type Hub struct {
	// Manager runs everything; Start it.
	Manager manager.Manager
	// Tracker is the sync server's AgentSink: what it hears of agents
	// drives MemberCluster health.
	Tracker *membercluster.Tracker
	// StatusWriter is the sync server's StatusSink.
	StatusWriter *syncbridge.StatusWriter
	// Sync is the sync server (nil without Options.SyncAddr).
	Sync *syncserver.Server
	// Push applies the Works of Push members.
	Push *push.Engine
	// Works is the hub's view of the Works, shared by the sync server and
	// the push engine.
	Works *syncbridge.WorkSource
	// LeaderIdentity is this process's holder identity in the leader
	// Lease ("" without leader election).
	LeaderIdentity string
}

// New builds the hub manager with every controller, the webhook and the
// sync server registered, ready to Start.
func New(ctx context.Context, opts Options) (*Hub, error) {
	if opts.Config == nil {
		return nil, errors.New("hub: a kubeconfig is required")
	}
	if err := validateOptions(opts); err != nil {
		return nil, err
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	certs, err := loadPKI(ctx, opts, scheme)
	if err != nil {
		return nil, err
	}
	lease, err := newLeaderLock(opts)
	if err != nil {
		return nil, err
	}
	mgr, err := newManager(opts, scheme, certs, lease)
	if err != nil {
		return nil, err
	}
	if err := certs.addTo(mgr, opts.Registerer); err != nil {
		return nil, err
	}
	hub, mcReconciler, err := setupControllers(mgr, opts)
	if err != nil {
		return nil, err
	}
	if err := addHubMetrics(mgr, opts, hub); err != nil {
		return nil, fmt.Errorf("registering the hub's metrics: %w", err)
	}
	if err := setupWebhook(ctx, mgr, opts, scheme, certs); err != nil {
		return nil, err
	}
	if hub.Works, err = syncbridge.NewWorkSource(ctx, mgr.GetCache()); err != nil {
		return nil, err
	}
	hub.LeaderIdentity = lease.identity
	if hub.Push, err = setupPush(ctx, mgr, opts, scheme, hub, hub.Works, lease.fence(mgr.GetAPIReader())); err != nil {
		return nil, fmt.Errorf("setting up push mode: %w", err)
	}
	syncRun, err := setupSync(ctx, mgr, opts, hub, mcReconciler, certs)
	if err != nil {
		return nil, err
	}
	mcReconciler.Prunes = prunes{engine: hub.Push, sync: syncConfirmer(hub.Sync)}
	if err := addProbes(mgr, opts, syncRun); err != nil {
		return nil, err
	}
	return hub, nil
}

// CacheSyncTimeout is how long the hub's controllers wait for their caches
// to fill before the hub gives up and exits.
const CacheSyncTimeout = 10 * time.Minute

// newManager creates the hub's leader-elected manager, with the webhook
// server when opts ask for one, serving the certificate of certs.
func newManager(opts Options, scheme *runtime.Scheme, certs *hubPKI, leaderLease leaderLease) (ctrl.Manager, error) {
	lease := opts.Lease.OrDefault(DefaultLease)
	if err := lease.Validate(); err != nil {
		return nil, err
	}
	mgrOpts := ctrl.Options{
		Scheme:                        scheme,
		Logger:                        opts.Logger,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Short leases: a dead leader is replaced within seconds, in line
		// with failover in seconds.
		LeaseDuration: ptrDuration(lease.Duration),
		RenewDeadline: ptrDuration(lease.RenewDeadline),
		RetryPeriod:   ptrDuration(lease.RetryPeriod),
		Metrics:       serving.MetricsOptions(opts.MetricsAddr, !opts.InsecureMetrics),
		// A leader's controllers wait for their caches; at 10,000 MyApps
		// and 30,000 Works on a busy hub apiserver that took more than
		// controller-runtime's 2 minutes, and the hub exited at every
		// start (the scale harness's hub restart, docs/benchmarks.md).
		Controller:             config.Controller{SkipNameValidation: &opts.SkipNameValidation, CacheSyncTimeout: CacheSyncTimeout},
		HealthProbeBindAddress: opts.ProbeAddr,
		// The hub caches every MyApp, MemberCluster and Work; their
		// managedFields (a field set per writer, for a Work's manifests
		// and status) are a large part of each and nothing in the hub
		// reads them from the cache. Writes are patches or applies built
		// from the hub's own objects, which carry none either.
		Cache:            cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		PprofBindAddress: opts.PprofAddr,

		// Nil unless leader election is on: then the hub's own lock,
		// whose holder identity the push engine's deletion fence knows.
		LeaderElectionResourceLockInterface: leaderLease.lock,
	}
	if opts.WebhookAddr != "" {
		host, port, err := splitHostPort(opts.WebhookAddr)
		if err != nil {
			return nil, fmt.Errorf("--webhook-bind-address: %w", err)
		}
		mgrOpts.WebhookServer = webhook.NewServer(webhook.Options{
			Host: host, Port: port,
			// TLS 1.3, no HTTP/2 (CVE-2023-44487, rapid reset), and the
			// hub's certificate, current at each handshake.
			TLSOpts: certs.webhookTLSOpts(),
		})
	}
	mgr, err := ctrl.NewManager(opts.Config, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the hub manager: %w", err)
	}
	return mgr, nil
}

// setupControllers adds the status writer, the MyApp controller and the
// MemberCluster health controller to mgr.
func setupControllers(mgr ctrl.Manager, opts Options) (*Hub, *membercluster.Reconciler, error) {
	tracker := membercluster.NewTracker(5 * time.Second)
	statusWriter := &syncbridge.StatusWriter{Client: mgr.GetClient(), Reader: mgr.GetCache(), Informers: mgr.GetCache(), APIReader: mgr.GetAPIReader(), MaxPendingBytes: opts.MemberStatusBufferBytes, Linger: opts.WorkStatusLinger}
	if err := mgr.Add(statusWriter); err != nil {
		return nil, nil, err
	}
	hub := &Hub{Manager: mgr, Tracker: tracker, StatusWriter: statusWriter}
	if !opts.KeepIdleMemory {
		if err := promreg.Replace(registererOf(opts.Registerer), idlemem.Collectors()...); err != nil {
			return nil, nil, err
		}
		if err := mgr.Add(&idlemem.Releaser{Log: opts.Logger.WithName("idle-memory")}); err != nil {
			return nil, nil, err
		}
	}
	if err := mgr.Add(&versionReporter{reader: mgr.GetAPIReader(), writer: mgr.GetClient(), namespace: hubNamespace(opts), log: opts.Logger.WithName("version")}); err != nil {
		return nil, nil, err
	}
	apps := &myapp.Reconciler{
		Client:                  mgr.GetClient(),
		Recorder:                recorder.Truncating(mgr.GetEventRecorder("flotilla-hub")),
		WorkCleanupTimeout:      opts.WorkCleanupTimeout,
		MaxWorkBytes:            opts.MaxWorkBytes,
		APIReader:               mgr.GetAPIReader(),
		MaxConcurrentReconciles: opts.MyAppWorkers,
		RevisionKey: func(ctx context.Context) ([]byte, error) {
			return EnsureRevisionKey(ctx, mgr.GetAPIReader(), mgr.GetClient(), hubNamespace(opts))
		},
		// An app's status follows the members' reports as they arrive,
		// not their Work status writes (docs/architecture.md, status).
		Reports: statusWriter,
	}
	if err := apps.SetupWithManager(mgr); err != nil {
		return nil, nil, fmt.Errorf("setting up the MyApp controller: %w", err)
	}
	statusWriter.Notify = apps.ReportArrived
	mcReconciler := &membercluster.Reconciler{
		Client:                 mgr.GetClient(),
		Tracker:                tracker,
		Recorder:               recorder.Truncating(mgr.GetEventRecorder("flotilla-hub")),
		Grace:                  opts.HeartbeatGrace,
		HeartbeatWriteInterval: opts.HeartbeatWriteInterval,
		Evictions:              opts.Evictions,
		APIReader:              mgr.GetAPIReader(),
		Namespace:              hubNamespace(opts),
	}
	if err := mcReconciler.SetupWithManager(mgr); err != nil {
		return nil, nil, fmt.Errorf("setting up the MemberCluster controller: %w", err)
	}
	return hub, mcReconciler, nil
}

// setupWebhook serves the MyApp webhook and, for a hub run as a local
// process, registers its own webhook configurations trusting the CA of certs.
func setupWebhook(ctx context.Context, mgr ctrl.Manager, opts Options, scheme *runtime.Scheme, certs *hubPKI) error {
	if opts.WebhookAddr == "" {
		return nil
	}
	if err := (&hubwebhook.MyAppWebhook{Reader: mgr.GetCache(), Policies: mgr.GetCache(), Authorizer: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MyApp webhook: %w", err)
	}
	if opts.RegisterWebhookURL == "" && !opts.KeepWebhookCABundle {
		return nil
	}
	// An uncached client: a cached Get would list and watch every webhook
	// configuration in the cluster, which the hub's RBAC (its two
	// configurations, by name) does not allow.
	c, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if opts.RegisterWebhookURL == "" {
		return mgr.Add(&caBundleKeeper{client: c, caBundle: certs.CABundle, interval: opts.WebhookCABundleInterval, log: opts.Logger.WithName("webhook-ca-bundle")})
	}
	return hubwebhook.Register(ctx, c, opts.RegisterWebhookURL, certs.CABundle())
}

// DefaultWebhookCABundleInterval is how often the leader checks the
// caBundle of the hub's webhook configurations by default.
const DefaultWebhookCABundleInterval = time.Minute

// caBundleKeeper keeps the hub's shipped webhook configurations trusting
// the hub's CA. It asks caBundle on every round, so a ca.crt rotated in a
// mounted Secret (provided certificates, reread by hubca.Files) reaches
// the configurations without a restart, and it repairs a caBundle that
// re-applying deploy/hub reset to its placeholder.
// Failures (a configuration not applied yet, a conflict) are logged and
// tried again within seconds; they never stop the hub.
type caBundleKeeper struct {
	client   client.Client
	caBundle func() []byte
	interval time.Duration
	log      logr.Logger
}

// NeedLeaderElection: the configurations are cluster-wide, one writer is
// enough, and two would only conflict.
func (k *caBundleKeeper) NeedLeaderElection() bool { return true }

func (k *caBundleKeeper) Start(ctx context.Context) error {
	interval := k.interval
	if interval <= 0 {
		interval = DefaultWebhookCABundleInterval
	}
	for {
		wait := interval
		if err := k.sync(ctx); err != nil && ctx.Err() == nil {
			// Sooner after a failure: the manifests may land just after
			// the hub starts, and the webhook fails closed until then.
			wait = min(interval, 5*time.Second)
			k.log.Error(err, "keeping the webhook configurations' caBundle current; trying again", "in", wait.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (k *caBundleKeeper) sync(ctx context.Context) error {
	return hubwebhook.InjectCABundle(ctx, k.client, k.caBundle())
}

// setupSync serves the agents' sync stream on the leader, with the
// fleet identity and the MemberCluster controller's prune confirmations,
// with the certificate and agent CAs of certs.
func setupSync(ctx context.Context, mgr ctrl.Manager, opts Options, hub *Hub, mcReconciler *membercluster.Reconciler, certs *hubPKI) (*syncRunnable, error) {
	if opts.SyncAddr == "" {
		return nil, nil
	}
	registerer := opts.Registerer
	if registerer == nil {
		registerer = ctrlmetrics.Registry
	}
	source := hub.Works
	// The hub signs agent certificates with the CA its PKI holds (nil:
	// provided files without ca.key, so no joining).
	boot, err := setupJoin(ctx, mgr, opts, certs.CA)
	if err != nil {
		return nil, err
	}
	tlsCfg := certs.serverTLSConfig()
	srv, err := syncserver.New(syncserver.Config{
		Works:      source,
		Clusters:   syncbridge.Registry{Reader: mgr.GetCache()},
		Status:     hub.StatusWriter,
		Deletions:  &syncbridge.Finalizer{Client: mgr.GetClient(), Reader: mgr.GetCache(), APIReader: mgr.GetAPIReader()},
		Agents:     hub.Tracker,
		TLS:        tlsCfg,
		Registerer: registerer,
		Logger:     opts.Logger,

		DeleteRate:  opts.MemberDeleteRate,
		DeleteBurst: opts.MemberDeleteBurst,

		MaxStreamsPerConnection: opts.SyncConnections.MaxStreamsPerConnection,
		MaxConnectionIdle:       opts.SyncConnections.MaxConnectionIdle,
		MaxConnectionAge:        opts.SyncConnections.MaxConnectionAge,
		MaxConnectionAgeGrace:   opts.SyncConnections.MaxConnectionAgeGrace,
		HandshakeTimeout:        opts.SyncConnections.HandshakeTimeout,
		MaxPendingConnections:   opts.SyncConnections.MaxPendingConnections,
		MaxRecvMessageBytes:     opts.SyncMaxRecvMessageBytes,
		StatusRate:              opts.MemberStatusRate,
		StatusBurst:             opts.MemberStatusBurst,
		StatusBacklogBytes:      opts.MemberStatusBufferBytes,
		ConnectRate:             opts.MemberConnectRate,
		ConnectBurst:            opts.MemberConnectBurst,

		Bootstrap:      boot,
		BootstrapRate:  opts.BootstrapRate,
		BootstrapBurst: opts.BootstrapBurst,
	})
	if err != nil {
		return nil, err
	}
	source.Notify(srv.WorkChanged)
	// A MemberCluster deleted, or a certificate revoked in its spec, ends
	// its agent's stream at once.
	if err := syncbridge.WatchClusters(ctx, mgr.GetCache(), srv.ClusterChanged); err != nil {
		return nil, err
	}
	hub.Sync = srv
	state := newSyncState()
	fleet := func(ctx context.Context) (string, error) {
		return ensureFleetIDReporting(ctx, mgr.GetAPIReader(), mgr.GetClient(), hubNamespace(opts), func(err error) {
			state.set(stepFleetID, false, err)
		})
	}
	run := &syncRunnable{srv: srv, addr: opts.SyncAddr, onListening: opts.OnSyncListening, fleetID: fleet, log: opts.Logger, state: state}
	if err := mgr.Add(run); err != nil {
		return nil, err
	}
	return run, nil
}

// syncRunnable serves the sync server on the leader only: Works and status
// are the leader's business, and an agent that reaches a standby is refused
// at connect time and tries the next hub address.
type syncRunnable struct {
	srv         *syncserver.Server
	addr        string
	onListening func(string)
	// fleetID reads (or creates) the hub's fleet identity; agents are
	// served only once it is known.
	fleetID func(ctx context.Context) (string, error)
	log     logr.Logger
	// state tells /readyz where the server stands (see syncServing).
	state *syncState
}

// The leader's steps before it serves agents, as /readyz names them.
const (
	stepFleetID = "reading the hub's fleet identity (ConfigMap flotilla-fleet)"
	stepListen  = "listening for agents"
	stepStopped = "the sync server stopped"
)

func (r *syncRunnable) NeedLeaderElection() bool { return true }

func (r *syncRunnable) Start(ctx context.Context) error {
	// The fleet identity is read (and created the first time) by the
	// leader, before any agent is served.
	r.state.set(stepFleetID, false, nil)
	id, err := r.fleetID(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reading the hub's fleet identity: %w", err)
	}
	r.srv.SetFleetID(id)
	r.log.Info("serving agents as fleet", "fleetID", id)
	r.state.set(stepListen+" on "+r.addr, false, nil)
	lis, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.state.set(stepListen+" on "+r.addr, false, err)
		return fmt.Errorf("listening for agents on %s: %w", r.addr, err)
	}
	errCh := make(chan error, 1)
	go func() { errCh <- r.srv.Serve(lis) }()
	// The listener is bound and Serve accepts on it: connections queue
	// in the kernel until the first Accept, so streams are accepted from
	// here on.
	r.state.set("serving agents on "+lis.Addr().String(), true, nil)
	if r.onListening != nil {
		r.onListening(lis.Addr().String())
	}
	select {
	case <-ctx.Done():
		r.state.set(stepStopped, false, ctx.Err())
		r.srv.Stop()
		return nil
	case err := <-errCh:
		r.state.set(stepStopped, false, err)
		return err
	}
}

// MaxWorkStatusLinger bounds Options.WorkStatusLinger: placement, rollouts
// and deletions decide on stored Work status, so a report must not wait
// long.
const MaxWorkStatusLinger = 10 * time.Second

// DefaultWorkStatusLinger is Options.WorkStatusLinger when zero.
const DefaultWorkStatusLinger = syncbridge.DefaultLinger

// validateOptions refuses values the hub's flags must not have, naming
// the flag.
func validateOptions(opts Options) error {
	if math.IsNaN(opts.MemberDeleteRate) {
		return errors.New("--member-delete-rate is NaN: give Work deletions per second per member (0 means the default, a negative value turns the limit off)")
	}
	if opts.MemberDeleteBurst < 0 {
		return fmt.Errorf("--member-delete-burst is %d: it must not be negative (0 means the default, %d)", opts.MemberDeleteBurst, syncserver.DefaultDeleteBurst)
	}
	if err := opts.SyncConnections.validate(); err != nil {
		return err
	}
	if err := opts.Certificates.validate(); err != nil {
		return err
	}
	if opts.AgentCAFile != "" {
		// Read now, so a wrong path fails the start instead of the
		// leader's sync server later.
		if _, err := pki.LoadCertPool(opts.AgentCAFile); err != nil {
			return fmt.Errorf("--agent-ca-file: %w", err)
		}
	}
	if opts.SyncMaxRecvMessageBytes < 0 {
		return fmt.Errorf("--sync-max-recv-message-bytes is %d: it must not be negative (0 means the default, %d)", opts.SyncMaxRecvMessageBytes, syncserver.DefaultMaxRecvMessageBytes)
	}
	if math.IsNaN(opts.MemberStatusRate) {
		return errors.New("--member-status-rate is NaN: give status reports per second per member (0 means the default, a negative value turns the limit off)")
	}
	if opts.MemberStatusBurst < 0 {
		return fmt.Errorf("--member-status-burst is %d: it must not be negative (0 means the default, %d)", opts.MemberStatusBurst, syncserver.DefaultStatusBurst)
	}
	if opts.WorkStatusLinger > MaxWorkStatusLinger {
		return fmt.Errorf("--work-status-linger is %s: it must be at most %s (0 means the default, %s; a negative value writes at once)", opts.WorkStatusLinger, MaxWorkStatusLinger, DefaultWorkStatusLinger)
	}
	if opts.MemberStatusBufferBytes < 0 {
		return fmt.Errorf("--member-status-buffer-bytes is %d: it must not be negative (0 means the default, %d)", opts.MemberStatusBufferBytes, syncserver.DefaultStatusBacklogBytes)
	}
	if math.IsNaN(opts.MemberConnectRate) {
		return errors.New("--member-connect-rate is NaN: give stream connects per second per member (0 means the default, a negative value turns the limit off)")
	}
	if opts.MemberConnectBurst < 0 {
		return fmt.Errorf("--member-connect-burst is %d: it must not be negative (0 means the default, %d)", opts.MemberConnectBurst, syncserver.DefaultConnectBurst)
	}
	if err := validateJoinOptions(opts); err != nil {
		return err
	}
	if opts.PushResync < 0 {
		return fmt.Errorf("--push-resync is %s: it must not be negative (0 means the default, %s)", opts.PushResync, DefaultPushResync)
	}
	if opts.MaxWorkBytes < 0 || opts.MaxWorkBytes > syncserver.DefaultMaxMessageBytes {
		return fmt.Errorf("--max-work-bytes is %d: it must be from 0 (the default, %d) to %d, the largest message the hub sends an agent", opts.MaxWorkBytes, render.DefaultMaxWorkBytes, syncserver.DefaultMaxMessageBytes)
	}
	if opts.WorkCleanupTimeout < 0 {
		return fmt.Errorf("--work-cleanup-timeout is %s: it must not be negative (0 means the default, %s)", opts.WorkCleanupTimeout, myapp.DefaultWorkCleanupTimeout)
	}
	return nil
}

func ptrDuration(d time.Duration) *time.Duration { return &d }

// leaderLease is the hub's leader Lease lock when leader election is on.
type leaderLease struct {
	lock     resourcelock.Interface
	key      client.ObjectKey
	identity string
}

// newLeaderLock builds the hub's leader lock itself, so that the hub knows
// its own holder identity (see leaderLease.fence).
func newLeaderLock(opts Options) (leaderLease, error) {
	if !opts.LeaderElection {
		return leaderLease{}, nil
	}
	ns := opts.LeaderElectionNamespace
	if ns == "" {
		ns = hubNamespace(opts)
	}
	if opts.LeaderElectionID == "" {
		return leaderLease{}, errors.New("hub: leader election needs a Lease name (--leader-election-id)")
	}
	instance := os.Getenv("POD_NAME")
	if instance == "" {
		instance, _ = os.Hostname()
	}
	lock, id, err := leaselock.New(opts.Config, ns, opts.LeaderElectionID, instance)
	if err != nil {
		return leaderLease{}, err
	}
	return leaderLease{lock: lock, key: client.ObjectKey{Namespace: ns, Name: opts.LeaderElectionID}, identity: id}, nil
}

// fence is the push engine's deletion fence: this hub still holds its
// leader Lease (nil without leader election).
func (l leaderLease) fence(reader client.Reader) func(context.Context) error {
	if l.lock == nil {
		return nil
	}
	return leader.Fence(crclient.Reader(reader), l.key, l.identity, time.Now)
}

// syncConfirmer is srv as a PruneConfirmer, nil when there is no server.
func syncConfirmer(srv *syncserver.Server) membercluster.PruneConfirmer {
	if srv == nil {
		return nil
	}
	return srv
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	return host, port, nil
}

// DefaultLease is the hub's leader election timings unless Options.Lease
// (--leader-election-*) sets them: a dead leader is replaced within about
// 8 s.
var DefaultLease = leader.LeaseTimings{Duration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: time.Second}
