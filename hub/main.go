// Command hub is Flotilla's hub manager: it places MyApps on member
// clusters, writes their Works, serves them to agents over gRPC with mTLS,
// aggregates what the agents report into MyApp status and keeps
// MemberCluster health. See hub/setup for the wiring.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/membercluster"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/myapp"
	"github.com/flotilla-dev/flotilla/hub/setup"
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
	fs.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&opts.SyncAddr, "sync-bind-address", ":9443", "address the gRPC sync server listens on for agents")
	fs.StringVar(&opts.WebhookAddr, "webhook-bind-address", ":9444", "address of the admission webhook server (empty disables it)")
	fs.StringVar(&opts.RegisterWebhookURL, "register-webhook-url", "", "register the webhook configurations with the hub apiserver at this base URL (for hubs run outside the hub cluster, e.g. https://127.0.0.1:9444)")
	fs.StringVar(&opts.CertDir, "cert-dir", "/etc/flotilla/certs", "folder with ca.crt, hub.crt and hub.key (see flotilla-pki)")
	fs.DurationVar(&opts.HeartbeatGrace, "heartbeat-grace", membercluster.DefaultGrace, "how long a member may go without a heartbeat before it is not Ready and tainted unreachable")
	fs.Float64Var(&opts.Evictions.BrakeThreshold, "partition-brake-threshold", membercluster.DefaultBrakeThreshold, "when more than this share of the members (0-1) fall silent within one heartbeat grace period, the hub assumes it is the one cut off and taints (evicts) none of them; 1 turns the brake off")
	fs.IntVar(&opts.Evictions.RateLimit, "eviction-rate-limit", membercluster.DefaultEvictionRateLimit, "the most members tainted unreachable per --eviction-rate-interval; the others wait (0 means the default; a negative value turns the limit off)")
	fs.DurationVar(&opts.Evictions.RateInterval, "eviction-rate-interval", membercluster.DefaultEvictionRateInterval, "the interval of --eviction-rate-limit")
	fs.Float64Var(&opts.MemberDeleteRate, "member-delete-rate", syncserver.DefaultDeleteRate, "Work deletions sent to each member's agent per second once --member-delete-burst is used up; the others wait, counted by flotilla_sync_deletions_pending (0 means the default; a negative value turns the limit off)")
	fs.IntVar(&opts.MemberDeleteBurst, "member-delete-burst", syncserver.DefaultDeleteBurst, "Work deletions sent to a member's agent at once before --member-delete-rate paces them (0 means the default)")
	fs.DurationVar(&opts.WorkCleanupTimeout, "work-cleanup-timeout", myapp.DefaultWorkCleanupTimeout, "how long a deleted Work waits for its member's agent to confirm it removed (or released) the Work's objects before the hub lets it go and names the member in the MyApp's status.orphans")
	fs.DurationVar(&opts.HeartbeatWriteInterval, "heartbeat-write-interval", membercluster.DefaultHeartbeatWriteInterval, "the most often a healthy member's heartbeat alone is written to its status")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	opts.Logger = logger

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the hub kubeconfig: %w", err)
	}
	// The hub's writes fan out in parallel; client-side throttling would
	// serialise them again.
	cfg.QPS, cfg.Burst = 200, 400
	opts.Config = cfg
	ctx := ctrl.SetupSignalHandler()
	logger.Info("starting the hub", "sync", opts.SyncAddr, "webhook", opts.WebhookAddr, "leaderElection", opts.LeaderElection, "heartbeatGrace", opts.HeartbeatGrace.String())
	start := time.Now()
	err = setup.Run(ctx, opts)
	logger.Info("hub stopped", "ran", time.Since(start).Round(time.Second).String())
	return err
}
