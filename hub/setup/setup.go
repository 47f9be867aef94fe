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
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/membercluster"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/myapp"
	"github.com/flotilla-dev/flotilla/hub/internal/syncbridge"
	hubwebhook "github.com/flotilla-dev/flotilla/hub/internal/webhook"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// The hub's leader election and events.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure the hub.
type Options struct {
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
	// MetricsAddr and ProbeAddr serve /metrics and /healthz, /readyz
	// ("0" disables).
	MetricsAddr, ProbeAddr string
	// SyncAddr is where the gRPC sync server listens (leader only).
	SyncAddr string
	// CertDir holds ca.crt, hub.crt and hub.key (pkg/pki's layout): the
	// sync server and the webhook server present hub.crt, and agents'
	// certificates must chain to ca.crt.
	CertDir string
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
	// WorkCleanupTimeout bounds how long a deleted Work waits for its
	// member's confirmation (myapp.DefaultWorkCleanupTimeout when zero;
	// negative is refused).
	WorkCleanupTimeout time.Duration
	// Logger is the manager's logger.
	Logger logr.Logger
	// Registerer is where the sync server's metrics go (default:
	// controller-runtime's registry, served on MetricsAddr).
	Registerer prometheus.Registerer
	// SkipNameValidation lets tests run several managers in one process.
	SkipNameValidation bool
	// RegisterWebhookURL, when set, makes the hub register its webhook
	// configurations with the hub apiserver at this base URL (e.g.
	// https://127.0.0.1:9444), trusting CertDir/ca.crt. For hubs run as
	// local processes (testbed, demo); in a cluster the manifests do it.
	RegisterWebhookURL string
	// OnSyncListening, when set, is told the sync server's address once it
	// listens (tests pass ":0").
	OnSyncListening func(addr string)
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
	mgr, err := newManager(opts, scheme)
	if err != nil {
		return nil, err
	}
	hub, mcReconciler, err := setupControllers(mgr, opts)
	if err != nil {
		return nil, err
	}
	if err := setupWebhook(ctx, mgr, opts, scheme); err != nil {
		return nil, err
	}
	if err := setupSync(ctx, mgr, opts, hub, mcReconciler); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return hub, nil
}

