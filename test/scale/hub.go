package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/hubca"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// env is a running scale environment: the testbed's hub cluster, the real
// hub process, and the agent processes of the simulated members.
type env struct {
	o   options
	dir string
	tb  *testbed.Testbed
	cfg *rest.Config
	c   client.Client
	cs  *kubernetes.Clientset
	ca  *pki.KeyPair
	// The hub's listening addresses (also in hubArgs).
	syncAddr, probeAddr, metricsAddr, pprofAddr string
	hub                                         *testbed.Process
	hubArgs                                     []string
	agents                                      *agents
	members                                     []string
	track                                       *tracker
	// hubStopping is closed when the harness stops the hub itself;
	// onDeath is told when it exits otherwise.
	hubStopping chan struct{}
	onDeath     func(error)
}

// memberName is the name of simulated member i (0-based).
func memberName(i int) string { return fmt.Sprintf("sim-%04d", i) }

// memberGroup is the affinity group of member i: groups of groupSize
// neighbours, which the Divided apps select by label.
func memberGroup(i, groupSize int) string { return fmt.Sprintf("g-%03d", i/groupSize) }

// startEnv starts the hub cluster and installs Flotilla's CRDs and CA.
func startEnv(ctx context.Context, o options) (*env, error) {
	e := &env{o: o, dir: o.dir}
	tb, err := testbed.Start(ctx, testbed.Config{Dir: filepath.Join(o.dir, "clusters"), BinDir: o.binDir, Hub: &testbed.ClusterSpec{Name: "hub"}, Progress: o.progress})
	if err != nil {
		return nil, err
	}
	e.tb = tb
	if e.cfg, err = tb.Hub.RESTConfig(); err != nil {
		return e, err
	}
	// The harness's own client must not be what limits the scenarios.
	e.cfg.QPS, e.cfg.Burst = 500, 1000
	if e.c, err = client.New(e.cfg, client.Options{Scheme: fleet.Scheme()}); err != nil {
		return e, err
	}
	if e.cs, err = kubernetes.NewForConfig(e.cfg); err != nil {
		return e, err
	}
	if _, err := envtest.InstallCRDs(e.cfg, envtest.CRDInstallOptions{Paths: []string{o.crdDir}, ErrorIfPathMissing: true}); err != nil {
		return e, fmt.Errorf("installing CRDs from %s: %w", o.crdDir, err)
	}
	for _, ns := range []string{flotillav1.SystemNamespace, appNamespace} {
		if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return e, err
		}
	}
	if e.ca, err = hubca.Ensure(ctx, e.c, e.c, flotillav1.SystemNamespace); err != nil {
		return e, err
	}
	ports, err := testbed.FreePorts(4)
	if err != nil {
		return e, err
	}
	e.syncAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	e.probeAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	e.metricsAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
	e.pprofAddr = fmt.Sprintf("127.0.0.1:%d", ports[3])
	e.hubArgs = []string{
		"--kubeconfig", tb.Hub.Kubeconfig,
		"--leader-elect=true",
		"--leader-election-namespace", flotillav1.SystemNamespace,
		"--health-probe-bind-address", e.probeAddr,
		"--metrics-bind-address", e.metricsAddr, "--metrics-secure=false",
		"--sync-bind-address", e.syncAddr,
		"--cert-dir", "",
		"--webhook-bind-address", "",
		"--heartbeat-grace", o.grace.String(),
		"--pprof-bind-address", e.pprofAddr,
	}
	e.hubArgs = append(e.hubArgs, o.hubArgs...)
	if e.track, err = startTracker(ctx, e.cfg); err != nil {
		return e, err
	}
	return e, nil
}

// metricsURL is the hub's plain-HTTP /metrics.
func (e *env) metricsURL() string { return "http://" + e.metricsAddr + "/metrics" }

// startHub starts the hub process. If it exits without stopHub, onDeath
// (set by the scenarios) is called, so no wait outlives it.
func (e *env) startHub() error {
	p, err := testbed.StartProcess("hub", filepath.Join(e.o.flotillaBin, "hub"), e.hubArgs, nil, filepath.Join(e.dir, "logs", "hub.log"))
	if err != nil {
		return err
	}
	e.hub = p
	stopping := make(chan struct{})
	e.hubStopping = stopping
	go func() {
		select {
		case <-p.Done():
			if e.onDeath != nil {
				e.onDeath(fmt.Errorf("the hub exited on its own (see %s)", filepath.Join(e.dir, "logs", "hub.log")))
			}
		case <-stopping:
		}
	}()
	return nil
}

// stopHub stops the hub process on purpose.
func (e *env) stopHub(grace time.Duration) error {
	if e.hubStopping != nil {
		close(e.hubStopping)
		e.hubStopping = nil
	}
	return e.hub.Stop(grace)
}

// createMembers creates n MemberClusters (Pull, Accepted) with region,
// provider and group labels, and signs each an agent certificate carrying
// its UID, as the hub's join does.
func (e *env) createMembers(ctx context.Context, n, groupSize int) ([]shardMember, error) {
	regions := []string{"eu-west", "us-east", "ap-south", "us-west", "eu-north"}
	providers := []string{"aws", "gcp", "onprem"}
	out := make([]shardMember, n)
	errs := make([]error, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i], errs[i] = e.createMember(ctx, i, regions[i%len(regions)], providers[i%len(providers)], memberGroup(i, groupSize))
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i := range n {
		e.members = append(e.members, memberName(i))
	}
	return out, nil
}

