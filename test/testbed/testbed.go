package testbed

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

//go:embed stages.yaml
var kwokStages []byte

// Node labels the testbed sets on fake nodes, the well-known topology ones.
const (
	LabelRegion = "topology.kubernetes.io/region"
	LabelZone   = "topology.kubernetes.io/zone"
	// LabelProvider is not a Kubernetes well-known label; the testbed uses
	// it so a member's nodes say which (pretend) provider they run on.
	LabelProvider = "flotilla.dev/provider"
)

// NodeSpec is one fake node of a member cluster.
type NodeSpec struct {
	// Name of the node; defaults to <cluster>-node-<i>.
	Name string
	// CPU, Memory and Pods are the node's allocatable resources
	// (quantities, e.g. "4", "16Gi", "110").
	CPU, Memory, Pods string
}

// ClusterSpec describes one cluster of the testbed.
type ClusterSpec struct {
	// Name of the cluster, a DNS-1123 label.
	Name string
	// Workloads runs kube-scheduler and kwok with fake nodes, so pods are
	// scheduled and become Ready. The hub does not need them.
	Workloads bool
	// Nodes are the fake nodes (Workloads only); default one 8-cpu node.
	Nodes []NodeSpec
	// Region, Zone and Provider label the nodes and describe the cluster.
	Region, Zone, Provider string
	// ExtraAPIServerArgs are appended to kube-apiserver's flags.
	ExtraAPIServerArgs []string
}

// Config describes a testbed.
type Config struct {
	// Dir holds every cluster's PKI, data, logs and kubeconfig, one folder
	// per cluster; those folders are wiped when the testbed starts.
	Dir string
	// BinDir holds the binaries (default: $FLOTILLA_BIN, else bin/ of the
	// repository this package lives in).
	BinDir string
	// Hub is the hub cluster (nil: none).
	Hub *ClusterSpec
	// Members are the member clusters.
	Members []ClusterSpec
	// Progress, when set, receives one line per step.
	Progress io.Writer
}

// Testbed is a set of running clusters.
type Testbed struct {
	cfg     Config
	Hub     *Cluster
	Members []*Cluster
}

// DefaultMembers returns n member specs with different node sizes and
// topology labels: member-1 in eu-west on aws with 4 cpu, member-2 in
// us-east on gcp with 8, member-3 in ap-south on onprem with 12, and so on.
func DefaultMembers(n int) []ClusterSpec {
	regions := []string{"eu-west", "us-east", "ap-south"}
	providers := []string{"aws", "gcp", "onprem"}
	out := make([]ClusterSpec, n)
	for i := range n {
		region := regions[i%len(regions)]
		out[i] = ClusterSpec{
			Name:      fmt.Sprintf("member-%d", i+1),
			Workloads: true,
			Region:    region,
			Zone:      region + "-a",
			Provider:  providers[i%len(providers)],
			Nodes: []NodeSpec{{
				CPU:    fmt.Sprint(4 * (i%3 + 1)),
				Memory: fmt.Sprintf("%dGi", 16*(i%3+1)),
				Pods:   "110",
			}},
		}
	}
	return out
}

// DefaultBinDir finds bin/ of the repository: $FLOTILLA_BIN when set,
// otherwise the first bin/ with a kube-apiserver found walking up from the
// working directory.
func DefaultBinDir() string {
	if d := os.Getenv("FLOTILLA_BIN"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		return "bin"
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bin", "kube-apiserver")); err == nil {
			return filepath.Join(d, "bin")
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "bin")
		}
		if filepath.Dir(d) == d {
			return "bin"
		}
	}
}

