// Package setup wires the agent: a controller-runtime manager on the
// member cluster (leader-elected; its cache holds only the Deployments that
// carry the flotilla.dev/work label), the sync client that holds the stream
// to the hub, the Work store and reconciler, and the resource summarizer.
// Only the leader runs the stream, the reconciler and the summarizer, and
// (when the identity comes from Secrets, agent/join) joins and renews the
// certificate; a replica that loses its lease exits, which stops them all
// at once.
package setup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/agent/capacity"
	"github.com/flotilla-dev/flotilla/agent/join"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/health"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
	"github.com/flotilla-dev/flotilla/pkg/leader"
	"github.com/flotilla-dev/flotilla/pkg/memberprobe"
	"github.com/flotilla-dev/flotilla/pkg/serving"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/works"
)

// Version is the agent's version, set at link time.
var Version = "dev"

// What the applier (pkg/apply, driven by pkg/works) needs. A Work's
// Deployment may go to any namespace the hub's policy allows, so
// Deployments (and the namespaces the agent creates for them) stay
// cluster-wide. The applied-set records are ConfigMaps in the agent's own
// namespace (apply.Options.RecordNamespace), so ConfigMaps are granted only
// there, by the namespaced Role.
//
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;secrets;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;create;update;delete,namespace=flotilla-system

// The agent's leader election and its events (leader election is all it
// records events for, on its Lease) live in the agent's own namespace, so
// the markers make a namespaced Role there: the agent cannot touch another
// component's Lease (kube-node-lease's node heartbeats above all) or write
// events anywhere else. deploy/agent installs the agent in flotilla-system;
// an agent run with another --leader-election-namespace needs the Role and
// its RoleBinding moved there too.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=flotilla-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=flotilla-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch,namespace=flotilla-system

// Serving /metrics securely (the default) authenticates each scrape with
// a TokenReview and authorizes it with a SubjectAccessReview.
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Options configure the agent.
type Options struct {
	// Config is the member apiserver's client config.
	Config *rest.Config
	// HubAddress is the hub's sync endpoint, host:port; several hub
	// replicas may be given comma-separated as IP:port (the agent connects
	// to whichever serves: the leader). Empty means the one in the
	// agent's Secrets; it is required with CertFile.
	HubAddress string
	// ClusterName is this member's name; empty takes it from the
	// certificate, which is what the hub goes by in any case.
	ClusterName string
	// CredentialsSecret and BootstrapSecret name the Secrets in the
	// agent's namespace that hold its identity (agent/join): the key and
	// certificate it keeps, and what `kubectl flotilla join` wrote. Empty
	// means flotilla-agent-credentials and flotilla-agent-bootstrap.
	CredentialsSecret, BootstrapSecret string
	// CertFile, KeyFile and CAFile are the agent's client certificate and
	// the CA the hub's certificate chains to, from flotilla-pki: used
	// when neither Secret gives an identity.
	CertFile, KeyFile, CAFile string
	// LeaderElection, LeaderElectionID and LeaderElectionNamespace
	// configure the Lease in the member that picks the leader.
	LeaderElection          bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// Namespace is the agent's namespace in the member, which holds its
	// record of the fleet it serves (ConfigMap flotilla-agent-identity).
	// Empty means LeaderElectionNamespace, else $POD_NAMESPACE, else
	// flotilla-system.
	Namespace string
	// AcceptFleetID re-points the agent on purpose: a hub with this fleet
	// id is served, and recorded, although the agent's record names another
	// fleet or cluster name (--accept-fleet-id). Remove it once the agent
	// has connected.
	AcceptFleetID string
	// Lease are the leader election timings (DefaultLease when zero).
	// The Lease duration plus a little must fit in the hub's heartbeat
	// grace: a replica replacing a killed leader heartbeats only then.
	Lease serving.LeaseTimings
	// MetricsAddr and ProbeAddr serve /metrics and /healthz, /readyz.
	MetricsAddr, ProbeAddr string
	// PprofAddr serves Go's /debug/pprof (empty: off). Plain HTTP with no
	// authentication: bind it to loopback.
	PprofAddr string
	// InsecureMetrics serves /metrics as plain HTTP open to anyone who
	// reaches it (--metrics-secure=false, for the local testbed). The
	// zero value serves HTTPS and admits only bearer tokens the member
	// apiserver authenticates whose identity may get /metrics
	// (pkg/serving).
	InsecureMetrics bool
	// HeartbeatInterval is how often the agent heartbeats.
	HeartbeatInterval time.Duration
	// ResourceInterval is how often the resource summary is recomputed.
	ResourceInterval time.Duration
	// CreateNamespaces creates a Work's target namespace when missing,
	// labelled as Flotilla's and with a Pod Security level (see
	// apply.Options.CreateNamespace).
	CreateNamespaces bool
	// DeniedNamespaces are comma-separated globs of the member namespaces
	// no Work may write into (--denied-namespaces); empty means
	// DefaultDeniedNamespaces. The agent's own namespace (see Namespace)
	// is always denied as well.
	DeniedNamespaces string
	// AllowedNamespaces, when not empty, are comma-separated globs of the
	// only member namespaces Works may write into (--allowed-namespaces).
	AllowedNamespaces string
	// DefaultPodSecurity is the Pod Security level of a namespace the
	// agent creates for a Work without spec.podSecurity
	// (--default-pod-security: privileged, baseline or restricted; empty
	// means baseline).
	DefaultPodSecurity string
	// PrometheusURL is the member's Prometheus, which answers the
	// Prometheus signals of health shifts; empty makes them Unknown.
	PrometheusURL string
	// Instance names this replica to the hub (default: $POD_NAME, else the
	// hostname).
	Instance string
	// Logger is the manager's logger.
	Logger logr.Logger
	// SkipNameValidation lets tests run several agents in one process.
	SkipNameValidation bool
	// Registerer takes the agent's own metrics (metrics.go); nil means
	// controller-runtime's registry, which /metrics serves. Tests give
	// each agent its own.
	Registerer prometheus.Registerer
}

