package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/hubca"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// Config describes a local fleet.
type Config struct {
	// Dir holds the clusters, certificates and logs.
	Dir string
	// BinDir holds the control-plane binaries.
	BinDir string
	// FlotillaBinDir holds the hub and agent binaries (default BinDir).
	FlotillaBinDir string
	// CRDDir holds Flotilla's CRDs (deploy/hub/crds).
	CRDDir string
	// Members are the member clusters (default testbed.DefaultMembers(3)).
	Members []testbed.ClusterSpec
	// AgentReplicas is the number of agent processes per member (default 1).
	AgentReplicas int
	// HeartbeatGrace is the hub's --heartbeat-grace (default: the hub's).
	HeartbeatGrace time.Duration
	// HeartbeatInterval is the agents' --heartbeat-interval (default 1s;
	// negative: the agent's own default).
	HeartbeatInterval time.Duration
	// Webhook serves and registers the hub's admission webhook.
	Webhook bool
	// Progress receives one line per step when set.
	Progress io.Writer
	// CertificateLifetime is the hub's --agent-certificate-lifetime and
	// --serving-certificate-lifetime (default: the hub's, 30 days).
	CertificateLifetime time.Duration
	// BareMembers is how many of the last Members are started as clusters
	// only: no agent, no MemberCluster. A test joins them itself (with
	// kubectl-flotilla join, then StartAgents).
	BareMembers int
	// PushMembers names members (of those the fleet joins) that run no
	// agent: the fleet writes their admin kubeconfig into the Secret
	// PushSecretName(name) in the hub's flotilla-system and creates their
	// MemberClusters in Push mode, and the hub applies their Works.
	PushMembers []string
	// Prometheus starts, for every member the fleet joins in Pull mode, a
	// real Prometheus (bin/prometheus) scraping the fleet's test exporter
	// every second, and runs the member's agents with --prometheus-url
	// pointing at it (see StartPrometheus, which does the same later for
	// chosen members). Off by default: nothing else pays for it.
	Prometheus bool
	// SecureMetrics runs the hub and the agents with their shipped
	// /metrics: HTTPS, admitting only bearer tokens their apiserver
	// authorizes (ClusterRole flotilla-metrics-reader). The fleet scrapes
	// them (Metrics, HubMetrics, StartFleetPrometheus) with the token of a
	// ServiceAccount of its own in each cluster. Off: plain HTTP, which a
	// curl on the laptop reads.
	SecureMetrics bool
	// MetricsReaderRole is the ClusterRole file the fleet binds its
	// scraper to; default CRDDir/../metrics_reader_role.yaml (the one
	// deploy/hub ships).
	MetricsReaderRole string
	// Pprof runs the hub and the agents with --pprof-bind-address on a
	// free loopback port each (Supervised.PprofAddr, HubPprofAddr,
	// AgentPprofAddr). Off by default.
	Pprof bool
}

// Fleet is a running local Flotilla.
type Fleet struct {
	cfg Config
	// Testbed holds the clusters.
	Testbed *testbed.Testbed
	// CAHash pins the hub CA (sha256:...), as a join command carries it.
	CAHash string
	// Token is the bootstrap token the fleet's members joined with
	// (multi-use, auto-accept).
	Token string
	// Hub is a client of the hub cluster.
	Hub client.Client
	// HubConfig is the hub cluster's admin config.
	HubConfig *rest.Config

	scheme   *runtime.Scheme
	members  map[string]client.Client
	syncAddr string
	// ca is the hub CA (it signs agent credentials for a member switched
	// from Push to Pull that never joined).
	ca *pki.KeyPair

	mu     sync.Mutex
	hub    *Supervised
	agents map[string][]*Supervised
	// push holds the members in Push mode.
	push map[string]bool
	// prometheus holds the members' Prometheus servers (StartPrometheus);
	// their agents run with --prometheus-url.
	prometheus map[string]*testbed.Prometheus
	// exporter serves the gauges the members' Prometheus servers scrape;
	// started with the first of them.
	exporter *testbed.Exporter
	// fleetProm scrapes the hub and the agents (StartFleetPrometheus).
	fleetProm *testbed.Prometheus
	// metricsTokens are the scraper's tokens by cluster ("hub" or a
	// member), with SecureMetrics.
	metricsTokens map[string]string
	// agentAddrs are each agent replica's metrics, probe and pprof (""
	// without Config.Pprof) addresses, kept when it is started again so
	// that a scrape config stays true.
	agentAddrs map[string][3]string
}

