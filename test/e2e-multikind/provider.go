//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// ClusterProvider is a running Flotilla: a hub cluster with the hub
// running in or beside it, and member clusters with their agents. Specs
// reach the clusters and disturb them only through it, so the same spec
// runs against the local testbed and against kind.
type ClusterProvider interface {
	// Name is the provider's name, as given to -provider.
	Name() string
	// HubConfig is an admin client config of the hub cluster.
	HubConfig() *rest.Config
	// Hub is an admin client of the hub cluster.
	Hub() client.Client
	// MemberNames lists the members by their MemberCluster names, in
	// order (member-1, member-2, ...).
	MemberNames() []string
	// Member is an admin client of the member called name.
	Member(name string) client.Client
	// SyncMode is how the member receives its Works: Pull (its agents
	// hold a stream to the hub) or Push (no agent: the hub applies them).
	// Specs that kill, pause or restart agents pick a Pull member.
	SyncMode(member string) flotillav1.SyncMode

	// StopMember takes the member's control plane away, as an outage
	// would: its agent loses its apiserver and stops heartbeating.
	StopMember(ctx context.Context, name string) error
	// StartMember brings the member's control plane back and returns
	// once its apiserver answers.
	StartMember(ctx context.Context, name string) error
	// AgentLeader names the agent replica of member that holds the
	// leader election Lease and the stream to the hub, as it reports
	// itself to the hub (MemberCluster status.agent.instance).
	AgentLeader(ctx context.Context, member string) (string, error)
	// KillAgent kills the agent replica called name in member without a
	// chance to release its Lease; it is started again, as a pod would be.
	KillAgent(ctx context.Context, member, name string) error
	// AgentReplicas names every agent replica of member, as KillAgent
	// takes them.
	AgentReplicas(ctx context.Context, member string) ([]string, error)
	// PauseAgent freezes the agent replica called name in member, as a
	// stalled node or a stop-the-world pause would: its process gets
	// SIGSTOP, keeps its memory and its connections (what the hub sends
	// waits in its socket), and neither renews its Lease nor reads its
	// stream until resumed. Providers that cannot pause a process return
	// an error wrapping errors.ErrUnsupported, and the specs that need it
	// skip.
	PauseAgent(ctx context.Context, member, name string) (PausedAgent, error)
	// RestartHub restarts the hub as a rolling update would (SIGTERM,
	// then a new process) and returns once it was asked to stop.
	RestartHub(ctx context.Context) error
	// KillHub kills the leading hub without a chance to release its
	// Lease (SIGKILL, or its pod deleted at once); it is started again.
	KillHub(ctx context.Context) error

	// CollectLogs writes the hub's and agents' logs into dir.
	CollectLogs(ctx context.Context, dir string) error
	// Stop releases what the provider started (nothing for kind).
	Stop() error
}

// SyncModeSwitcher is a provider that can switch a member between Pull
// and Push as an admin would (the testbed); the specs that need it skip
// elsewhere.
type SyncModeSwitcher interface {
	// SetSyncMode switches member to mode: to Push, its agents stop, its
	// kubeconfig Secret is written in the hub's flotilla-system and its
	// MemberCluster names it; to Pull, its MemberCluster says Pull and
	// its agents start again. It returns without waiting for the hub.
	SetSyncMode(ctx context.Context, member string, mode flotillav1.SyncMode) error
}

// MemberKiller is a provider whose StopMember shuts a member down over
// seconds that vary (kind: docker stop lets the node's systemd stop its
// units; two nodes stopped at the same instant died 3.5 s and 8.8 s
// later), and that can also stop one at an instant (docker kill).
// stopMembers kills when it stops several members, so that they fall
// silent together, as a partition's do; one member lost alone is stopped.
type MemberKiller interface {
	// KillMember stops member's control plane at once, without a
	// shutdown; StartMember brings it back as after StopMember.
	KillMember(ctx context.Context, member string) error
}

// Partitioner is a provider that can cut a member off the network the hub
// and the other members are on, as a network partition would, while the
// member itself keeps running (kind: docker network disconnect of its
// node). The specs that need it skip elsewhere.
type Partitioner interface {
	// PartitionMember cuts member off: its agent cannot reach the hub, and
	// the suite reaches it only through DeploymentUIDsInside.
	PartitionMember(ctx context.Context, member string) error
	// HealMember connects member again, at the address it had, and
	// returns once its apiserver answers the suite.
	HealMember(ctx context.Context, member string) error
	// DeploymentUIDsInside lists the Deployments of namespace in member
	// (name -> UID), read from inside the member, so that it works while
	// the member is cut off.
	DeploymentUIDsInside(ctx context.Context, member, namespace string) (map[string]string, error)
}

