//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// testbedProvider is a whole local Flotilla from test/fleet: a testbed hub
// and three members (real etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok processes), with the hub and two agent replicas
// per member running as supervised processes of the binaries built from
// this checkout.
type testbedProvider struct {
	fleet *fleet.Fleet
	// dir holds the clusters, certificates and logs; removed by Stop.
	dir string
	// binDir holds hub and agent binaries the suite built; removed by Stop.
	binDir string
	// cli is the path of kubectl-flotilla.
	cli string
	// flotillaBin holds the hub, agent and kubectl-flotilla binaries.
	flotillaBin string
	// prom scrapes the hub and the agents (the suite's fleet only).
	prom *testbed.Prometheus
}

var _ ClusterProvider = &testbedProvider{}

// The testbed's settings. The hub and agents run with their default
// timings (heartbeat grace, heartbeat interval, Leases, backoff), so the
// resilience specs show that restarts evict nothing with the defaults; two
// agent replicas per member make the agent leader failover spec possible;
// the webhook is served so that invalid MyApps are refused as in a real
// install.
//
// The members -push-members names (member-3 by default) run in Push
// mode: no agent, the hub applies their Works through their kubeconfig,
// so every spec runs on a mixed fleet.
//
// A fourth member cluster starts bare (no agent, no MemberCluster) for the
// join spec. The rotation spec starts a fleet of its own, two members
// whose certificates live two minutes (testbedRotation*): in this one,
// members stopped for longer than a fifth of such a lifetime would come
// back with an expired certificate, which only a new join replaces.
const (
	testbedMembers             = 3
	testbedBareMembers         = 1
	testbedAgentReplicas       = 2
	testbedRotationMembers     = 2
	testbedCertificateLifetime = 2 * time.Minute
)

// testbedOptions shape one fleet of the testbed provider.
type testbedOptions struct {
	members, bare, agentReplicas int
	lifetime                     time.Duration
	// flotillaBin reuses the binaries of another provider.
	flotillaBin string
	// push are the members in Push mode.
	push []string
}

// The suite's fleet also runs a real Prometheus that scrapes the hub and
// every agent through their metrics authentication for the whole run
// (zzz_metrics_test.go asks it, at the end, whether every documented
// metric was served).
func startTestbed(ctx context.Context, artifacts string) (*testbedProvider, error) {
	p, err := startTestbedWith(ctx, artifacts, testbedOptions{
		members: testbedMembers, bare: testbedBareMembers, agentReplicas: testbedAgentReplicas, push: pushMembers(),
	})
	if err != nil {
		return nil, err
	}
	if p.prom, err = p.fleet.StartFleetPrometheus(ctx); err != nil {
		_ = copyLogs(p.dir, filepath.Join(artifacts, "setup"))
		return nil, errors.Join(fmt.Errorf("starting the fleet's Prometheus: %w", err), p.Stop())
	}
	return p, nil
}

// FleetPrometheusURL is the Prometheus that scrapes the hub and the
// agents ("" for a fleet without one).
func (p *testbedProvider) FleetPrometheusURL() string {
	if p.prom == nil {
		return ""
	}
	return p.prom.URL()
}

// MetricsEndpoints are the hub's and the agents' /metrics and the tokens
// that may read them.
func (p *testbedProvider) MetricsEndpoints() []fleet.MetricsEndpoint {
	return p.fleet.MetricsEndpoints()
}

