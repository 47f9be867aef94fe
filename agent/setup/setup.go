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
	"github.com/prometheus/client_golang/prometheus/collectors"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/agent/capacity"
	"github.com/flotilla-dev/flotilla/agent/join"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/promreg"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/health"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/kclient/informer"
	"github.com/flotilla-dev/flotilla/pkg/leader"
	"github.com/flotilla-dev/flotilla/pkg/memberprobe"
	"github.com/flotilla-dev/flotilla/pkg/serving/metricsauth"
	"github.com/flotilla-dev/flotilla/pkg/serving/metricsserver"
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
	Lease leader.LeaseTimings
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
	// Registerer takes the agent's own metrics (metrics.go); nil means a
	// registry of the agent's own, with Go's and the process's
	// collectors, which /metrics serves. Tests give each agent its own;
	// /metrics serves it when it is also a Gatherer.
	Registerer prometheus.Registerer
}

// Agent is a wired agent and the parts tests reach into.
type Agent struct {
	process *process
	Store   *works.Store
	Sync    *syncclient.Client
	// Credentials holds the certificate the stream presents when the
	// identity comes from the agent's Secrets; nil with CertFile.
	Credentials *join.Source
	// LeaderIdentity is this replica's holder identity in the leader
	// Lease ("" without leader election); the deletion fence checks it.
	LeaderIdentity string
}

// Start runs the agent until ctx ends (nil) or it fails; a replica that
// lost its Lease returns an error saying "leader election lost".
func (a *Agent) Start(ctx context.Context) error { return a.process.Start(ctx) }

// Scheme returns the agent's scheme: only the API groups it reads and
// writes typed. It is not client-go's scheme of every group, which the
// agent does not link (docs/architecture.md, "Executable size").
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, discoveryv1.AddToScheme,
		coordinationv1.AddToScheme, metricsauth.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run runs the agent until ctx ends.
