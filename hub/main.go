// Command hub is Flotilla's hub manager: it places MyApps on member
// clusters, writes their Works, serves them to agents over gRPC with mTLS,
// aggregates what the agents report into MyApp status and keeps
// MemberCluster health. See hub/setup for the wiring.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/membercluster"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/myapp"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/hub/setup"
	"github.com/flotilla-dev/flotilla/internal/reexec"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hub:", err)
		os.Exit(1)
	}
}

func run() error {
	var opts setup.Options
	// controller-runtime registers --kubeconfig (default: in-cluster config
	// or $KUBECONFIG) on the command line itself.
	fs := flag.CommandLine
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect a leader so that only one replica reconciles and serves agents")
	fs.StringVar(&opts.LeaderElectionID, "leader-election-id", "flotilla-hub.flotilla.dev", "name of the leader election Lease")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", flotillav1.SystemNamespace, "namespace of the leader election Lease")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "address of the /metrics endpoint (0 disables it)")
	releaseIdle := fs.Bool("release-idle-memory", true, "at rest (under 16 MiB allocated in 20 s), collect and return the free heap to the operating system, so the hub's resident memory at rest stays near its live heap; a busy process keeps Go's own pacing")
	metricsSecure := fs.Bool("metrics-secure", true, "serve /metrics over HTTPS to bearer tokens the apiserver authenticates whose identity may get /metrics (ClusterRole flotilla-metrics-reader); false serves plain HTTP to anyone, for local testbeds only")
	fs.BoolVar(&opts.KeepWebhookCABundle, "webhook-ca-bundle-sync", true, "keep the caBundle of the shipped webhook configurations (flotilla-hub) equal to the hub's CA (the hub CA, or <cert-dir>/ca.crt); the hub patches them, it never creates them (ignored with --register-webhook-url)")
	fs.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&opts.PprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof profiles, plain HTTP without authentication (empty disables; e.g. 127.0.0.1:6060, then kubectl port-forward)")
	fs.StringVar(&opts.SyncAddr, "sync-bind-address", ":9443", "address the gRPC sync server listens on for agents")
	fs.StringVar(&opts.WebhookAddr, "webhook-bind-address", ":9444", "address of the admission webhook server (empty disables it)")
	fs.StringVar(&opts.RegisterWebhookURL, "register-webhook-url", "", "register the webhook configurations with the hub apiserver at this base URL (for hubs run outside the hub cluster, e.g. https://127.0.0.1:9444)")
	fs.StringVar(&opts.CertDir, "cert-dir", "", "folder with provided certificates: ca.crt, hub.crt and hub.key (flotilla-pki, or a cert-manager Secret mounted with those names), reread when they change; a ca.key there lets the hub sign agent certificates. Empty: self-managed, the hub CA in Secret flotilla-hub-ca (created once) and serving certificates issued in memory and rotated")
	fs.StringVar(&opts.AgentCAFile, "agent-ca-file", "", "PEM bundle of further CAs agents' client certificates may chain to: self-managed, besides the hub CA; with --cert-dir, instead of its ca.crt")
	fs.DurationVar(&opts.Certificates.ServingLifetime, "serving-certificate-lifetime", setup.DefaultServingCertificateLifetime, "lifetime of the self-managed serving certificate (sync and webhook servers), renewed in memory at 80 % of it; at least 1m (ignored with --cert-dir)")
	servingHosts := fs.String("serving-hosts", "", "comma-separated DNS names and IP addresses the self-managed serving certificate is valid for besides loopback and the Services of deploy/hub (flotilla-hub, flotilla-hub-headless, flotilla-hub-webhook in the hub's namespace): whatever agents outside the hub cluster dial (ignored with --cert-dir)")
	fs.IntVar(&opts.SyncConnections.MaxStreamsPerConnection, "sync-max-streams-per-connection", syncserver.DefaultMaxStreamsPerConnection, "the most concurrent RPCs one agent connection may carry (an agent needs one Sync stream and a health check)")
	fs.DurationVar(&opts.SyncConnections.MaxConnectionIdle, "sync-max-connection-idle", syncserver.DefaultMaxConnectionIdle, "close an agent connection that has carried no RPC for this long")
	fs.DurationVar(&opts.SyncConnections.MaxConnectionAge, "sync-max-connection-age", syncserver.DefaultMaxConnectionAge, "send GOAWAY on an agent connection this old (plus up to 10% jitter), so the agent reconnects with a new handshake after --sync-max-connection-age-grace")
	fs.DurationVar(&opts.SyncConnections.MaxConnectionAgeGrace, "sync-max-connection-age-grace", syncserver.DefaultMaxConnectionAgeGrace, "how long a stream on an aged connection goes on before the connection is closed (at least 1s)")
	fs.DurationVar(&opts.SyncConnections.HandshakeTimeout, "sync-handshake-timeout", syncserver.DefaultHandshakeTimeout, "close a connection that has not finished its TLS handshake, or not proved an agent certificate in an RPC, this long after it was accepted")
	fs.IntVar(&opts.SyncConnections.MaxPendingConnections, "sync-max-pending-connections", syncserver.DefaultMaxPendingConnections, "the most connections that have not proved an agent certificate; when one more arrives the oldest is closed")
	fs.DurationVar(&opts.HeartbeatGrace, "heartbeat-grace", membercluster.DefaultGrace, "how long a member may go without a heartbeat before it is not Ready and tainted unreachable")
	fs.Float64Var(&opts.Evictions.BrakeThreshold, "partition-brake-threshold", membercluster.DefaultBrakeThreshold, "when more than this share of the members (0-1) fall silent within one heartbeat grace period, the hub assumes it is the one cut off and taints (evicts) none of them; 1 turns the brake off")
	fs.IntVar(&opts.Evictions.RateLimit, "eviction-rate-limit", membercluster.DefaultEvictionRateLimit, "the most members tainted unreachable per --eviction-rate-interval; the others wait (0 means the default; a negative value turns the limit off)")
	fs.DurationVar(&opts.Evictions.RateInterval, "eviction-rate-interval", membercluster.DefaultEvictionRateInterval, "the interval of --eviction-rate-limit")
	fs.Float64Var(&opts.MemberDeleteRate, "member-delete-rate", syncserver.DefaultDeleteRate, "Work deletions sent to each member's agent per second once --member-delete-burst is used up; the others wait, counted by flotilla_sync_deletions_pending (0 means the default; a negative value turns the limit off)")
	fs.IntVar(&opts.MemberDeleteBurst, "member-delete-burst", syncserver.DefaultDeleteBurst, "Work deletions sent to a member's agent at once before --member-delete-rate paces them (0 means the default)")
	fs.IntVar(&opts.SyncMaxRecvMessageBytes, "sync-max-recv-message-bytes", syncserver.DefaultMaxRecvMessageBytes, "the largest message the hub takes from an agent; a larger one ends the agent's stream with RESOURCE_EXHAUSTED. An agent's hello takes about 100 bytes per Work it holds: raise this for members of more than some 10,000 Works (0 means the default)")
	fs.Float64Var(&opts.MemberStatusRate, "member-status-rate", syncserver.DefaultStatusRate, "status reports taken from each member's agent per second once --member-status-burst is used up; the others wait, the latest per Work (0 means the default; a negative value turns the limit off)")
	fs.IntVar(&opts.MemberStatusBurst, "member-status-burst", syncserver.DefaultStatusBurst, "status reports taken from a member's agent at once before --member-status-rate paces them (0 means the default)")
	fs.DurationVar(&opts.WorkStatusLinger, "work-status-linger", setup.DefaultWorkStatusLinger, "how long an agent's status report waits before the hub writes it into its Work's status, so that the reports of one rollout within it cost one write; the MyApp's status follows each report at once (0 means the default; a negative value writes at once; at most 10s)")
	fs.IntVar(&opts.MemberStatusBufferBytes, "member-status-buffer-bytes", syncserver.DefaultStatusBacklogBytes, "the most bytes of one member's status reports that wait, for --member-status-rate and for the Work status writes each; a report past it is dropped and counted (0 means the default)")
	fs.Float64Var(&opts.MemberConnectRate, "member-connect-rate", syncserver.DefaultConnectRate, "sync streams a member's agent may open per second once --member-connect-burst is used up; more are refused with RESOURCE_EXHAUSTED (0 means the default; a negative value turns the limit off)")
	fs.IntVar(&opts.MemberConnectBurst, "member-connect-burst", syncserver.DefaultConnectBurst, "sync streams a member's agent may open at once before --member-connect-rate limits them (0 means the default)")
	fs.IntVar(&opts.MaxWorkBytes, "max-work-bytes", render.DefaultMaxWorkBytes, "the largest a Work's manifests may be (the Deployment and what travels with it, Secrets included); an app whose Work for some cluster is larger is Degraded with reason WorkTooLarge and nothing of it is written. At most the 16 MiB the hub sends an agent in one message (0 means the default)")
	fs.DurationVar(&opts.WorkCleanupTimeout, "work-cleanup-timeout", myapp.DefaultWorkCleanupTimeout, "how long a deleted Work waits for its member's agent to confirm it removed (or released) the Work's objects before the hub lets it go and names the member in the MyApp's status.orphans")
	fs.DurationVar(&opts.PushResync, "push-resync", setup.DefaultPushResync, "how often the hub rereads the kubeconfig Secret of every Push member (a MemberCluster change rereads it at once); a rotated token is used within this time")
	fs.DurationVar(&opts.AgentCertificateLifetime, "agent-certificate-lifetime", setup.DefaultAgentCertificateLifetime, "how long the agent certificates the hub signs for joined members last (at least 1m); agents renew at 80% of it")
	fs.Float64Var(&opts.BootstrapRate, "bootstrap-rate", syncserver.DefaultBootstrapRate, "join requests (Register, Certificate: the RPCs that need no certificate) taken from one network address per second once --bootstrap-burst is used up; more are refused with RESOURCE_EXHAUSTED (0 means the default; a negative value turns the limit off)")
	fs.IntVar(&opts.BootstrapBurst, "bootstrap-burst", syncserver.DefaultBootstrapBurst, "join requests taken from one network address at once before --bootstrap-rate limits them (0 means the default)")
	fs.DurationVar(&opts.HeartbeatWriteInterval, "heartbeat-write-interval", membercluster.DefaultHeartbeatWriteInterval, "the most often a healthy member's heartbeat alone is written to its status")
	// The hub's writes fan out in parallel; client-side throttling that
	// is too tight serialises them again (at 100 MyApp creates a second
	// the hub makes some 1,500 requests a second). The hub cluster's API
	// Priority and Fairness is what protects the apiserver (docs/install.md).
	qps := fs.Float64("kube-api-qps", 200, "the most requests per second the hub sends its apiserver, sustained (client-side throttling)")
	burst := fs.Int("kube-api-burst", 400, "the most requests the hub sends its apiserver at once before --kube-api-qps applies")
	fs.IntVar(&opts.MyAppWorkers, "myapp-workers", myapp.DefaultWorkers, "how many MyApps the hub reconciles at once; a reconcile mostly waits for the apiserver")
	opts.Lease = setup.DefaultLease
	opts.Lease.AddFlags(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()
	if err := opts.Lease.Validate(); err != nil {
		return err
	}

	opts.InsecureMetrics = !*metricsSecure
	opts.KeepIdleMemory = !*releaseIdle
	for _, h := range strings.Split(*servingHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			opts.Certificates.ServingHosts = append(opts.Certificates.ServingHosts, h)
		}
	}

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	opts.Logger = logger

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the hub kubeconfig: %w", err)
	}
	if *qps <= 0 || *burst <= 0 {
		return fmt.Errorf("--kube-api-qps (%g) and --kube-api-burst (%d) must be above 0", *qps, *burst)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	opts.Config = cfg
	ctx := ctrl.SetupSignalHandler()
	logger.Info("starting the hub", "lostLeaseRestarts", reexec.Restarts(), "sync", opts.SyncAddr, "webhook", opts.WebhookAddr, "leaderElection", opts.LeaderElection, "heartbeatGrace", opts.HeartbeatGrace.String())
	start := time.Now()
	err = setup.Run(ctx, opts)
	logger.Info("hub stopped", "ran", time.Since(start).Round(time.Second).String())
	// A lost Lease starts over in place rather than exit into the
	// kubelet's CrashLoopBackOff (internal/reexec).
	return reexec.AfterRun(ctx, logger, err)
}