// Start creates and starts every cluster in parallel and waits until each
// is ready: apiserver /readyz, and for members every fake node Ready and
// the default service account present. On error everything started so far
// is stopped.
func Start(ctx context.Context, cfg Config) (*Testbed, error) {
	if cfg.Dir == "" {
		return nil, errors.New("testbed: Config.Dir is required")
	}
	if cfg.BinDir == "" {
		cfg.BinDir = DefaultBinDir()
	}
	bin, err := filepath.Abs(cfg.BinDir)
	if err != nil {
		return nil, err
	}
	cfg.BinDir = bin
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	tb := &Testbed{cfg: cfg}
	var all []*Cluster
	if cfg.Hub != nil {
		tb.Hub = newCluster(*cfg.Hub, cfg)
		all = append(all, tb.Hub)
	}
	for _, m := range cfg.Members {
		c := newCluster(m, cfg)
		tb.Members = append(tb.Members, c)
		all = append(all, c)
	}
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Start(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, tb.Stop())
	}
	return tb, nil
}

// Clusters returns the hub (if any) and the members.
func (t *Testbed) Clusters() []*Cluster {
	var out []*Cluster
	if t.Hub != nil {
		out = append(out, t.Hub)
	}
	return append(out, t.Members...)
}

// Member returns the member called name, or nil.
func (t *Testbed) Member(name string) *Cluster {
	for _, m := range t.Members {
		if m.Spec.Name == name {
			return m
		}
	}
	return nil
}

// Stop stops every cluster, in parallel, and waits for every process.
func (t *Testbed) Stop() error {
	clusters := t.Clusters()
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Stop()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Cluster is one cluster of the testbed: its processes, ports and files.
type Cluster struct {
	Spec ClusterSpec
	// Dir holds this cluster's pki/, etcd data, logs/ and kubeconfig.
	Dir string
	// Kubeconfig is the admin kubeconfig's path.
	Kubeconfig string

	binDir   string
	progress io.Writer

	// Ports are chosen once, on first start, and kept across restarts so the
	// kubeconfig and the data stay valid.
	etcdClientPort, etcdPeerPort, apiPort int

	mu    sync.Mutex
	procs []*Process // in start order
}

func newCluster(spec ClusterSpec, cfg Config) *Cluster {
	dir := filepath.Join(cfg.Dir, spec.Name)
	// A new testbed starts from empty clusters; restarts within one keep
	// their data, which is what Cluster.Start relies on.
	_ = os.RemoveAll(dir)
	return &Cluster{
		Spec:       spec,
		Dir:        dir,
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
		binDir:     cfg.BinDir,
		progress:   cfg.Progress,
	}
}

func (c *Cluster) logf(format string, args ...any) {
	if c.progress != nil {
		fmt.Fprintf(c.progress, "[%s] %s\n", c.Spec.Name, fmt.Sprintf(format, args...))
	}
}

// Host is the apiserver's URL.
func (c *Cluster) Host() string { return fmt.Sprintf("https://127.0.0.1:%d", c.apiPort) }

// RESTConfig returns an admin client config for the cluster.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	// The testbed's clients are tests and the demo: do not let client-side
	// throttling distort what they measure.
	cfg.QPS, cfg.Burst = 1000, 2000
	return cfg, nil
}

// PIDs returns the process ids of the cluster's running processes.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, p := range c.procs {
		if !p.exited() {
			out[p.name] = p.Pid()
		}
	}
	return out
}

// Running reports whether the cluster's processes are up.
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.procs) > 0
}

func (c *Cluster) pki() clusterPKI { return clusterPKI{dir: filepath.Join(c.Dir, "pki")} }