func (e *env) createMember(ctx context.Context, i int, region, provider, group string) (shardMember, error) {
	name := memberName(i)
	mc := &flotillav1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"region": region, "provider": provider, groupLabel: group}},
		Spec: flotillav1.MemberClusterSpec{
			Region: region, Zone: region + "-a", Provider: provider,
			SyncMode: flotillav1.SyncModePull, Acceptance: flotillav1.AcceptanceAccepted,
		},
	}
	if err := e.c.Create(ctx, mc); err != nil {
		return shardMember{}, fmt.Errorf("creating MemberCluster %s: %w", name, err)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return shardMember{}, err
	}
	csrPEM, err := pki.NewAgentCSR(priv, name)
	if err != nil {
		return shardMember{}, err
	}
	csr, err := pki.ParseAgentCSR(csrPEM, name)
	if err != nil {
		return shardMember{}, err
	}
	cert, err := e.ca.SignAgentCSR(csr, name, string(mc.UID), 30*24*time.Hour, time.Now())
	if err != nil {
		return shardMember{}, err
	}
	certPEM, keyPEM, err := shardKeyPair(&pki.KeyPair{Cert: cert, Key: priv})
	return shardMember{Name: name, CertPEM: certPEM, KeyPEM: keyPEM}, err
}

// startAgents spreads members over procs agent processes.
func (e *env) startAgents(members []shardMember, procs int, jitter time.Duration) error {
	e.agents = &agents{}
	for p := range procs {
		spec := shardSpec{Address: e.syncAddr, CAPEM: e.ca.CertPEM(), ReadyDelay: e.o.readyDelay, HeartbeatInterval: e.o.heartbeat, ConnectJitter: jitter}
		var names []string
		for i := p; i < len(members); i += procs {
			spec.Members = append(spec.Members, members[i])
			names = append(names, members[i].Name)
		}
		data, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		file := filepath.Join(e.dir, fmt.Sprintf("agents-%d.json", p))
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return err
		}
		s, err := startShard(fmt.Sprintf("agents-%d", p), file, filepath.Join(e.dir, "logs", fmt.Sprintf("agents-%d.log", p)), names)
		if err != nil {
			return err
		}
		e.agents.shards = append(e.agents.shards, s)
	}
	return nil
}

// stop stops the agents, the hub and the cluster.
func (e *env) stop() error {
	var errs []error
	if e.agents != nil {
		e.agents.stop()
	}
	if e.track != nil {
		e.track.stop()
	}
	if e.hub != nil {
		errs = append(errs, e.stopHub(15*time.Second))
	}
	if e.tb != nil {
		errs = append(errs, e.tb.Stop())
	}
	return errors.Join(errs...)
}

// rssOf is the resident set size of process pid in bytes (0 if unknown).
func rssOf(pid int) int64 {
	n, _ := testutil.ResidentBytes(pid)
	return n
}

// cpuOf is the CPU time process pid has used (user + system).
func cpuOf(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	// Fields after the command name, which is in parentheses.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on Linux.
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// etcdDBSize is the size of the hub cluster's etcd database file.
func (e *env) etcdDBSize() int64 {
	fi, err := os.Stat(filepath.Join(e.tb.Hub.Dir, "etcd", "member", "snap", "db"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// requestCounts reads apiserver_request_total from the hub apiserver,
// summed by verb.
func (e *env) requestCounts(ctx context.Context) (map[string]float64, error) {
	raw, err := e.cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the hub apiserver's metrics: %w", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndexByte(rest, '}')
		if end < 0 {
			continue
		}
		labels, value := rest[:end], strings.TrimSpace(rest[end+1:])
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		verb := ""
		for _, l := range strings.Split(labels, ",") {
			if val, ok := strings.CutPrefix(l, `verb="`); ok {
				verb = strings.TrimSuffix(val, `"`)
			}
		}
		if verb != "" && verb != "WATCH" && verb != "CONNECT" {
			out[verb] += v
		}
	}
	return out, nil
}

// hubMetric sums the samples of the hub's /metrics whose line starts with
// name and contains every one of the label matchers (e.g. `controller="myapp"`).
func (e *env) hubMetrics() string {
	resp, err := http.Get(e.metricsURL())
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func metricSum(text, name string, matchers ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, m := range matchers {
			if !strings.Contains(line, m) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// otherCPU is the CPU time used so far by the hub cluster's apiserver and
// etcd, by the agent processes together and by the harness itself.
func (e *env) otherCPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	pids := e.tb.Hub.PIDs()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if pid, ok := pids[name]; ok {
			out[name] = cpuOf(pid)
		}
	}
	if e.agents != nil {
		for _, s := range e.agents.shards {
			out["agents"] += cpuOf(s.cmd.Process.Pid)
		}
	}
	out["harness"] = cpuOf(os.Getpid())
	return out
}

// hubMem is what the hub's Go runtime holds, from its /metrics right
// after a garbage collection (zeros if it does not answer).
type hubMem struct {
	heap, stacks, goroutines float64
}

// memAfterGC asks the hub for a garbage collection (the heap profile
// endpoint's gc=1) and then reads its heap in use, goroutine stacks and
// goroutines: what it holds, without the garbage RSS also counts.
func (e *env) memAfterGC() hubMem {
	if resp, err := http.Get("http://" + e.pprofAddr + "/debug/pprof/heap?gc=1"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m := e.hubMetrics()
	return hubMem{
		heap:       metricSum(m, "go_memstats_heap_inuse_bytes"),
		stacks:     metricSum(m, "go_memstats_stack_inuse_bytes"),
		goroutines: metricSum(m, "go_goroutines"),
	}
}

// saveHeapProfile writes the hub's heap profile (after a collection) to
// name in the run's folder (go tool pprof reads it), and says where; ""
// when it could not.
func (e *env) saveHeapProfile(name string) string {
	path := filepath.Join(e.dir, name)
	if fleet.SaveHeapProfile(e.pprofAddr, path) != nil {
		return ""
	}
	return path
}
