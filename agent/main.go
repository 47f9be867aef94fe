// Command agent is Flotilla's per-member agent: leader-elected in its
// member cluster, it holds the gRPC stream to the hub, applies the Works the
// hub sends with server-side apply, keeps them applied, and reports their
// status, heartbeats and the member's capacity. See agent/setup.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	"github.com/flotilla-dev/flotilla/agent/setup"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/reexec"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

// defaultGOGC is the agent's GOGC unless the environment sets one: the
// heap may grow by half its live size between collections, not Go's
// default of all of it. An agent at rest holds little (the Works and the
// caches of what it applied) and collects rarely, so the smaller headroom
// costs little CPU and is resident memory the member gets back
// (docs/benchmarks.md, issue 21).
const defaultGOGC = 50

// defaultMemProfileRate is Go's own default of runtime.MemProfileRate.
const defaultMemProfileRate = 512 * 1024

func run() error {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGOGC)
	}
	var opts setup.Options
	// controller-runtime registers --kubeconfig (the member cluster;
	// default: in-cluster config or $KUBECONFIG) itself.
	fs := flag.CommandLine
	fs.StringVar(&opts.HubAddress, "hub-address", "", "the hub's sync endpoint host:port; for several hub replicas comma-separated IP:port, or dns:///name:port for a name that resolves to all of them (default: the one in the agent's Secrets; required with --cert-file)")
	fs.StringVar(&opts.ClusterName, "cluster-name", "", "this member's name (default: the one in the agent's Secrets or client certificate, which the hub goes by)")
	fs.StringVar(&opts.CredentialsSecret, "credentials-secret", flotillav1.AgentCredentialsSecretName, "the Secret in the agent's namespace where it keeps its key, certificate and hub CA (the join flow)")
	fs.StringVar(&opts.BootstrapSecret, "bootstrap-secret", flotillav1.AgentBootstrapSecretName, "the Secret in the agent's namespace that `kubectl flotilla join` writes (hub address, token, CA hash, cluster name); deleted once the agent holds a certificate")
	fs.StringVar(&opts.CertFile, "cert-file", "/etc/flotilla/certs/tls.crt", "the agent's client certificate (URI SAN flotilla://cluster/<name>) from flotilla-pki; used only when neither Secret gives an identity")
	fs.StringVar(&opts.KeyFile, "key-file", "/etc/flotilla/certs/tls.key", "the agent's private key, with --cert-file")
	fs.StringVar(&opts.CAFile, "ca-file", "/etc/flotilla/certs/ca.crt", "the CA the hub's certificate chains to, with --cert-file")
	fs.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect a leader so that only one replica holds the stream and applies")
	fs.StringVar(&opts.LeaderElectionID, "leader-election-id", "flotilla-agent.flotilla.dev", "name of the leader election Lease")
	fs.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", defaultNamespace(), "namespace of the leader election Lease, the agent's Secrets and its records ($POD_NAMESPACE, else "+flotillav1.SystemNamespace+")")
	fs.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "address of the /metrics endpoint (0 disables it)")
	metricsSecure := fs.Bool("metrics-secure", true, "serve /metrics over HTTPS to bearer tokens the member apiserver authenticates whose identity may get /metrics (ClusterRole flotilla-metrics-reader); false serves plain HTTP to anyone, for local testbeds only")
	fs.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&opts.PprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof profiles, plain HTTP without authentication (empty disables; e.g. 127.0.0.1:6061, then kubectl port-forward)")
	fs.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", 2*time.Second, "how often to heartbeat to the hub")
	fs.DurationVar(&opts.ResourceInterval, "resource-summary-interval", 10*time.Second, "how often to recompute the member's capacity")
	fs.BoolVar(&opts.CreateNamespaces, "create-namespaces", true, "create a Work's target namespace when it does not exist")
	fs.StringVar(&opts.DeniedNamespaces, "denied-namespaces", setup.DefaultDeniedNamespaces, "comma-separated globs ('*', '?') of member namespaces no Work may write into; a Work naming one is not applied at all (reason NamespaceDenied). An empty value means the default. The agent's own namespace is always denied as well, even when this flag is overridden; cluster-scoped objects are always refused")
	fs.StringVar(&opts.AllowedNamespaces, "allowed-namespaces", "", "comma-separated globs ('*', '?') of the only member namespaces Works may write into; empty allows every namespace --denied-namespaces does not deny")
	fs.StringVar(&opts.DefaultPodSecurity, "default-pod-security", string(flotillav1.PodSecurityBaseline), "Pod Security Admission level (privileged, baseline or restricted) enforced on a namespace the agent creates for a Work whose spec.podSecurity is empty; existing namespaces are never relabelled")
	fs.StringVar(&opts.PrometheusURL, "prometheus-url", "", "this member's Prometheus (e.g. http://prometheus.monitoring:9090), queried by the Prometheus signals of MyApps' spec.placement.healthShift; empty makes those signals Unknown (nothing shifts on them)")
	fs.StringVar(&opts.AcceptFleetID, "accept-fleet-id", "", "serve the hub with this fleet id and record it, although this member's record (ConfigMap "+flotillav1.AgentIdentityConfigMapName+") names another fleet or cluster name: re-points the agent on purpose; remove the flag once it connected")
	opts.Lease = setup.DefaultLease
	opts.Lease.AddFlags(fs)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()
	if err := opts.Lease.Validate(); err != nil {
		return err
	}

	opts.InsecureMetrics = !*metricsSecure
	// The shipped manifests start the agent with GODEBUG=memprofilerate=0:
	// with no /debug/pprof to serve them, heap profile samples are memory
	// for nothing (the profiler's table of stacks, about 1.2 MiB resident
	// at rest; docs/benchmarks.md). Asked to serve pprof, the agent samples
	// again, at Go's default rate, from here on.
	if opts.PprofAddr != "" && runtime.MemProfileRate == 0 {
		runtime.MemProfileRate = defaultMemProfileRate
	}

	logger := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrllog.SetLogger(logger)
	opts.Logger = logger
	cfg, err := config.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the member kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	opts.Config = cfg
	ctx := signals.SetupSignalHandler()
	logger.Info("starting the agent", "version", setup.Version, "hub", opts.HubAddress, "leaderElection", opts.LeaderElection, "lostLeaseRestarts", reexec.Restarts())
	err = setup.Run(ctx, opts)
	// A lost Lease starts over in place rather than exit into the
	// kubelet's CrashLoopBackOff (internal/reexec).
	return reexec.AfterRun(ctx, logger, err)
}

// defaultNamespace is the agent's namespace: its pod's, else
// flotilla-system.
func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return flotillav1.SystemNamespace
}