// startTestbed builds the hub and agent (unless $FLOTILLA_BIN has them)
// and starts the fleet. When that fails, the logs go to
// artifacts/setup before the temporary folders are removed.
func startTestbedWith(ctx context.Context, artifacts string, o testbedOptions) (_ *testbedProvider, err error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	p := &testbedProvider{}
	defer func() {
		if err != nil {
			if p.dir != "" {
				_ = copyLogs(p.dir, filepath.Join(artifacts, "setup"))
			}
			err = errors.Join(err, p.Stop())
		}
	}()

	flotillaBin := o.flotillaBin
	if flotillaBin == "" {
		flotillaBin = os.Getenv("FLOTILLA_BIN")
	}
	if flotillaBin == "" || !hasFiles(flotillaBin, "hub", "agent", "kubectl-flotilla") {
		if p.binDir, err = os.MkdirTemp("", "flotilla-e2e-bin-"); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "building the hub, the agent and kubectl-flotilla into %s ...\n", p.binDir)
		if err := fleet.BuildBinaries(root, p.binDir); err != nil {
			return nil, err
		}
		flotillaBin = p.binDir
	}
	if p.dir, err = os.MkdirTemp("", "flotilla-e2e-"); err != nil {
		return nil, err
	}
	p.fleet, err = fleet.Start(ctx, fleet.Config{
		Dir:                 p.dir,
		FlotillaBinDir:      flotillaBin,
		CRDDir:              filepath.Join(root, "deploy", "hub", "crds"),
		Members:             testbed.DefaultMembers(o.members + o.bare),
		BareMembers:         o.bare,
		AgentReplicas:       o.agentReplicas,
		CertificateLifetime: o.lifetime,
		PushMembers:         o.push,
		// The agents' own default heartbeat interval.
		HeartbeatInterval: -1,
		Webhook:           true,
		// /metrics as shipped: HTTPS and a token the apiserver authorizes.
		SecureMetrics: true,
		Progress:      os.Stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the testbed fleet (control-plane binaries from %s; `make testbed-bin` builds them): %w", testbed.DefaultBinDir(), err)
	}
	p.cli = filepath.Join(flotillaBin, "kubectl-flotilla")
	p.flotillaBin = flotillaBin
	return p, nil
}

var _ Joiner = &testbedProvider{}

func (p *testbedProvider) BareMembers() []string { return p.fleet.BareMemberNames() }
func (p *testbedProvider) HubKubeconfig() string { return p.fleet.Testbed.Hub.Kubeconfig }
func (p *testbedProvider) SyncAddress() string   { return p.fleet.SyncAddress() }
func (p *testbedProvider) CLI() string           { return p.cli }
func (p *testbedProvider) MemberKubeconfig(name string) string {
	return p.fleet.Testbed.Member(name).Kubeconfig
}
func (p *testbedProvider) StartAgents(_ context.Context, member string) error {
	return p.fleet.StartAgents(member)
}
func (p *testbedProvider) StopAgents(_ context.Context, member string) error {
	return p.fleet.StopAgents(member)
}

// startRotationFleet starts, beside the suite's fleet, a fleet of two
// members whose certificates live testbedCertificateLifetime, with the
// same binaries; the caller stops it.
func startRotationFleet(ctx context.Context) (*testbedProvider, error) {
	p, ok := provider.(*testbedProvider)
	if !ok {
		return nil, nil
	}
	return startTestbedWith(ctx, artifacts, testbedOptions{
		members: testbedRotationMembers, agentReplicas: 1, lifetime: testbedCertificateLifetime, flotillaBin: p.flotillaBin,
	})
}

func (p *testbedProvider) Name() string                     { return "testbed" }
func (p *testbedProvider) HubConfig() *rest.Config          { return p.fleet.HubConfig }
func (p *testbedProvider) Hub() client.Client               { return p.fleet.Hub }
func (p *testbedProvider) MemberNames() []string            { return p.fleet.MemberNames() }
func (p *testbedProvider) Member(name string) client.Client { return p.fleet.Member(name) }

func (p *testbedProvider) SyncMode(member string) flotillav1.SyncMode {
	return p.fleet.SyncMode(member)
}

var _ SyncModeSwitcher = &testbedProvider{}

func (p *testbedProvider) SetSyncMode(ctx context.Context, member string, mode flotillav1.SyncMode) error {
	return p.fleet.SetSyncMode(ctx, member, mode)
}

func (p *testbedProvider) StopMember(_ context.Context, name string) error {
	return p.fleet.StopMember(name)
}

func (p *testbedProvider) StartMember(ctx context.Context, name string) error {
	return p.fleet.StartMember(ctx, name)
}

// AgentLeader asks each replica's metrics which one leads; replicas are
// called agent-<member>-<i> and report that name to the hub.
func (p *testbedProvider) AgentLeader(_ context.Context, member string) (string, error) {
	return p.fleet.AgentLeader(member)
}

// KillAgent SIGKILLs the replica; its supervisor starts it again a second
// later, as a kubelet would restart the container.
func (p *testbedProvider) KillAgent(_ context.Context, _, name string) error {
	return p.fleet.KillAgent(name)
}

// AgentReplicas names the member's agent processes (agent-<member>-<i>).
func (p *testbedProvider) AgentReplicas(_ context.Context, member string) ([]string, error) {
	return p.fleet.AgentReplicas(member), nil
}

