package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
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
}

// Fleet is a running local Flotilla.
type Fleet struct {
	cfg Config
	// Testbed holds the clusters.
	Testbed *testbed.Testbed
	// CertDir holds ca.crt, hub.crt/key and agent-<member>.crt/key.
	CertDir string
	// Hub is a client of the hub cluster.
	Hub client.Client
	// HubConfig is the hub cluster's admin config.
	HubConfig *rest.Config

	scheme   *runtime.Scheme
	members  map[string]client.Client
	syncAddr string

	mu     sync.Mutex
	hub    *Supervised
	agents map[string][]*Supervised
}

// Scheme returns a scheme with core types and Flotilla's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = flotillav1.AddToScheme(s)
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
	for _, b := range []string{"hub", "agent"} {
		if _, err := os.Stat(filepath.Join(cfg.FlotillaBinDir, b)); err != nil {
			return nil, fmt.Errorf("%s binary missing in %s (run `make build`): %w", b, cfg.FlotillaBinDir, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	f = &Fleet{cfg: cfg, scheme: Scheme(), members: map[string]client.Client{}, agents: map[string][]*Supervised{}}
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
	if err := f.certificates(); err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, f.Hub, "flotilla-system"); err != nil {
		return nil, err
	}
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
		if err := ensureNamespace(ctx, c, "flotilla-system"); err != nil {
			return nil, err
		}
		mc := &flotillav1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: m.Spec.Name, Labels: map[string]string{
				"flotilla.dev/region": m.Spec.Region, "flotilla.dev/provider": m.Spec.Provider,
			}},
			Spec: flotillav1.MemberClusterSpec{Region: m.Spec.Region, Zone: m.Spec.Zone, Provider: m.Spec.Provider},
		}
		if err := f.Hub.Create(ctx, mc); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating MemberCluster %s: %w", m.Spec.Name, err)
		}
	}

	f.syncAddr, err = freeAddr()
	if err != nil {
		return nil, err
	}
	if err := f.startHub(); err != nil {
		return nil, err
	}
	for _, m := range tb.Members {
		for i := range cfg.AgentReplicas {
			if err := f.startAgent(m.Spec.Name, i); err != nil {
				return nil, err
			}
		}
	}
	f.logf("hub and %d agents started; waiting for the members to connect ...", len(tb.Members)*cfg.AgentReplicas)
	if err := f.WaitMembersReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	f.logf("Flotilla ready in %s", time.Since(start).Round(100*time.Millisecond))
	return f, nil
}

func (f *Fleet) certificates() error {
	f.CertDir = filepath.Join(f.cfg.Dir, "certs")
	ca, err := pki.EnsureCA(f.CertDir)
	if err != nil {
		return err
	}
	if _, err := pki.EnsureHub(f.CertDir, ca, []string{"127.0.0.1", "localhost"}); err != nil {
		return err
	}
	for _, m := range f.cfg.Members {
		if _, err := pki.EnsureAgent(f.CertDir, ca, m.Name); err != nil {
			return err
		}
	}
	return nil
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
		"--metrics-bind-address", metrics,
		"--health-probe-bind-address", probe,
		"--sync-bind-address", f.syncAddr,
		"--cert-dir", f.CertDir,
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
	s.MetricsAddr = metrics
	f.mu.Lock()
	f.hub = s
	f.mu.Unlock()
	return nil
}

// startAgent starts agent replica i of member.
func (f *Fleet) startAgent(member string, i int) error {
	metrics, err := freeAddr()
	if err != nil {
		return err
	}
	probe, err := freeAddr()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("agent-%s-%d", member, i)
	args := []string{
		"--kubeconfig", f.Testbed.Member(member).Kubeconfig,
		"--hub-address", f.syncAddr,
		"--cert-file", filepath.Join(f.CertDir, pki.AgentCertFile(member)),
		"--key-file", filepath.Join(f.CertDir, pki.AgentKeyFile(member)),
		"--ca-file", filepath.Join(f.CertDir, pki.CACertFile),
		"--leader-elect=true",
		"--leader-election-namespace", "flotilla-system",
		"--metrics-bind-address", metrics,
		"--health-probe-bind-address", probe,
		"--resource-summary-interval", "2s",
	}
	if f.cfg.HeartbeatInterval > 0 {
		args = append(args, "--heartbeat-interval", f.cfg.HeartbeatInterval.String())
	}
	s, err := Supervise(name, filepath.Join(f.cfg.FlotillaBinDir, "agent"), args, []string{"POD_NAME=" + name}, f.logPath(name))
	if err != nil {
		return err
	}
	s.MetricsAddr = metrics
	f.mu.Lock()
	f.agents[member] = append(f.agents[member], s)
	f.mu.Unlock()
	return nil
}

// Member returns a client of member.
func (f *Fleet) Member(name string) client.Client { return f.members[name] }

// HubMetricsAddr is where the hub process serves /metrics (host:port), for
// scraping with Scrape.
func (f *Fleet) HubMetricsAddr() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hub == nil {
		return ""
	}
	return f.hub.MetricsAddr
}

// MemberNames lists the members in order.
func (f *Fleet) MemberNames() []string {
	out := make([]string, 0, len(f.Testbed.Members))
	for _, m := range f.Testbed.Members {
		out = append(out, m.Spec.Name)
	}
	return out
}

// WaitMembersReady waits until every MemberCluster is Ready.
func (f *Fleet) WaitMembersReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var notReady []string
		var list flotillav1.MemberClusterList
		if err := f.Hub.List(ctx, &list); err != nil {
			return err
		}
		for _, mc := range list.Items {
			if !meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady) {
				notReady = append(notReady, mc.Name)
			}
		}
		if len(notReady) == 0 && len(list.Items) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("MemberClusters not Ready after %s: %s (logs in %s)", timeout, strings.Join(notReady, ", "), filepath.Join(f.cfg.Dir, "logs"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StopMember stops member's control plane (its data is kept); its agent
// keeps running, loses its apiserver and closes its stream, as an agent in
// a cluster whose apiserver went away would.
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
	f.mu.Lock()
	agents := append([]*Supervised(nil), f.agents[member]...)
	f.mu.Unlock()
	for _, a := range agents {
		if IsLeader(Scrape(a.MetricsAddr)) {
			return a.Name, nil
		}
	}
	return "", fmt.Errorf("no agent of %s leads", member)
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

// Stop stops the hub, the agents and the clusters.
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
	if f.Testbed != nil {
		errs = append(errs, f.Testbed.Stop())
	}
	return errors.Join(errs...)
}

// LogDir is where the processes' logs are.
func (f *Fleet) LogDir() string { return filepath.Join(f.cfg.Dir, "logs") }

// Scrape returns the metrics text at addr, or "" when it does not answer.
func Scrape(addr string) string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
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

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