// Scheme returns a scheme with core types and Flotilla's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = flotillav1.AddToScheme(s)
	// HTTPRoutes, whose weights a MyApp's spec.traffic.httpRoute moves.
	_ = gatewayv1.Install(s)
	return s
}

func (f *Fleet) logf(format string, args ...any) {
	if f.cfg.Progress != nil {
		fmt.Fprintf(f.cfg.Progress, format+"\n", args...)
	}
}

// Start brings the fleet up and waits until every MemberCluster is Ready.
// On error everything started is stopped.
func Start(ctx context.Context, cfg Config) (f *Fleet, err error) {
	if cfg.Members == nil {
		cfg.Members = testbed.DefaultMembers(3)
	}
	if cfg.AgentReplicas == 0 {
		cfg.AgentReplicas = 1
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.BinDir == "" {
		cfg.BinDir = testbed.DefaultBinDir()
	}
	if cfg.FlotillaBinDir == "" {
		cfg.FlotillaBinDir = cfg.BinDir
	}
	if err := checkPushMembers(cfg); err != nil {
		return nil, err
	}
	for _, b := range []string{"hub", "agent"} {
		if _, err := os.Stat(filepath.Join(cfg.FlotillaBinDir, b)); err != nil {
			return nil, fmt.Errorf("%s binary missing in %s (run `make build`): %w", b, cfg.FlotillaBinDir, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	f = &Fleet{cfg: cfg, scheme: Scheme(), members: map[string]client.Client{}, agents: map[string][]*Supervised{}, push: map[string]bool{},
		prometheus: map[string]*testbed.Prometheus{}, agentAddrs: map[string][3]string{}}
	for _, name := range cfg.PushMembers {
		f.push[name] = true
	}
	start := time.Now()
	f.logf("starting the hub cluster and %d member clusters ...", len(cfg.Members))
	tb, err := testbed.Start(ctx, testbed.Config{
		Dir: cfg.Dir, BinDir: cfg.BinDir, Hub: &testbed.ClusterSpec{Name: "hub"}, Members: cfg.Members, Progress: cfg.Progress,
	})
	if err != nil {
		return nil, err
	}
	f.Testbed = tb
	// The error returns below set the named result f to nil: stop what was
	// started through a copy.
	started := f
	defer func() {
		if err != nil {
			err = errors.Join(err, started.Stop())
		}
	}()
	f.logf("clusters ready in %s", time.Since(start).Round(100*time.Millisecond))

	if f.HubConfig, err = tb.Hub.RESTConfig(); err != nil {
		return nil, err
	}
	if f.Hub, err = client.New(f.HubConfig, client.Options{Scheme: f.scheme}); err != nil {
		return nil, err
	}
	if _, err := envtest.InstallCRDs(f.HubConfig, envtest.CRDInstallOptions{Paths: []string{cfg.CRDDir}, ErrorIfPathMissing: true}); err != nil {
		return nil, fmt.Errorf("installing CRDs from %s: %w", cfg.CRDDir, err)
	}
	if err := ensureNamespace(ctx, f.Hub, flotillav1.SystemNamespace); err != nil {
		return nil, err
	}
	if f.syncAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	// The join flow, as `kubectl flotilla init` and `join` run it: the
	// hub CA (the hub finds it when it starts), a bootstrap token, and
	// per member a bootstrap Secret the agent joins with. The agents make
	// their keys, register, and the hub creates the MemberClusters. Push
	// members get a kubeconfig Secret and a MemberCluster instead.
	if err := f.joinSecrets(ctx); err != nil {
		return nil, err
	}
	joined := tb.Members[:len(tb.Members)-cfg.BareMembers]
	for _, m := range tb.Members {
		mcfg, err := m.RESTConfig()
		if err != nil {
			return nil, err
		}
		c, err := client.New(mcfg, client.Options{Scheme: f.scheme})
		if err != nil {
			return nil, err
		}
		f.members[m.Spec.Name] = c
	}
	var pulled []string
	for _, m := range joined {
		if f.push[m.Spec.Name] {
			if err := f.createPushMember(ctx, m.Spec); err != nil {
				return nil, err
			}
			continue
		}
		pulled = append(pulled, m.Spec.Name)
		if err := f.WriteBootstrapSecret(ctx, m.Spec); err != nil {
			return nil, err
		}
	}

	if cfg.SecureMetrics {
		if err := f.makeMetricsTokens(ctx, pulled); err != nil {
			return nil, fmt.Errorf("metrics tokens: %w", err)
		}
	}
	if err := f.startHub(); err != nil {
		return nil, err
	}
	if cfg.Prometheus {
		for _, m := range pulled {
			if err := f.startPrometheus(ctx, m); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range pulled {
		if err := f.StartAgents(m); err != nil {
			return nil, err
		}
	}
	if len(cfg.PushMembers) > 0 {
		f.logf("hub and %d agents started; %v in Push mode; waiting for the members to join ...", len(pulled)*cfg.AgentReplicas, cfg.PushMembers)
	} else {
		f.logf("hub and %d agents started; waiting for the members to join ...", len(pulled)*cfg.AgentReplicas)
	}
	if err := f.waitReady(ctx, 2*time.Minute, f.joinedNames()); err != nil {
		return nil, err
	}
	f.logf("Flotilla ready in %s", time.Since(start).Round(100*time.Millisecond))
	return f, nil
}

// joinSecrets makes the hub CA and a multi-use, auto-accepting bootstrap
// token, as `kubectl flotilla init` does.
func (f *Fleet) joinSecrets(ctx context.Context) error {
	ca, err := hubca.Ensure(ctx, f.Hub, f.Hub, flotillav1.SystemNamespace)
	if err != nil {
		return err
	}
	f.ca = ca
	f.CAHash = bootstrap.CAHash(ca.Cert)
	tok, err := bootstrap.NewToken()
	if err != nil {
		return err
	}
	secret := bootstrap.NewSecret(flotillav1.SystemNamespace, tok, bootstrap.Options{AutoAccept: true, Description: "test/fleet"}, time.Now())
	if err := f.Hub.Create(ctx, secret); err != nil {
		return fmt.Errorf("creating the bootstrap token: %w", err)
	}
	f.Token = tok.String()
	return nil
}

// WriteBootstrapSecret writes the Secret an agent of member joins with,
// as `kubectl flotilla join` does, into the member's flotilla-system.
func (f *Fleet) WriteBootstrapSecret(ctx context.Context, m testbed.ClusterSpec) error {
	c := f.members[m.Name]
	if err := ensureNamespace(ctx, c, flotillav1.SystemNamespace); err != nil {
		return err
	}
	// The flotilla.dev/ label domain is the hub's: a joining cluster
	// names its region and provider in plain labels (and the spec).
	labels := memberLabels(m)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentBootstrapSecretName},
		StringData: map[string]string{
			"hub-address": f.syncAddr, "token": f.Token, "ca-hash": f.CAHash, "cluster-name": m.Name,
			"labels": bootstrap.FormatLabels(labels), "region": m.Region, "zone": m.Zone, "provider": m.Provider,
		},
	}
	if err := c.Create(ctx, s); err != nil {
		return fmt.Errorf("writing the bootstrap Secret of %s: %w", m.Name, err)
	}
	return nil
}

// SyncAddress is the hub's sync endpoint, which agents dial.
func (f *Fleet) SyncAddress() string { return f.syncAddr }

// joinedNames are the members the fleet joins itself (Push members
// included: it creates their MemberClusters).
func (f *Fleet) joinedNames() []string {
	names := make([]string, 0, len(f.Testbed.Members))
	for _, m := range f.Testbed.Members[:len(f.Testbed.Members)-f.cfg.BareMembers] {
		names = append(names, m.Spec.Name)
	}
	return names
}

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

func (f *Fleet) logPath(name string) string { return filepath.Join(f.cfg.Dir, "logs", name+".log") }

// startHub starts the hub process.
func (f *Fleet) startHub() error {
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	probe, err := freeAddr()
	if err != nil {
		return err
	}
	args := []string{
		"--kubeconfig", f.Testbed.Hub.Kubeconfig,
		"--leader-elect=true",
		"--leader-election-namespace", "flotilla-system",
		"--health-probe-bind-address", probe,
		"--sync-bind-address", f.syncAddr,
		// Self-managed certificates: the hub CA from its Secret, serving
		// certificates issued and rotated in memory.
		"--cert-dir", "",
	}
	args = append(args, f.metricsArgs(metrics)...)
	pprof := ""
	if f.cfg.Pprof {
		if pprof, err = freeAddr(); err != nil {
			return err
		}
		args = append(args, "--pprof-bind-address", pprof)
	}
	if f.cfg.CertificateLifetime > 0 {
		args = append(args, "--agent-certificate-lifetime", f.cfg.CertificateLifetime.String(),
			"--serving-certificate-lifetime", f.cfg.CertificateLifetime.String())
	}
	if f.cfg.HeartbeatGrace > 0 {
		args = append(args, "--heartbeat-grace", f.cfg.HeartbeatGrace.String())
	}
	if f.cfg.Webhook {
		webhook, err := freeAddr()
		if err != nil {
			return err
		}
		args = append(args, "--webhook-bind-address", webhook, "--register-webhook-url", "https://"+webhook)
	} else {
		args = append(args, "--webhook-bind-address", "")
	}
	s, err := Supervise("hub", filepath.Join(f.cfg.FlotillaBinDir, "hub"), args, nil, f.logPath("hub"))
	if err != nil {
		return err
	}
	s.MetricsAddr, s.PprofAddr = metrics, pprof
	f.mu.Lock()
	s.MetricsToken = f.metricsTokens[hubCluster]
	f.hub = s
	f.mu.Unlock()
	return nil
}

// startAgent starts agent replica i of member.
func (f *Fleet) startAgent(member string, i int) error {
	s, err := f.superviseAgent(member, i)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.agents[member] = append(f.agents[member], s)
	f.mu.Unlock()
	return nil
}

// superviseAgent starts the process of agent replica i of member, with
// --prometheus-url when the member has a Prometheus.
func (f *Fleet) superviseAgent(member string, i int) (*Supervised, error) {
	name := fmt.Sprintf("agent-%s-%d", member, i)
	f.mu.Lock()
	addrs, ok := f.agentAddrs[name]
	f.mu.Unlock()
	if !ok {
		metrics, err := freeAddr()
		if err != nil {
			return nil, err
		}
		probe, err := freeAddr()
		if err != nil {
			return nil, err
		}
		pprof := ""
		if f.cfg.Pprof {
			if pprof, err = freeAddr(); err != nil {
				return nil, err
			}
		}
		addrs = [3]string{metrics, probe, pprof}
		f.mu.Lock()
		f.agentAddrs[name] = addrs
		f.mu.Unlock()
	}
	metrics, probe := addrs[0], addrs[1]
	args := []string{
		"--kubeconfig", f.Testbed.Member(member).Kubeconfig,
		// The identity comes from the Secrets in flotilla-system: the
		// bootstrap Secret until the agent joined, then its credentials.
		"--leader-elect=true",
		"--leader-election-namespace", "flotilla-system",
		"--health-probe-bind-address", probe,
		"--resource-summary-interval", "2s",
	}
	args = append(args, f.metricsArgs(metrics)...)
	if addrs[2] != "" {
		args = append(args, "--pprof-bind-address", addrs[2])
	}
	if f.cfg.HeartbeatInterval > 0 {
		args = append(args, "--heartbeat-interval", f.cfg.HeartbeatInterval.String())
	}
	if url := f.PrometheusURL(member); url != "" {
		args = append(args, "--prometheus-url", url)
	}
	s, err := Supervise(name, filepath.Join(f.cfg.FlotillaBinDir, "agent"), args, []string{"POD_NAME=" + name, "GODEBUG=" + AgentGODEBUG}, f.logPath(name))
	if err != nil {
		return nil, err
	}
	s.MetricsAddr, s.PprofAddr = metrics, addrs[2]
	if s.MetricsToken, err = f.memberMetricsToken(member); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

// StartAgents starts member's agent replicas (AgentReplicas of them).
func (f *Fleet) StartAgents(member string) error {
	for i := range f.cfg.AgentReplicas {
		if err := f.startAgent(member, i); err != nil {
			return err
		}
	}
	return nil
}

// Member returns a client of member.
func (f *Fleet) Member(name string) client.Client { return f.members[name] }

// MemberNames lists the members that joined the fleet, in order: every
// member that takes replicas, those with agents and those in Push mode
// (all but the bare ones, until a test joins those and starts their
// agents).
func (f *Fleet) MemberNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.Testbed.Members))
	for _, m := range f.Testbed.Members {
		if len(f.agents[m.Spec.Name]) > 0 || f.push[m.Spec.Name] {
			out = append(out, m.Spec.Name)
		}
	}
	return out
}

// BareMemberNames lists the member clusters that have no agent and are
// not in Push mode.
func (f *Fleet) BareMemberNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.Testbed.Members {
		if len(f.agents[m.Spec.Name]) == 0 && !f.push[m.Spec.Name] {
			out = append(out, m.Spec.Name)
		}
	}
	return out
}

// StopAgents stops member's agent replicas (as `kubectl flotilla unjoin`
// removes the agent's Deployment); the member counts as bare again, unless
// it is in Push mode (SetSyncMode stops the agents that way).
func (f *Fleet) StopAgents(member string) error {
	f.mu.Lock()
	procs := f.agents[member]
	delete(f.agents, member)
	f.mu.Unlock()
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.Stop())
	}
	return errors.Join(errs...)
}