// PauseAgent sends SIGSTOP to the replica's current process, by the PID
// the testbed started it with. The supervisor does not notice: a stopped
// process has not exited. A replica whose process just exited is paused
// once the supervisor has started the next one (a second later).
func (p *testbedProvider) PauseAgent(ctx context.Context, _, name string) (PausedAgent, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		proc, err := p.fleet.AgentProcess(name)
		if err != nil {
			return nil, err
		}
		paused := &pausedProcess{proc: proc}
		if !paused.Exited() {
			if err := paused.signal(syscall.SIGSTOP); err != nil {
				return nil, err
			}
			return paused, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("agent %s has no running process to pause (its last, pid %d, exited more than 10s ago)", name, proc.Pid())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pausedProcess is a testbed process stopped with SIGSTOP.
type pausedProcess struct{ proc *testbed.Process }

func (p *pausedProcess) Resume() error { return p.signal(syscall.SIGCONT) }
func (p *pausedProcess) String() string {
	return fmt.Sprintf("%s (pid %d)", p.proc.Name(), p.proc.Pid())
}

func (p *pausedProcess) Exited() bool {
	select {
	case <-p.proc.Done():
		return true
	default:
		return false
	}
}

// signal sends sig to the process unless it has ended (and been reaped,
// so that its PID may belong to another process by now).
func (p *pausedProcess) signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := syscall.Kill(p.proc.Pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending %v to %s: %w", sig, p, err)
	}
	return nil
}

var _ MetricsProvider = &testbedProvider{}

// StartPrometheus runs bin/prometheus per member (fleet.StartPrometheus):
// on a free loopback port, its storage in the fleet's folder, scraping
// the fleet's in-process exporter every second; the members' agents are
// started again with --prometheus-url. Its log is in the fleet's logs
// (prometheus-<member>.log).
func (p *testbedProvider) StartPrometheus(ctx context.Context, members ...string) error {
	return p.fleet.StartPrometheus(ctx, members...)
}

// StopPrometheus starts the agents again without --prometheus-url and
// stops the Prometheus processes by their PIDs.
func (p *testbedProvider) StopPrometheus(ctx context.Context, members ...string) error {
	return p.fleet.StopPrometheus(ctx, members...)
}

func (p *testbedProvider) SetGauge(member, name string, value float64) error {
	return p.fleet.SetGauge(member, name, value)
}

func (p *testbedProvider) DeleteGauge(member, name string) error {
	return p.fleet.DeleteGauge(member, name)
}

// HubMetrics is the hub process's /metrics text ("" when it does not
// answer).
func (p *testbedProvider) HubMetrics() string { return p.fleet.HubMetrics() }

// KillHub SIGKILLs the hub; its supervisor starts it again a second
// later.
func (p *testbedProvider) KillHub(context.Context) error { return p.fleet.KillHub() }

// RestartHub sends the hub SIGTERM and waits for it to exit; its
// supervisor starts it again a second later.
func (p *testbedProvider) RestartHub(context.Context) error { return p.fleet.RestartHub() }

// CollectLogs copies the hub and agent logs (fleet.LogDir) into dir.
func (p *testbedProvider) CollectLogs(_ context.Context, dir string) error {
	return copyTree(p.fleet.LogDir(), dir, func(string) bool { return true })
}

// Stop stops every process of the fleet (by PID, through fleet.Stop) and
// removes the temporary folders.
func (p *testbedProvider) Stop() error {
	var errs []error
	if p.fleet != nil {
		errs = append(errs, p.fleet.Stop())
	}
	for _, d := range []string{p.dir, p.binDir} {
		if d != "" {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	return errors.Join(errs...)
}

// copyLogs copies every log under the fleet folder dir (the hub's and
// agents' logs/ and each cluster's <cluster>/logs/) into dst.
func copyLogs(dir, dst string) error {
	return copyTree(dir, dst, func(rel string) bool {
		return strings.HasSuffix(rel, ".log") && strings.Contains(filepath.ToSlash(rel), "logs/")
	})
}

// copyTree copies the regular files under src for which keep says yes
// into dst, keeping their relative paths.
func copyTree(src, dst string, keep func(rel string) bool) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil || d.IsDir() || !d.Type().IsRegular() || !keep(rel) {
			return err
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// repoRoot is the repository root: two levels above this package, where
// go test runs it.
func repoRoot() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if !hasFiles(root, "go.mod") {
		return "", fmt.Errorf("no go.mod in %s: run the suite with go test from the repository", root)
	}
	return root, nil
}

func hasFiles(dir string, names ...string) bool {
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return false
		}
	}
	return true
}