// newManager creates the hub's leader-elected manager, with the webhook
// server when opts ask for one.
func newManager(opts Options, scheme *runtime.Scheme) (ctrl.Manager, error) {
	mgrOpts := ctrl.Options{
		Scheme:                        scheme,
		Logger:                        opts.Logger,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// Short leases: a dead leader is replaced within seconds, in line
		// with failover in seconds.
		LeaseDuration:          ptrDuration(8 * time.Second),
		RenewDeadline:          ptrDuration(6 * time.Second),
		RetryPeriod:            ptrDuration(1 * time.Second),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		Controller:             config.Controller{SkipNameValidation: &opts.SkipNameValidation},
		HealthProbeBindAddress: opts.ProbeAddr,
	}
	if opts.WebhookAddr != "" {
		host, port, err := splitHostPort(opts.WebhookAddr)
		if err != nil {
			return nil, fmt.Errorf("--webhook-bind-address: %w", err)
		}
		mgrOpts.WebhookServer = webhook.NewServer(webhook.Options{
			Host: host, Port: port, CertDir: opts.CertDir,
			CertName: pki.HubCertFile, KeyName: pki.HubKeyFile,
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
	statusWriter := &syncbridge.StatusWriter{Client: mgr.GetClient(), Reader: mgr.GetCache()}
	if err := mgr.Add(statusWriter); err != nil {
		return nil, nil, err
	}
	hub := &Hub{Manager: mgr, Tracker: tracker, StatusWriter: statusWriter}
	if err := (&myapp.Reconciler{
		Client:             mgr.GetClient(),
		Recorder:           mgr.GetEventRecorder("flotilla-hub"),
		WorkCleanupTimeout: opts.WorkCleanupTimeout,
	}).SetupWithManager(mgr); err != nil {
		return nil, nil, fmt.Errorf("setting up the MyApp controller: %w", err)
	}
	mcReconciler := &membercluster.Reconciler{
		Client:                 mgr.GetClient(),
		Tracker:                tracker,
		Recorder:               mgr.GetEventRecorder("flotilla-hub"),
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
// process, registers its own webhook configurations.
func setupWebhook(ctx context.Context, mgr ctrl.Manager, opts Options, scheme *runtime.Scheme) error {
	if opts.WebhookAddr == "" {
		return nil
	}
	if err := (&hubwebhook.MyAppWebhook{Reader: mgr.GetCache()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MyApp webhook: %w", err)
	}
	if opts.RegisterWebhookURL == "" {
		return nil
	}
	caBundle, err := os.ReadFile(filepath.Join(opts.CertDir, pki.CACertFile))
	if err != nil {
		return fmt.Errorf("reading the webhook CA bundle: %w", err)
	}
	c, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	return hubwebhook.Register(ctx, c, opts.RegisterWebhookURL, caBundle)
}

// setupSync serves the agents' sync stream on the leader, with the
// fleet identity and the MemberCluster controller's prune confirmations.
func setupSync(ctx context.Context, mgr ctrl.Manager, opts Options, hub *Hub, mcReconciler *membercluster.Reconciler) error {
	if opts.SyncAddr == "" {
		return nil
	}
	registerer := opts.Registerer
	if registerer == nil {
		registerer = ctrlmetrics.Registry
	}
	source, err := syncbridge.NewWorkSource(ctx, mgr.GetCache())
	if err != nil {
		return err
	}
	tlsCfg, err := pki.ServerTLSConfig(filepath.Join(opts.CertDir, pki.HubCertFile), filepath.Join(opts.CertDir, pki.HubKeyFile), filepath.Join(opts.CertDir, pki.CACertFile))
	if err != nil {
		return fmt.Errorf("loading the sync server's certificates from %s: %w", opts.CertDir, err)
	}
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
	})
	if err != nil {
		return err
	}
	source.Notify(srv.WorkChanged)
	hub.Sync = srv
	mcReconciler.Prunes = srv
	fleet := func(ctx context.Context) (string, error) {
		return ensureFleetID(ctx, mgr.GetAPIReader(), mgr.GetClient(), hubNamespace(opts))
	}
	if err := mgr.Add(&syncRunnable{srv: srv, addr: opts.SyncAddr, onListening: opts.OnSyncListening, fleetID: fleet, log: opts.Logger}); err != nil {
		return err
	}
	return nil
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
}

func (r *syncRunnable) NeedLeaderElection() bool { return true }

func (r *syncRunnable) Start(ctx context.Context) error {
	// The fleet identity is read (and created the first time) by the
	// leader, before any agent is served.
	id, err := r.fleetID(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reading the hub's fleet identity: %w", err)
	}
	r.srv.SetFleetID(id)
	r.log.Info("serving agents as fleet", "fleetID", id)
	lis, err := net.Listen("tcp", r.addr)
	if err != nil {
		return fmt.Errorf("listening for agents on %s: %w", r.addr, err)
	}
	if r.onListening != nil {
		r.onListening(lis.Addr().String())
	}
	errCh := make(chan error, 1)
	go func() { errCh <- r.srv.Serve(lis) }()
	select {
	case <-ctx.Done():
		r.srv.Stop()
		return nil
	case err := <-errCh:
		return err
	}
}

// validateOptions refuses values the hub's flags must not have, naming
// the flag.
func validateOptions(opts Options) error {
	if math.IsNaN(opts.MemberDeleteRate) {
		return errors.New("--member-delete-rate is NaN: give Work deletions per second per member (0 means the default, a negative value turns the limit off)")
	}
	if opts.MemberDeleteBurst < 0 {
		return fmt.Errorf("--member-delete-burst is %d: it must not be negative (0 means the default, %d)", opts.MemberDeleteBurst, syncserver.DefaultDeleteBurst)
	}
	if opts.WorkCleanupTimeout < 0 {
		return fmt.Errorf("--work-cleanup-timeout is %s: it must not be negative (0 means the default, %s)", opts.WorkCleanupTimeout, myapp.DefaultWorkCleanupTimeout)
	}
	return nil
}

func ptrDuration(d time.Duration) *time.Duration { return &d }

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
