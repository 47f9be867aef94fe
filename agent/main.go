// Command agent is Flotilla's per-member agent: leader-elected in its
// member cluster, it holds the gRPC stream to the hub, applies the Works the
// hub sends with server-side apply, keeps them applied, and reports their
// status, heartbeats and the member's capacity. See agent/setup.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/flotilla-dev/flotilla/agent/setup"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run() error {
	var opts setup.Options
	// controller-runtime registers --kubeconfig (the member cluster;
	// default: in-cluster config or $KUBECONFIG) itself.
	fs := flag.CommandLine
	fs.StringVar(&opts.HubAddress, "hub-address", "", "the hub's sync endpoint host:port; for several hub replicas comma-separated IP:port, or dns:///name:port for a name that resolves to all of them")
	fs.StringVar(&opts.ClusterName, "cluster-name", "", "this member's name (default: the one in the client certificate, which the hub goes by)")
	fs.StringVar(&opts.CertFile, "cert-file", "/etc/flotilla/certs/tls.crt", "the agent's client certificate (URI SAN flotilla://cluster/<name>)")
	fs.StringVar(&opts.KeyFile, "key-file", "/etc/flotilla/certs/tls.key", "the agent's private key")
	fs.StringVar(&opts.CAFile, "ca-file", "/etc/flotilla/certs/ca.crt", "the CA the hub's certificate chains to")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect a leader so that only one replica holds the stream and applies")
	fs.StringVar(&opts.LeaderElectionID, "leader-election-id", "flotilla-agent.flotilla.dev", "name of the leader election Lease")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", flotillav1.SystemNamespace, "namespace of the leader election Lease")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "address of the /metrics endpoint (0 disables it)")
	fs.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", 2*time.Second, "how often to heartbeat to the hub")
	fs.DurationVar(&opts.ResourceInterval, "resource-summary-interval", 10*time.Second, "how often to recompute the member's capacity")
	fs.BoolVar(&opts.CreateNamespaces, "create-namespaces", true, "create a Work's target namespace when it does not exist")
	fs.StringVar(&opts.AcceptFleetID, "accept-fleet-id", "", "serve the hub with this fleet id and record it, although this member's record (ConfigMap "+flotillav1.AgentIdentityConfigMapName+") names another fleet or cluster name: re-points the agent on purpose; remove the flag once it connected")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(logger)
	opts.Logger = logger
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the member kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	opts.Config = cfg
	ctx := ctrl.SetupSignalHandler()
	logger.Info("starting the agent", "version", setup.Version, "hub", opts.HubAddress, "leaderElection", opts.LeaderElection)
	return setup.Run(ctx, opts)
}