// Start starts (or restarts) the cluster's processes and waits until it is
// ready. Data and PKI from an earlier start are kept.
func (c *Cluster) Start(ctx context.Context) (err error) {
	c.mu.Lock()
	if len(c.procs) > 0 {
		c.mu.Unlock()
		return fmt.Errorf("cluster %s is already running", c.Spec.Name)
	}
	c.mu.Unlock()
	defer func() {
		if err != nil {
			err = fmt.Errorf("starting cluster %s (logs in %s): %w", c.Spec.Name, filepath.Join(c.Dir, "logs"), err)
			_ = c.Stop()
		}
	}()
	fresh := c.apiPort == 0
	if err := c.prepare(); err != nil {
		return err
	}
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.startStorageAndAPI(ctx)
		if err == nil {
			break
		}
		// Ports are chosen free and then handed to etcd and kube-apiserver,
		// so another process can bind one in between. On a first start,
		// nothing depends on the ports yet: choose new ones and try again.
		var early *exitedEarlyError
		if !fresh || attempt == 3 || !errors.As(err, &early) || !early.portTaken() {
			return err
		}
		c.logf("%s found its port taken; choosing new ports (attempt %d)", early.name, attempt+1)
		if err := c.Stop(); err != nil {
			return err
		}
		if err := os.RemoveAll(filepath.Join(c.Dir, "etcd")); err != nil {
			return err
		}
		c.apiPort = 0
		if err := c.prepare(); err != nil {
			return err
		}
	}
	c.logf("apiserver ready at %s (%s)", c.Host(), time.Since(start).Round(time.Millisecond))
	if err := c.startControllers(); err != nil {
		return err
	}
	if c.Spec.Workloads {
		if err := c.ensureNodes(ctx); err != nil {
			return err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	c.logf("ready (%s)", time.Since(start).Round(time.Millisecond))
	return nil
}

// prepare writes PKI, kubeconfig and stages, and picks ports, once.
func (c *Cluster) prepare() error {
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return err
	}
	if err := c.pki().generate(); err != nil {
		return err
	}
	if c.apiPort == 0 {
		ports, err := choosePorts(3)
		if err != nil {
			return err
		}
		c.etcdClientPort, c.etcdPeerPort, c.apiPort = ports[0], ports[1], ports[2]
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	if c.Spec.Workloads {
		if err := os.WriteFile(filepath.Join(c.Dir, "kwok-stages.yaml"), kwokStages, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startStorageAndAPI starts etcd and kube-apiserver and waits until both
// answer.
func (c *Cluster) startStorageAndAPI(ctx context.Context) error {
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	return c.startAPIServer(ctx)
}

// writeKubeconfig writes a stand-alone kubeconfig with embedded certs.
func (c *Cluster) writeKubeconfig() error {
	p := c.pki()
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(p.path("admin.crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(p.path("admin.key"))
	if err != nil {
		return err
	}
	name := "flotilla-" + c.Spec.Name
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: c.Host(), CertificateAuthorityData: ca}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	return clientcmd.WriteToFile(*kc, c.Kubeconfig)
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.binDir, name) }
func (c *Cluster) logPath(name string) string {
	return filepath.Join(c.Dir, "logs", name+".log")
}

func (c *Cluster) run(name string, args ...string) (*Process, error) {
	p, err := StartProcess(name, c.bin(name), args, nil, c.logPath(name))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.etcdClientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPeerPort)
	p, err := c.run("etcd",
		"--name", c.Spec.Name,
		"--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", c.Spec.Name+"="+peer,
		// The testbed is disposable: trading durability for speed is right.
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes", fmt.Sprint(2<<30),
		"--log-level", "warn",
	)
	if err != nil {
		return err
	}
	return pollHTTP(ctx, p, client+"/health", nil, 30*time.Second)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	p := c.pki()
	args := []string{
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", c.etcdClientPort),
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(c.apiPort),
		"--tls-cert-file", p.path("apiserver.crt"),
		"--tls-private-key-file", p.path("apiserver.key"),
		"--client-ca-file", p.path("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p.path("sa.pub"),
		"--service-account-signing-key-file", p.path("sa.key"),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--authorization-mode", "RBAC",
		"--endpoint-reconciler-type", "none",
		"--requestheader-client-ca-file", p.path("front-proxy-ca.crt"),
		"--requestheader-allowed-names", "front-proxy-client",
		"--requestheader-username-headers", "X-Remote-User",
		"--requestheader-group-headers", "X-Remote-Group",
		"--requestheader-extra-headers-prefix", "X-Remote-Extra-",
		"--proxy-client-cert-file", p.path("front-proxy-client.crt"),
		"--proxy-client-key-file", p.path("front-proxy-client.key"),
		"--allow-privileged=true",
		"--v=0",
	}
	args = append(args, c.Spec.ExtraAPIServerArgs...)
	proc, err := c.run("kube-apiserver", args...)
	if err != nil {
		return err
	}
	tlsCfg, err := c.adminTLS()
	if err != nil {
		return err
	}
	return pollHTTP(ctx, proc, c.Host()+"/readyz", tlsCfg, 90*time.Second)
}

func (c *Cluster) startControllers() error {
	p := c.pki()
	kc := c.Kubeconfig
	if _, err := c.run("kube-controller-manager",
		"--kubeconfig", kc,
		"--authentication-kubeconfig", kc,
		"--authorization-kubeconfig", kc,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
		"--service-account-private-key-file", p.path("sa.key"),
		"--root-ca-file", p.path("ca.crt"),
		"--cluster-signing-cert-file", p.path("ca.crt"),
		"--cluster-signing-key-file", p.path("ca.key"),
		"--use-service-account-credentials=false",
		"--v=0",
	); err != nil {
		return err
	}
	if !c.Spec.Workloads {
		return nil
	}
	if _, err := c.run("kube-scheduler",
		"--kubeconfig", kc,
		"--authentication-kubeconfig", kc,
		"--authorization-kubeconfig", kc,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
		"--v=0",
	); err != nil {
		return err
	}
	return c.startKwok()
}

// startKwok starts kwok and watches it: kwok v0.8.0 occasionally dies at
// start ("concurrent map read and map write" in its CEL setup, about once
// in 60 starts), and a member without kwok runs no pods. A kwok that exits
// while its cluster runs is started again (at most 5 times), as a kubelet
// would restart a crashed static pod.
func (c *Cluster) startKwok() error {
	args := []string{
		"--kubeconfig", c.Kubeconfig,
		"--config", filepath.Join(c.Dir, "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		"--server-address", "",
		// The node's fake address stays on loopback. Pod addresses come
		// from 198.18.0.0/15, the range RFC 2544 sets aside for benchmark
		// networks: no pod is real, nothing connects to them, and unlike
		// loopback addresses (which EndpointSlices refuse) they make the
		// member's EndpointSlice controller list a Service's ready pods.
		"--node-ip", "127.0.0.1",
		"--cidr", "198.18.0.0/15",
	}
	p, err := c.run("kwok", args...)
	if err != nil {
		return err
	}
	go func() {
		for restarts := 0; restarts < 5; restarts++ {
			<-p.Done()
			time.Sleep(500 * time.Millisecond)
			c.mu.Lock()
			i := slices.Index(c.procs, p)
			if i < 0 {
				// Stopped on purpose: the cluster no longer lists it.
				c.mu.Unlock()
				return
			}
			next, err := StartProcess("kwok", c.bin("kwok"), args, nil, c.logPath("kwok"))
			if err != nil {
				c.mu.Unlock()
				return
			}
			c.procs[i] = next
			c.mu.Unlock()
			c.logf("kwok exited (%v) and was started again", p.err)
			p = next
		}
	}()
	return nil
}

// Stop stops the cluster's processes: everything but etcd first, then etcd,
// so the apiserver never outlives its storage.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	var errs []error
	var etcd *Process
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, p := range procs {
		if p.name == "etcd" {
			etcd = p
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Stop(10 * time.Second); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	if etcd != nil {
		errs = append(errs, etcd.Stop(10*time.Second))
	}
	if len(procs) > 0 {
		c.logf("stopped")
	}
	return errors.Join(errs...)
}

// choosePorts picks a cluster's ports; tests replace it to hand out a taken
// one.
var choosePorts = FreePorts

// FreePorts finds n free loopback ports below the kernel's ephemeral range
// (32768 and up on Linux), so that no outgoing connection of any process
// (the apiserver's own to etcd, say) can take one before its server binds
// it. Each is checked by binding it.
func FreePorts(n int) ([]int, error) {
	const lo, hi = 20000, 32000
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("finding %d free ports in %d-%d: only %d after %d tries", n, lo, hi, len(out), tries)
		}
		port := lo + rand.IntN(hi-lo)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		out = append(out, port)
	}
	return out, nil
}