func Run(ctx context.Context, opts Options) error {
	a, err := New(opts)
	if err != nil {
		return err
	}
	return a.Start(ctx)
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
	// One client for every read the agent makes of the apiserver itself
	// (never a cache) and for every write: client-go's dynamic client,
	// typed through the agent's scheme.
	kc, err := direct.New(opts.Config, scheme)
	if err != nil {
		return nil, fmt.Errorf("agent: building the member client: %w", err)
	}
	owned, err := labels.NewRequirement(flotillav1.LabelWork, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	dependency, err := labels.NewRequirement(flotillav1.LabelDependency, selection.Equals, []string{"true"})
	if err != nil {
		return nil, err
	}
	ownedSel, dependencySel := labels.NewSelector().Add(*owned), labels.NewSelector().Add(*dependency)
	cache, err := informer.New(opts.Config, scheme, []informer.Kind{
		// Only what Flotilla applied: a member's other Deployments cost
		// the agent nothing.
		// None keeps managedFields: pkg/apply reads them live where it
		// needs them (releasing an object, naming its field managers).
		{Object: &appsv1.Deployment{}, Labels: ownedSel, DropManagedFields: true},
		{Object: &corev1.Service{}, Labels: ownedSel, DropManagedFields: true},
		// Dependencies carry no Work label (several Works share one).
		{Object: &corev1.ConfigMap{}, Labels: dependencySel, DropManagedFields: true},
		{Object: &corev1.Secret{}, Labels: dependencySel, DropManagedFields: true},
		{Object: &corev1.ServiceAccount{}, Labels: dependencySel, DropManagedFields: true},
		// A Service's EndpointSlices carry its labels.
		{Object: &discoveryv1.EndpointSlice{}, Labels: ownedSel, DropManagedFields: true},
	})
	if err != nil {
		return nil, fmt.Errorf("agent: building its cache: %w", err)
	}
	lease := opts.Lease.OrDefault(DefaultLease)
	if err := lease.Validate(); err != nil {
		return nil, err
	}
	proc := newProcess(opts.Logger)
	proc.cache = cache
	proc.probeAddr, proc.pprofAddr = opts.ProbeAddr, opts.PprofAddr

	// The registry /metrics serves: the test's, when it gives one that
	// can be gathered, else the agent's own with Go's and the process's
	// collectors.
	reg := opts.Registerer
	gatherer, _ := reg.(prometheus.Gatherer)
	if reg == nil || gatherer == nil {
		own := prometheus.NewRegistry()
		if err := own.Register(collectors.NewGoCollector()); err != nil {
			return nil, err
		}
		if err := own.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, err
		}
		if reg == nil {
			reg = own
		}
		gatherer = own
	}

	var leaseKey kclient.Key
	leaderID := ""
	if opts.LeaderElection {
		leaseKey = kclient.Key{Namespace: opts.LeaderElectionNamespace, Name: opts.LeaderElectionID}
		if leaseKey.Namespace == "" {
			leaseKey.Namespace = agentNamespace(opts)
		}
		if leaseKey.Name == "" {
			return nil, errors.New("agent: leader election needs a Lease name (--leader-election-id)")
		}
		leaderID = leader.NewIdentity(opts.Instance)
		el, err := leader.New(leader.Config{
			Client: kc, Key: leaseKey, Identity: leaderID,
			// A killed leader cannot release its Lease: a new agent
			// process waits out LeaseDuration (plus up to 2.2
			// RetryPeriods) before it heartbeats again, and that must fit
			// in the hub's heartbeat grace (docs/architecture.md, timing
			// budget).
			LeaseDuration: lease.Duration, RenewDeadline: lease.RenewDeadline, RetryPeriod: lease.RetryPeriod,
			Log: opts.Logger.WithName("leader-election"),
		})
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		proc.elector = el
		if err := promreg.Replace(reg, el.Collector()); err != nil {
			return nil, fmt.Errorf("registering the leader election metric: %w", err)
		}
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
		applyOpts.Fence = leader.Fence(kc, leaseKey, leaderID, time.Now)
	}
	// The applier reads through the cache of what Flotilla applied and
	// writes through the member client.
	applier := apply.New(cache, kc, applyOpts)
	store := works.NewStore(applier)
	am := newAgentMetrics()
	store.SetApplyObserver(am.observeApply)
	runner := &health.Runner{Works: store, Reader: kc}
	if opts.PrometheusURL != "" {
		prom, err := health.NewPrometheus(opts.PrometheusURL, nil)
		if err != nil {
			return nil, fmt.Errorf("--prometheus-url: %w", err)
		}
		runner.Prometheus = prom
	}
	store.SetHealth(runner.Status)
	proc.Add(runner)
	summarizer := &capacity.Summarizer{Reader: kc, Interval: opts.ResourceInterval}
	proc.Add(summarizer)

	ident, err := resolveIdentity(opts, kc)
	if err != nil {
		return nil, err
	}
	opts.Logger.Info("the agent's identity", "source", ident.plan.Mode.String(), "why", ident.plan.Why, "hub", ident.target)
	if ident.source != nil {
		keeper, err := join.NewKeeper(join.Config{
			Reader: kc, Writer: kc, Namespace: agentNamespace(opts),
			CredentialsSecret: opts.CredentialsSecret, BootstrapSecret: opts.BootstrapSecret,
			Cluster: ident.cluster, Target: ident.target, ServerName: ident.serverName,
			Source: ident.source, Instance: opts.Instance, Logger: opts.Logger,
		})
		if err != nil {
			return nil, err
		}
		proc.Add(keeper)
	}
	kubeVersion := memberprobe.ServerVersion(opts.Config)
	// The agent's record of the fleet it serves, checked on every hello
	// before anything is applied.
	identity := &works.FleetIdentity{
		Reader: kc, Writer: kc, Namespace: agentNamespace(opts),
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
	queueMetrics := works.NewQueueMetrics()
	if err := promreg.Replace(reg, queueMetrics.Collectors()...); err != nil {
		return nil, fmt.Errorf("registering the Work queue's metrics: %w", err)
	}
	controller := &works.Controller{Reader: cache, Store: store, Log: opts.Logger.WithName("work"), Metrics: queueMetrics}
	if err := controller.Watch(cache); err != nil {
		return nil, fmt.Errorf("setting up the Work controller: %w", err)
	}
	proc.Add(controller)
	am.state.client, am.state.store = sc, store
	if err := am.register(reg); err != nil {
		return nil, fmt.Errorf("registering the agent's metrics: %w", err)
	}
	proc.Add(leaderGauge{g: am.leader})
	check, err := memberprobe.Readyz(opts.Config)
	if err != nil {
		return nil, err
	}
	run := streamRunner(sc.Run)
	if ident.source != nil {
		run = waitForCertificate(ident.source, run)
	}
	proc.Add(newMemberGate(run, check, opts.Logger.WithName("member-gate")))
	watch := newStreamWatch(sc.State, applierOfHub, ident.target, opts.Logger.WithName("hub-stream"))
	proc.Add(watch)
	addProbes(proc, check, opts.Config.Host, watch)
	metrics, err := agentMetricsServer(opts, gatherer, kc)
	if err != nil {
		return nil, err
	}
	proc.Add(metrics)
	return &Agent{process: proc, Store: store, Sync: sc, Credentials: ident.source, LeaderIdentity: leaderID}, nil
}

// DefaultLease is the agent's leader election timings unless
// Options.Lease (--leader-election-*) sets them: a killed leader's Lease
// expires in 5 s, well inside the hub's default heartbeat grace.
var DefaultLease = leader.LeaseTimings{Duration: 5 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 500 * time.Millisecond}

// agentMetricsServer serves /metrics from gatherer: HTTPS for scrapers
// whose bearer token the member apiserver authenticates and whose
// identity may get /metrics (pkg/serving/metricsauth, reviewing through
// kc), or plain HTTP with --metrics-secure=false (the local testbed).
// Uncompressed: an agent's /metrics is small, and the gzip writer promhttp
// keeps between scrapes holds about 0.8 MB of heap on every member
// (docs/benchmarks.md, 2026-12-05 latest). The hub's, which grows with
// the fleet, stays compressed.
func agentMetricsServer(opts Options, gatherer prometheus.Gatherer, kc kclient.Client) (*metricsserver.Server, error) {
	addr := opts.MetricsAddr
	if addr == "" {
		addr = metricsserver.Disabled
	}
	o := metricsserver.Options{
		Addr: addr, Gatherer: gatherer, Secure: !opts.InsecureMetrics,
		DisableCompression: true, Log: opts.Logger.WithName("metrics"),
	}
	if o.Secure {
		o.Filter = metricsauth.NewFilter(kc, opts.Logger.WithName("metrics-auth"))
	}
	s, err := metricsserver.New(o)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return s, nil
}
