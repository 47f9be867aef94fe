// Command scale is the scale harness of `make scale`: the testbed's hub
// cluster (real etcd and kube-apiserver), the real hub process, and N
// simulated members. Each simulated member is a real sync client (the
// pkg/sync/client an agent runs, over real gRPC with mutual TLS on
// loopback) whose Applier keeps Works in memory, acknowledges each apply
// at once and reports the Deployment ready after -ready-delay; it sends
// heartbeats and a capacity summary like an agent. The members run in
// -agent-procs processes (this binary started again with -agent-shard), so
// the hub's figures are its own.
//
// Scenarios (-scenarios, numbered as in docs/benchmarks.md; they run in the
// order 1, 2, 4, 6, 5, 3, and the report files are rewritten after each):
//
//  1. N members join at once (a connect storm with -jitter): time until
//     every MemberCluster is Ready, hub RSS before and after, hub memory
//     per connected agent.
//  2. -apps MyApps, each Divided over 3 of the 5 members of an affinity
//     group (label selector plus a spread over clusters), created at -rate
//     per second: MyApp created -> Ready p50 / p90 / p99, time from the
//     last create until all are Ready, hub RSS and CPU, apiserver requests
//     per second by verb, etcd database size.
//  3. -dup-apps MyApps Duplicated to every member: time until all Ready.
//  4. One member lost (its agent stopped): time until each of its MyApps
//     is Ready without it, against heartbeat grace + toleration + 5 s.
//  5. Hub restart: time until every agent resynced, and how many Works
//     were applied again (none should be).
//  6. Image change of -image-apps MyApps at once: time until every member
//     applied the new image.
//
// Every wait is bounded (-timeout per step) and fails naming what did not
// converge; everything started is stopped at the end, also on failure or
// Ctrl-C. Run from the repository root:
//
//	go run ./test/scale                 # reduced: 200 members, 2,000 MyApps, scenarios 1, 2, 4
//	go run ./test/scale -size full      # 1,000 members, 10,000 MyApps, all six
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/test/testbed"
)

// appNamespace holds the harness's MyApps on the hub.
const appNamespace = "scale"

// groupLabel is the MemberCluster label naming a member's affinity group.
const groupLabel = "scale-group"

type options struct {
	size        string
	members     int
	apps        int
	rate        float64
	dupApps     int
	imageApps   int
	groupSize   int
	scenarios   map[int]bool
	procs       int
	jitter      time.Duration
	readyDelay  time.Duration
	heartbeat   time.Duration
	grace       time.Duration
	toleration  int
	timeout     time.Duration
	dir         string
	binDir      string
	flotillaBin string
	crdDir      string
	out         string
	jsonOut     string
	compare     string
	plot        string
	keep        bool
	hubArgs     []string
	progress    io.Writer
}

// sizes are the presets of -size.
var sizes = map[string]struct {
	members, apps, dupApps, imageApps int
	scenarios                         string
}{
	"reduced": {200, 2000, 20, 200, "1,2,4"},
	"full":    {1000, 10000, 100, 1000, "1,2,3,4,5,6"},
}

func main() {
	shardFile := flag.String("agent-shard", "", "internal: run as an agent process for this shard spec")
	var o options
	flag.StringVar(&o.size, "size", "reduced", "preset: reduced (200 members, 2,000 MyApps, scenarios 1,2,4) or full (1,000 members, 10,000 MyApps, all six)")
	flag.IntVar(&o.members, "members", 0, "simulated members (0: the preset's)")
	flag.IntVar(&o.apps, "apps", 0, "Divided MyApps of scenario 2 (0: the preset's)")
	flag.Float64Var(&o.rate, "rate", 100, "MyApp creates per second in scenario 2")
	flag.IntVar(&o.dupApps, "dup-apps", 0, "Duplicated MyApps of scenario 3 (0: the preset's)")
	flag.IntVar(&o.imageApps, "image-apps", 0, "MyApps whose image scenario 6 changes (0: the preset's)")
	flag.IntVar(&o.groupSize, "group-size", 5, "members per affinity group; each Divided MyApp runs in 3 of its group's")
	scen := flag.String("scenarios", "", "comma-separated scenarios to run (default: the preset's); 1 and 2 always run when a later one needs them")
	flag.IntVar(&o.procs, "agent-procs", 4, "agent processes the simulated members are spread over")
	flag.DurationVar(&o.jitter, "jitter", 0, "spread of the members' first connections (0: 5s reduced, 20s full)")
	flag.DurationVar(&o.readyDelay, "ready-delay", 200*time.Millisecond, "how long after an apply a simulated member reports the Deployment ready")
	flag.DurationVar(&o.heartbeat, "heartbeat-interval", 10*time.Second, "the simulated agents' heartbeat interval (the agent's default)")
	flag.DurationVar(&o.grace, "heartbeat-grace", 14*time.Second, "the hub's --heartbeat-grace (its default)")
	flag.IntVar(&o.toleration, "toleration", 5, "the MyApps' failover.clusterUnreachable.tolerationSeconds")
	flag.DurationVar(&o.timeout, "timeout", 0, "the longest one step may take before the harness gives up (0: 10m reduced, 60m full, where scenario 3 takes about 42 minutes on 2 cores)")
	flag.StringVar(&o.dir, "dir", "", "folder for the cluster, specs and logs (default: a temporary folder, removed after a clean run)")
	flag.StringVar(&o.binDir, "bin", "", "folder with the testbed binaries (default: bin/ or $FLOTILLA_BIN)")
	flag.StringVar(&o.flotillaBin, "flotilla-bin", "", "folder with the hub binary (default: -bin)")
	flag.StringVar(&o.crdDir, "crds", "deploy/hub/crds", "Flotilla's CRDs")
	flag.StringVar(&o.out, "out", "", "also write the markdown report here")
	flag.StringVar(&o.jsonOut, "json", "", "write the figures as JSON here (the record -compare reads)")
	flag.StringVar(&o.compare, "compare", "", "compare the figures with this JSON record and flag regressions beyond 10%")
	flag.StringVar(&o.plot, "plot", "", "write the PNG plot (hub RSS against members and MyApps, convergence against MyApps) here")
	flag.BoolVar(&o.keep, "keep", false, "keep the folder after a clean run")
	hubArgs := flag.String("hub-args", "", "more flags for the hub process, space-separated (e.g. \"--kube-api-qps=1000 --kube-api-burst=2000\")")
	flag.Parse()

	if *shardFile != "" {
		if err := runShard(*shardFile); err != nil {
			fmt.Fprintln(os.Stderr, "agent process:", err)
			os.Exit(1)
		}
		return
	}
	ctrllog.SetLogger(logr.Discard())
	o.hubArgs = strings.Fields(*hubArgs)
	if err := o.complete(*scen); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "scale: FAILED:", err)
		fmt.Fprintln(os.Stderr, "scale: logs are in", filepath.Join(o.dir, "logs"))
		os.Exit(1)
	}
}