// WaitMembersReady waits until every MemberCluster is Ready.
func (f *Fleet) WaitMembersReady(ctx context.Context, timeout time.Duration) error {
	return f.waitReady(ctx, timeout, nil)
}

// waitReady waits until the MemberClusters called names exist and are
// Ready; with no names, until there are MemberClusters and all are.
func (f *Fleet) waitReady(ctx context.Context, timeout time.Duration, names []string) error {
	deadline := time.Now().Add(timeout)
	for {
		var notReady []string
		var list flotillav1.MemberClusterList
		if err := f.Hub.List(ctx, &list); err != nil {
			return err
		}
		ready := map[string]bool{}
		for _, mc := range list.Items {
			ready[mc.Name] = meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady)
			if len(names) == 0 && !ready[mc.Name] {
				notReady = append(notReady, mc.Name)
			}
		}
		for _, n := range names {
			if r, ok := ready[n]; !ok {
				notReady = append(notReady, n+" (not joined)")
			} else if !r {
				notReady = append(notReady, n)
			}
		}
		if len(notReady) == 0 && len(list.Items) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MemberClusters not Ready after %s: %s (logs in %s)%s", timeout, strings.Join(notReady, ", "), f.LogDir(), f.logTails(notReady))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// logTailLines is how many of its last lines logTails gives of each log.
const logTailLines = 15

// AgentGODEBUG is the GODEBUG the shipped manifests and chart give the
// agent (deploy/agent/deployment.yaml): no heap profile sampling unless
// --pprof-bind-address turns it on. The fleet runs its agents with it, so
// the bench measures the agent as it is shipped; TestAgentGODEBUGAsShipped
// holds the two together.
const AgentGODEBUG = "memprofilerate=0"

// logTails is the end of the hub's log and of the agent logs of the
// members named in notReady (a name may carry a note after a space), for
// an error: callers' log directories are often a test's TempDir, removed
// before anyone reads them.
func (f *Fleet) logTails(notReady []string) string {
	names := []string{"hub"}
	f.mu.Lock()
	for _, n := range notReady {
		member, _, _ := strings.Cut(n, " ")
		for _, p := range f.agents[member] {
			names = append(names, p.Name)
		}
	}
	f.mu.Unlock()
	var b strings.Builder
	for _, name := range names {
		data, err := os.ReadFile(f.logPath(name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&b, "\n--- last %d lines of %s.log:\n%s", len(lines), name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// StopMember stops member's control plane (its data is kept); its agent
// keeps running, loses its apiserver and closes its stream, as an agent in
// a cluster whose apiserver went away would. A Push member's apiserver
// just stops answering the hub.
func (f *Fleet) StopMember(name string) error {
	m := f.Testbed.Member(name)
	if m == nil {
		return fmt.Errorf("no member %q", name)
	}
	return m.Stop()
}

// StartMember starts member's control plane again.
func (f *Fleet) StartMember(ctx context.Context, name string) error {
	m := f.Testbed.Member(name)
	if m == nil {
		return fmt.Errorf("no member %q", name)
	}
	return m.Start(ctx)
}

// RestartHub stops the hub process and starts it again (SIGTERM, as a
// rolling update would).
func (f *Fleet) RestartHub() error {
	f.mu.Lock()
	h := f.hub
	f.mu.Unlock()
	return h.Restart(syscall.SIGTERM)
}

// HubPid is the current hub process's id, for a program that reads its
// resource use (0 before the hub started).
func (f *Fleet) HubPid() int {
	f.mu.Lock()
	h := f.hub
	f.mu.Unlock()
	if h == nil {
		return 0
	}
	return h.Pid()
}

// agentLocked is the agent replica called name, or nil; f.mu is held.
func (f *Fleet) agentLocked(name string) *Supervised {
	for _, list := range f.agents {
		for _, a := range list {
			if a.Name == name {
				return a
			}
		}
	}
	return nil
}

// AgentMetrics is the /metrics text of the agent replica called name ("" if
// there is none or it does not answer).
func (f *Fleet) AgentMetrics(name string) string {
	f.mu.Lock()
	agent := f.agentLocked(name)
	f.mu.Unlock()
	if agent == nil {
		return ""
	}
	return agent.Metrics()
}

// KillHub SIGKILLs the hub process (it cannot release its Lease); its
// supervisor starts it again a second later.
func (f *Fleet) KillHub() error {
	f.mu.Lock()
	h := f.hub
	f.mu.Unlock()
	return h.Kill()
}

// AgentLeader returns the name of member's leading agent replica.
func (f *Fleet) AgentLeader(member string) (string, error) {
	name, _, err := f.AgentLeaderMetrics(member)
	return name, err
}

// AgentLeaderMetrics returns the name of member's leading agent replica
// and the /metrics text that showed it leads, so a caller that wants both
// scrapes once.
func (f *Fleet) AgentLeaderMetrics(member string) (name, metrics string, err error) {
	f.mu.Lock()
	agents := append([]*Supervised(nil), f.agents[member]...)
	f.mu.Unlock()
	for _, a := range agents {
		if text := a.Metrics(); IsLeader(text) {
			return a.Name, text, nil
		}
	}
	return "", "", fmt.Errorf("no agent of %s leads", member)
}

// AgentReplicas names member's agent replicas.
func (f *Fleet) AgentReplicas(member string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.agents[member]))
	for _, a := range f.agents[member] {
		names = append(names, a.Name)
	}
	return names
}

// KillAgent SIGKILLs the agent replica called name; its supervisor starts
// it again a second later, as a kubelet would restart the container.
func (f *Fleet) KillAgent(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, list := range f.agents {
		for _, a := range list {
			if a.Name == name {
				return a.Kill()
			}
		}
	}
	return fmt.Errorf("no agent %q", name)
}

// AgentProcess returns the current process of the agent replica called
// name, for a test to signal by its PID (SIGSTOP and SIGCONT, to pause it
// as a stalled node would). The supervisor starts a new process when this
// one exits; the returned one stays the one it was.
func (f *Fleet) AgentProcess(name string) (*testbed.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, list := range f.agents {
		for _, a := range list {
			if a.Name == name {
				return a.Process(), nil
			}
		}
	}
	return nil, fmt.Errorf("no agent %q", name)
}

// Stop stops the hub, the agents, the members' Prometheus servers and
// their exporter, and the clusters.
func (f *Fleet) Stop() error {
	f.mu.Lock()
	procs := []*Supervised{}
	if f.hub != nil {
		procs = append(procs, f.hub)
	}
	for _, list := range f.agents {
		procs = append(procs, list...)
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(procs))
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Stop()
		}()
	}
	wg.Wait()
	errs = append(errs, f.stopAllPrometheus())
	if f.Testbed != nil {
		errs = append(errs, f.Testbed.Stop())
	}
	return errors.Join(errs...)
}

// LogDir is where the processes' logs are.
func (f *Fleet) LogDir() string { return filepath.Join(f.cfg.Dir, "logs") }

// Scrape returns the metrics text at http://addr/metrics, or "" when it
// does not answer 200.
func Scrape(addr string) string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// e.g. 400 from a secured /metrics (HTTPS) asked over HTTP.
		return ""
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// IsLeader says whether metrics report a held leader election lease.
func IsLeader(metrics string) bool {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}

// freeAddr is a free loopback address outside the ephemeral port range (see
// testbed.FreePorts), so no outgoing connection takes it before the hub or
// agent binds it.
func freeAddr() (string, error) {
	ports, err := testbed.FreePorts(1)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0]), nil
}