// Agent is a wired agent and the parts tests reach into.
type Agent struct {
	Manager manager.Manager
	Store   *works.Store
	Sync    *syncclient.Client
	// Credentials holds the certificate the stream presents when the
	// identity comes from the agent's Secrets; nil with CertFile.
	Credentials *join.Source
	// LeaderIdentity is this replica's holder identity in the leader
	// Lease ("" without leader election); the deletion fence checks it.
	LeaderIdentity string
}

// Scheme returns the agent's scheme (core types).
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs the agent until ctx ends.
func Run(ctx context.Context, opts Options) error {
	a, err := New(opts)
	if err != nil {
		return err
	}
	return a.Manager.Start(ctx)
}

// New builds the agent, ready to Start.
func New(opts Options) (*Agent, error) {
	if opts.Config == nil {
		return nil, errors.New("agent: a member kubeconfig is required")
	}
	namespaces, podSecurity, err := namespacePolicy(opts.DeniedNamespaces, opts.AllowedNamespaces, opts.DefaultPodSecurity, agentNamespace(opts))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if opts.Instance == "" {
		opts.Instance = os.Getenv("POD_NAME")
	}
	if opts.Instance == "" {
		opts.Instance, _ = os.Hostname()
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	owned, err := labels.NewRequirement(flotillav1.LabelWork, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	dependency, err := labels.NewRequirement(flotillav1.LabelDependency, selection.Equals, []string{"true"})
	if err != nil {
		return nil, err
	}
	// The agent builds its leader lock itself so that it knows its own
	// holder identity, which the deletion fence checks.
	var lock resourcelock.Interface
	var leaseKey client.ObjectKey
	leaderID := ""
	if opts.LeaderElection {
		leaseKey = client.ObjectKey{Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionID}
		if leaseKey.Namespace == "" {
			leaseKey.Namespace = agentNamespace(opts)
		}
		if leaseKey.Name == "" {
			return nil, errors.New("agent: leader election needs a Lease name (--leader-election-id)")
		}
		if lock, leaderID, err = leader.Lock(opts.Config, leaseKey.Namespace, leaseKey.Name, opts.Instance); err != nil {
			return nil, err
		}
	}
	lease := opts.Lease.OrDefault(DefaultLease)
	if err := lease.Validate(); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(opts.Config, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        opts.Logger,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID,
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		// A killed leader cannot release its Lease: a new agent process
		// waits out LeaseDuration (plus up to 2.2 RetryPeriods) before it
		// heartbeats again, and that must fit in the hub's heartbeat grace
		// (docs/architecture.md, timing budget).
		LeaseDuration:          durationPtr(lease.Duration),
		RenewDeadline:          durationPtr(lease.RenewDeadline),
		RetryPeriod:            durationPtr(lease.RetryPeriod),
		Metrics:                agentMetricsOptions(opts.MetricsAddr, !opts.InsecureMetrics),
		HealthProbeBindAddress: opts.ProbeAddr,
		PprofBindAddress:       opts.PprofAddr,
		Controller:             config.Controller{SkipNameValidation: &opts.SkipNameValidation},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only what Flotilla applied: a member's other Deployments
			// cost the agent nothing.
			&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*owned)},
			&corev1.Service{}:    {Label: labels.NewSelector().Add(*owned)},
			// Dependencies carry no Work label (several Works share one).
			&corev1.ConfigMap{}:      {Label: labels.NewSelector().Add(*dependency)},
			&corev1.Secret{}:         {Label: labels.NewSelector().Add(*dependency)},
			&corev1.ServiceAccount{}: {Label: labels.NewSelector().Add(*dependency)},
			// A Service's EndpointSlices carry its labels.
			&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*owned)},
		}},

		// Nil unless leader election is on: then the agent's own lock,
		// whose holder identity the fence knows.
		LeaderElectionResourceLockInterface: lock,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the agent manager: %w", err)
	}

	// The applied set lives beside the identity record, in the agent's
	// namespace, which the identity check creates if missing before the
	// first apply.
	// The namespace policy is checked again here, whatever the hub
	// decided: a hub that is wrong, or a Work written past its webhook,
	// still cannot reach the member's system namespaces or this one.
	applyOpts := apply.Options{
		CreateNamespace:    opts.CreateNamespaces,
		DefaultPodSecurity: podSecurity,
		Namespaces:         &namespaces,
		RecordNamespace:    agentNamespace(opts),
		Kinds:              apply.WorkKinds,
	}
	if opts.LeaderElection {
		// Before each batch of deletions the applier checks, live, that
		// this replica still leads: a paused old leader deletes nothing.
		applyOpts.Fence = leader.Fence(crclient.Reader(mgr.GetAPIReader()), leaseKey, leaderID, time.Now)
	}
	// The applier reads through the manager's cache of what Flotilla
	// applied and writes through the manager's client. pkg/kclient/direct
	// is the writer an agent without controller-runtime will pass; while
	// the manager stays, both clients' code would be resident (measured:
	// about 1.5 MiB more RSS at rest, docs/benchmarks.md), so not yet.
	applier := apply.New(crclient.Reader(works.TypedReader{Cache: mgr.GetCache(), Scheme: scheme}), crclient.Client(mgr.GetClient()), applyOpts)
	store := works.NewStore(applier)
	am := newAgentMetrics()
	store.SetApplyObserver(am.observeApply)
	runner := &health.Runner{Works: store, Reader: crclient.Reader(mgr.GetClient())}
	if opts.PrometheusURL != "" {
		prom, err := health.NewPrometheus(opts.PrometheusURL, nil)
		if err != nil {
			return nil, fmt.Errorf("--prometheus-url: %w", err)
		}
		runner.Prometheus = prom
	}
	store.SetHealth(runner.Status)
	if err := mgr.Add(runner); err != nil {
		return nil, err
	}
	summarizer := &capacity.Summarizer{Reader: crclient.Reader(mgr.GetAPIReader()), Interval: opts.ResourceInterval}
	if err := mgr.Add(summarizer); err != nil {
		return nil, err
	}

	ident, err := resolveIdentity(opts, scheme)
	if err != nil {
		return nil, err
	}
	opts.Logger.Info("the agent's identity", "source", ident.plan.Mode.String(), "why", ident.plan.Why, "hub", ident.target)
	if ident.source != nil {
		keeper, err := join.NewKeeper(join.Config{
			Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: agentNamespace(opts),
			CredentialsSecret: opts.CredentialsSecret, BootstrapSecret: opts.BootstrapSecret,
			Cluster: ident.cluster, Target: ident.target, ServerName: ident.serverName,
			Source: ident.source, Instance: opts.Instance, Logger: opts.Logger,
		})
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(keeper); err != nil {
			return nil, err
		}
	}
	kubeVersion := memberprobe.ServerVersion(opts.Config)
	// The agent's record of the fleet it serves, checked on every hello
	// before anything is applied.
	identity := &works.FleetIdentity{
		Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Namespace: agentNamespace(opts),
		Accept: opts.AcceptFleetID, Applier: applier, Log: opts.Logger.WithName("fleet-identity"),
	}
	// The Store, noting when the hub refuses this agent (hub-stream check).
	applierOfHub := &standDownRecorder{Store: store}
	sc, err := syncclient.New(syncclient.Config{
		Address:           ident.target,
		TLS:               ident.tls,
		Cluster:           ident.cluster,
		Applier:           observedStore{standDownRecorder: applierOfHub, m: am},
		Identity:          identity,
		Resources:         summarizer.Latest,
		AgentVersion:      Version,
		Instance:          opts.Instance,
		KubernetesVersion: kubeVersion,
		Logger:            opts.Logger,
		HeartbeatInterval: opts.HeartbeatInterval,
	})
	if err != nil {
		return nil, err
	}
	store.SetReporter(sc)
	am.state.client, am.state.store = sc, store
	if err := am.register(opts.Registerer); err != nil {
		return nil, fmt.Errorf("registering the agent's metrics: %w", err)
	}
	if err := mgr.Add(leaderGauge{g: am.leader}); err != nil {
		return nil, err
	}
	check, err := memberprobe.Readyz(opts.Config)
	if err != nil {
		return nil, err
	}
	run := streamRunner(sc.Run)
	if ident.source != nil {
		run = waitForCertificate(ident.source, run)
	}
	if err := mgr.Add(newMemberGate(run, check, opts.Logger.WithName("member-gate"))); err != nil {
		return nil, err
	}
	if err := (&works.Reconciler{Reader: mgr.GetCache(), Store: store}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the Work reconciler: %w", err)
	}
	watch := newStreamWatch(sc.State, applierOfHub, ident.target, opts.Logger.WithName("hub-stream"))
	if err := mgr.Add(watch); err != nil {
		return nil, err
	}
	if err := addProbes(mgr, check, opts.Config.Host, watch); err != nil {
		return nil, err
	}
	return &Agent{Manager: mgr, Store: store, Sync: sc, Credentials: ident.source, LeaderIdentity: leaderID}, nil
}

// DefaultLease is the agent's leader election timings unless
// Options.Lease (--leader-election-*) sets them: a killed leader's Lease
// expires in 5 s, well inside the hub's default heartbeat grace.
var DefaultLease = serving.LeaseTimings{Duration: 5 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 500 * time.Millisecond}

func durationPtr(d time.Duration) *time.Duration { return &d }

// agentMetricsOptions are pkg/serving's /metrics options, uncompressed:
// an agent's /metrics is small, and the gzip writer promhttp keeps between
// scrapes holds about 0.8 MB of heap on every member (docs/benchmarks.md,
// 2026-12-05 latest). The hub's, which grows with the fleet, stays
// compressed.
func agentMetricsOptions(addr string, secure bool) metricsserver.Options {
	o := serving.MetricsOptions(addr, secure)
	o.HandlerOpts = append(o.HandlerOpts, func(h *promhttp.HandlerOpts) { h.DisableCompression = true })
	return o
}