// complete fills the options' defaults from the preset and checks them.
func (o *options) complete(scen string) error {
	p, ok := sizes[o.size]
	if !ok {
		return fmt.Errorf("-size: %q is not reduced or full", o.size)
	}
	if o.members == 0 {
		o.members = p.members
	}
	if o.apps == 0 {
		o.apps = p.apps
	}
	if o.dupApps == 0 {
		o.dupApps = p.dupApps
	}
	if o.imageApps == 0 {
		o.imageApps = min(p.imageApps, o.apps)
	}
	if o.timeout == 0 {
		o.timeout = 10 * time.Minute
		if o.size == "full" {
			o.timeout = 60 * time.Minute
		}
	}
	if o.jitter == 0 {
		o.jitter = 5 * time.Second
		if o.size == "full" {
			o.jitter = 20 * time.Second
		}
	}
	if scen == "" {
		scen = p.scenarios
	}
	o.scenarios = map[int]bool{}
	for _, s := range strings.Split(scen, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 6 {
			return fmt.Errorf("-scenarios: %q is not a scenario number 1-6", s)
		}
		o.scenarios[n] = true
	}
	// Every scenario needs joined members, and 4-6 need the MyApps of 2.
	o.scenarios[1] = true
	if o.scenarios[4] || o.scenarios[5] || o.scenarios[6] {
		o.scenarios[2] = true
	}
	switch {
	case o.members < o.groupSize || o.groupSize < 4:
		return fmt.Errorf("-members (%d) must be at least -group-size (%d), which must be at least 4 (3 clusters per app and one to fail over to)", o.members, o.groupSize)
	case o.apps < 1 || o.rate <= 0:
		return fmt.Errorf("-apps (%d) must be at least 1 and -rate (%g) above 0", o.apps, o.rate)
	case o.imageApps > o.apps:
		return fmt.Errorf("-image-apps (%d) cannot exceed -apps (%d)", o.imageApps, o.apps)
	case o.procs < 1:
		return fmt.Errorf("-agent-procs (%d) must be at least 1", o.procs)
	}
	if o.binDir == "" {
		o.binDir = testbed.DefaultBinDir()
	}
	if o.flotillaBin == "" {
		o.flotillaBin = o.binDir
	}
	if _, err := os.Stat(filepath.Join(o.flotillaBin, "hub")); err != nil {
		return fmt.Errorf("the hub binary is missing in %s (run `make build`): %w", o.flotillaBin, err)
	}
	o.progress = os.Stderr
	return nil
}

func run(ctx context.Context, o options) (err error) {
	temp := o.dir == ""
	if temp {
		if o.dir, err = os.MkdirTemp("", "flotilla-scale-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(o.dir, "logs"), 0o755); err != nil {
		return err
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.progress, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	logf("scale: %d members in %d agent processes, %d MyApps at %g/s; scenarios %v; folder %s", o.members, o.procs, o.apps, o.rate, keys(o.scenarios), o.dir)
	e, err := startEnv(ctx, o)
	if e != nil {
		defer func() {
			if serr := e.stop(); serr != nil && err == nil {
				err = serr
			}
			if err == nil && temp && !o.keep {
				_ = os.RemoveAll(o.dir)
			}
		}()
	}
	if err != nil {
		return err
	}
	r := &report{o: o, started: time.Now()}
	s := &scenarios{e: e, r: r, logf: logf}
	if err := s.run(ctx); err != nil {
		r.failed = err.Error()
		_ = r.write(o)
		return err
	}
	return r.write(o)
}

func keys(m map[int]bool) []int {
	var out []int
	for i := 1; i <= 6; i++ {
		if m[i] {
			out = append(out, i)
		}
	}
	return out
}

// jsonFile reads a JSON file into v.
func jsonFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}