// MetricsProvider is a provider that can give members a Prometheus whose
// data a spec controls (the testbed): the health-shift specs' Prometheus
// signals query it through the agents' --prometheus-url, and skip on
// providers that cannot.
type MetricsProvider interface {
	// StartPrometheus gives each member (in Pull mode) a Prometheus that
	// scrapes the provider's test exporter every second, and starts the
	// member's agents again with --prometheus-url pointing at it. It
	// returns once every Prometheus has scraped the exporter and an agent
	// of every member leads again.
	StartPrometheus(ctx context.Context, members ...string) error
	// StopPrometheus undoes StartPrometheus: the agents run without
	// --prometheus-url again and the Prometheus servers are stopped.
	StopPrometheus(ctx context.Context, members ...string) error
	// SetGauge sets the gauge name{cluster="<member>"} in the exporter
	// member's Prometheus scrapes; the next scrape sees it.
	SetGauge(member, name string, value float64) error
	// DeleteGauge removes that gauge: queries for it return nothing.
	DeleteGauge(member, name string) error
}

// LostLeaseRestarts is a provider that can say how often each agent
// process of a member started over in place after it lost its Lease
// (the agent execs itself; the container's restart count does not show
// it), for a failed teardown's diagnosis.
type LostLeaseRestarts interface {
	// LostLeaseRestarts counts, by pod, the agent log lines that say so.
	LostLeaseRestarts(ctx context.Context, member string) (map[string]int, error)
}

// EgressGuard is a provider whose members are nodes on a network the
// tests created, which can check that traffic stays in it: a connection
// to an address of the Service range no Service holds, and one to an
// address outside that network, are refused inside the node, from the
// node and from an agent pod, rather than routed out of it to whatever
// answers beyond.
type EgressGuard interface {
	// TrafficStaysInside says what was not refused, or nil.
	TrafficStaysInside(ctx context.Context, member string) error
}

// PausedAgent is one agent process that PauseAgent froze: that process,
// by the PID it had, not whichever process runs under the replica's name
// later.
type PausedAgent interface {
	// Resume lets the process run again (SIGCONT). Resuming twice, or a
	// process that has ended, does nothing.
	Resume() error
	// Exited says whether the process has ended.
	Exited() bool
	// String names the replica and the process.
	String() string
}

// Names the hub and agents use in every install (their flags' defaults,
// which test/fleet and deploy/ keep).
const (
	// systemNamespace holds the leader election Leases, in the hub and in
	// every member.
	systemNamespace = "flotilla-system"
	// hubLease and agentLease are the leader election Leases.
	hubLease   = "flotilla-hub.flotilla.dev"
	agentLease = "flotilla-agent.flotilla.dev"
)

// Flags of the suite; pass them after -args.
var (
	providerFlag     = flag.String("provider", "testbed", "where the suite runs: testbed (local control-plane processes, started and stopped by the suite) or kind (existing clusters from -hub-kubeconfig and -member-kubeconfigs)")
	artifactsFlag    = flag.String("artifacts", "artifacts", "folder for what failing specs leave behind: objects of every cluster and hub / agent logs (relative paths are relative to test/e2e-multikind)")
	hubKubeconfig    = flag.String("hub-kubeconfig", "", "kind: kubeconfig of the hub cluster")
	memberKubeconfig = flag.String("member-kubeconfigs", "", "kind: comma-separated kubeconfigs of the member clusters, in member order")
	pushMembersFlag  = flag.String("push-members", "member-3", "testbed: comma-separated members in Push mode (no agent; the hub applies their Works); empty for an all-pull fleet")
)

// pushMembers are the members -push-members names.
func pushMembers() []string {
	var out []string
	for _, m := range strings.Split(*pushMembersFlag, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// startProvider starts (testbed) or connects to (kind) the clusters named
// by the flags. artifacts receives logs when starting fails.
func startProvider(ctx context.Context, artifacts string) (ClusterProvider, error) {
	switch *providerFlag {
	case "testbed":
		return startTestbed(ctx, artifacts)
	case "kind":
		var members []string
		for _, p := range strings.Split(*memberKubeconfig, ",") {
			if p = strings.TrimSpace(p); p != "" {
				members = append(members, p)
			}
		}
		return connectKind(ctx, *hubKubeconfig, members)
	default:
		return nil, fmt.Errorf("-provider=%q: want testbed or kind", *providerFlag)
	}
}
