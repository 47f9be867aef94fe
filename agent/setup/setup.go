// Package setup wires the agent: a controller-runtime manager on the
// member cluster (leader-elected; its cache holds only the Deployments that
// carry the flotilla.dev/work label), the sync client that holds the stream
// to the hub, the Work store and reconciler, and the resource summarizer.
// Only the leader runs the stream, the reconciler and the summarizer; a
// replica that loses its lease exits, which stops all three at once.
package setup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/flotilla-dev/flotilla/agent/capacity"
	"github.com/flotilla-dev/flotilla/agent/internal/works"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
)

// Version is the agent's version, set at link time.
var Version = "dev"

// The agent's leader election and events.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Options configure the agent.
type Options struct {
	// Config is the member apiserver's client config.
	Config *rest.Config
	// HubAddress is the hub's sync endpoint, host:port; several hub
	// replicas may be given comma-separated as IP:port (the agent connects
	// to whichever serves: the leader).
	HubAddress string
	// ClusterName is this member's name; empty takes it from the
	// certificate, which is what the hub goes by in any case.
	ClusterName string
	// CertFile, KeyFile and CAFile are the agent's client certificate and
	// the CA the hub's certificate chains to.
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
	// MetricsAddr and ProbeAddr serve /metrics and /healthz, /readyz.
	MetricsAddr, ProbeAddr string
	// HeartbeatInterval is how often the agent heartbeats.
	HeartbeatInterval time.Duration
	// ResourceInterval is how often the resource summary is recomputed.
	ResourceInterval time.Duration
	// CreateNamespaces creates a Work's target namespace when missing.
	CreateNamespaces bool
	// Instance names this replica to the hub (default: $POD_NAME, else the
	// hostname).
	Instance string
	// Logger is the manager's logger.
	Logger logr.Logger
	// SkipNameValidation lets tests run several agents in one process.
	SkipNameValidation bool
}

// Agent is a wired agent and the parts tests reach into.
type Agent struct {
	Manager manager.Manager
	Store   *works.Store
	Sync    *syncclient.Client
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
	if opts.Config == nil || opts.HubAddress == "" {
		return nil, errors.New("agent: a member kubeconfig and --hub-address are required")
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
		if lock, leaderID, err = leaderLock(opts.Config, leaseKey.Namespace, leaseKey.Name, opts.Instance); err != nil {
			return nil, err
		}
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
		LeaseDuration:          durationPtr(agentLeaseDuration),
		RenewDeadline:          durationPtr(agentRenewDeadline),
		RetryPeriod:            durationPtr(agentRetryPeriod),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.ProbeAddr,
		Controller:             config.Controller{SkipNameValidation: &opts.SkipNameValidation},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only what Flotilla applied: a member's other Deployments
			// cost the agent nothing.
			&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*owned)},
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
	applyOpts := apply.Options{CreateNamespace: opts.CreateNamespaces, RecordNamespace: agentNamespace(opts)}
	if opts.LeaderElection {
		// Before each batch of deletions the applier checks, live, that
		// this replica still leads: a paused old leader deletes nothing.
		applyOpts.Fence = leaseFence(mgr.GetAPIReader(), leaseKey, leaderID, time.Now)
	}
	applier := apply.New(works.TypedReader{Cache: mgr.GetCache(), Scheme: scheme}, mgr.GetClient(), applyOpts)
	store := works.NewStore(applier)
	summarizer := &capacity.Summarizer{Reader: mgr.GetAPIReader(), Interval: opts.ResourceInterval}
	if err := mgr.Add(summarizer); err != nil {
		return nil, err
	}

	target, serverName, err := hubTarget(opts.HubAddress)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := pki.ClientTLSConfig(opts.CertFile, opts.KeyFile, opts.CAFile, serverName)
	if err != nil {
		return nil, fmt.Errorf("loading the agent's certificates: %w", err)
	}
	kubeVersion := ""
	if dc, err := discovery.NewDiscoveryClientForConfig(opts.Config); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			kubeVersion = v.GitVersion
		}
	}
	// The agent's record of the fleet it serves, checked on every hello
	// before anything is applied.
	identity := &fleetIdentity{
		reader: mgr.GetAPIReader(), writer: mgr.GetClient(), namespace: agentNamespace(opts),
		accept: opts.AcceptFleetID, applier: applier, log: opts.Logger.WithName("fleet-identity"),
	}
	sc, err := syncclient.New(syncclient.Config{
		Address:           target,
		TLS:               tlsCfg,
		Cluster:           opts.ClusterName,
		Applier:           store,
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
	check, err := readyzCheck(opts.Config)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(newMemberGate(sc.Run, check, opts.Logger.WithName("member-gate"))); err != nil {
		return nil, err
	}
	if err := (&works.Reconciler{Reader: mgr.GetCache(), Store: store}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the Work reconciler: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return &Agent{Manager: mgr, Store: store, Sync: sc, LeaderIdentity: leaderID}, nil
}

// The agent's leader election timings.
const (
	agentLeaseDuration = 5 * time.Second
	agentRenewDeadline = 4 * time.Second
	agentRetryPeriod   = 500 * time.Millisecond
)

func durationPtr(d time.Duration) *time.Duration { return &d }
