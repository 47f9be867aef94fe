package sync_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
)

var (
	benchAgents  = flag.Int("sync.agents", 100, "agents (clusters) in BenchmarkFanout")
	benchWorks   = flag.Int("sync.works", 1000, "Works per cluster in BenchmarkFanout")
	benchChanged = flag.Int("sync.changed", 100, "Works changed per cluster in each steady-state round of BenchmarkFanout")
)

// The agents of BenchmarkFanout run in a child process (this test binary
// again), so that the hub's heap can be measured on its own.
const (
	envChild  = "FLOTILLA_SYNC_BENCH_CHILD"
	envAddr   = "FLOTILLA_SYNC_BENCH_ADDR"
	envPKI    = "FLOTILLA_SYNC_BENCH_PKI"
	envAgents = "FLOTILLA_SYNC_BENCH_AGENTS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(runBenchAgents())
	}
	os.Exit(m.Run())
}

func benchCluster(i int) string { return fmt.Sprintf("c-%03d", i) }
func benchWork(i int) string    { return fmt.Sprintf("w-%04d", i) }

// runBenchAgents is the child process: it runs one agent per cluster
// against the hub until its standard input closes.
func runBenchAgents() int {
	n, err := strconv.Atoi(os.Getenv(envAgents))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad", envAgents, err)
		return 2
	}
	dir := os.Getenv(envPKI)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg gosync.WaitGroup
	for i := range n {
		cluster := benchCluster(i)
		tlsCfg, err := pki.ClientTLSConfig(filepath.Join(dir, pki.AgentCertFile(cluster)), filepath.Join(dir, pki.AgentKeyFile(cluster)),
			filepath.Join(dir, pki.CACertFile), "localhost")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		a := &benchApplier{held: make(map[string]client.HeldWork)}
		c, err := client.New(client.Config{Address: os.Getenv(envAddr), TLS: tlsCfg, Applier: a, AgentVersion: "bench"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		a.report = c.ReportStatus
		wg.Go(func() { c.Run(ctx) })
	}
	io.Copy(io.Discard, os.Stdin) // Until the parent closes it.
	cancel()
	wg.Wait()
	return 0
}

// benchApplier keeps what it applied in a map and reports status at once,
// as an agent whose member applies instantly would.
type benchApplier struct {
	mu     gosync.Mutex
	held   map[string]client.HeldWork
	report func(string, *v1alpha1.WorkStatus)
}

func (a *benchApplier) Held(context.Context) ([]client.HeldWork, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]client.HeldWork, 0, len(a.held))
	for _, h := range a.held {
		out = append(out, h)
	}
	return out, nil
}

func (a *benchApplier) Apply(_ context.Context, w *v1alpha1.Work) error {
	a.mu.Lock()
	a.held[w.Name] = client.HeldWork{Name: w.Name, UID: string(w.UID), Generation: w.Generation}
	a.mu.Unlock()
	a.report(w.Name, &v1alpha1.WorkStatus{ObservedGeneration: w.Generation})
	return nil
}

func (a *benchApplier) Delete(_ context.Context, name string) error {
	a.mu.Lock()
	delete(a.held, name)
	a.mu.Unlock()
	return nil
}

func (a *benchApplier) Orphan(_ context.Context, name string) error {
	return a.Delete(context.Background(), name)
}

func (a *benchApplier) SnapshotComplete(context.Context, []string, bool) error { return nil }

// benchSink counts the Works whose status has not yet caught up with the
// generation the benchmark last set. Its memory is allocated up front, so
// it does not count as the hub's per-agent cost.
type benchSink struct {
	clusters map[string]int
	mu       []gosync.Mutex
	want     [][]int64
	seen     [][]int64
	pending  atomic.Int64
}

func newBenchSink(agents, works int) *benchSink {
	s := &benchSink{clusters: make(map[string]int), mu: make([]gosync.Mutex, agents), want: make([][]int64, agents), seen: make([][]int64, agents)}
	for i := range agents {
		s.clusters[benchCluster(i)] = i
		s.want[i] = make([]int64, works)
		s.seen[i] = make([]int64, works)
	}
	return s
}

// expect records that Work w of cluster c is now at generation gen.
func (s *benchSink) expect(c, w int, gen int64) {
	s.mu[c].Lock()
	if s.seen[c][w] >= s.want[c][w] {
		s.pending.Add(1)
	}
	s.want[c][w] = gen
	s.mu[c].Unlock()
}

func (s *benchSink) WorkStatus(_ context.Context, cluster, name string, st *v1alpha1.WorkStatus) {
	c, ok := s.clusters[cluster]
	if !ok {
		return
	}
	w, err := strconv.Atoi(name[len("w-"):])
	if err != nil {
		return
	}
	s.mu[c].Lock()
	if s.seen[c][w] < s.want[c][w] && st.ObservedGeneration >= s.want[c][w] {
		s.pending.Add(-1)
	}
	s.seen[c][w] = max(s.seen[c][w], st.ObservedGeneration)
	s.mu[c].Unlock()
}

func (s *benchSink) waitCaughtUp(b *testing.B, timeout time.Duration) {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for s.pending.Load() > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("%d Works still without current status after %s", s.pending.Load(), timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

func liveBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// BenchmarkFanout connects -sync.agents agents (100) with -sync.works
// Works each (1,000) over loopback TLS and reports:
//
//   - full-sync-s: from starting the agents to the hub holding a status
//     for every Work (hub -> agent -> apply -> status -> hub);
//   - updates/s: in each of b.N steady-state rounds, -sync.changed Works
//     of every cluster change once, timed until every new generation's
//     status is back at the hub;
//   - hub-bytes/agent: the hub process's live heap and stacks with every
//     agent connected and synced, less the same before they connected,
//     divided by the agents.
//
// Run it with -benchtime=Nx to choose the number of rounds.
func BenchmarkFanout(b *testing.B) {
	agents, works, changed := *benchAgents, *benchWorks, min(*benchChanged, *benchWorks)
	p := synctest.NewPKI(b)
	clusters := make([]string, agents)
	for i := range agents {
		clusters[i] = benchCluster(i)
		if _, err := pki.EnsureAgent(p.Dir, p.CA, clusters[i]); err != nil {
			b.Fatal(err)
		}
	}
	source := synctest.NewWorks()
	sink := newBenchSink(agents, works)
	for c := range agents {
		for w := range works {
			source.Put(clusters[c], benchWork(w), 1)
			sink.expect(c, w, 1)
		}
	}
	srv, err := server.New(server.Config{
		FleetID: synctest.FleetID,
		Works:   source, Clusters: synctest.NewClusters(clusters...), Status: sink,
		TLS: p.ServerTLS(b), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		b.Fatal(err)
	}
	source.Notify(srv.WorkChanged)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	before := liveBytes()

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envChild+"=1", envAddr+"="+lis.Addr().String(), envPKI+"="+p.Dir, envAgents+"="+strconv.Itoa(agents))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := child.Start(); err != nil {
		b.Fatal(err)
	}
	// Registered after srv.Stop, so it runs first: agents go, then the hub.
	b.Cleanup(func() {
		stdin.Close()
		if err := child.Wait(); err != nil {
			b.Errorf("agent process: %v", err)
		}
	})
	sink.waitCaughtUp(b, 10*time.Minute)
	fullSync := time.Since(start)
	perAgent := float64(int64(liveBytes())-int64(before)) / float64(agents)

	gens := make([][]int64, agents) // The generation of every Work.
	for c := range gens {
		gens[c] = make([]int64, works)
		for w := range gens[c] {
			gens[c][w] = 1
		}
	}
	b.ResetTimer()
	var updates int
	for r := 0; r < b.N; r++ {
		for c := range agents {
			for k := range changed {
				w := (r*changed + k) % works
				gens[c][w]++
				sink.expect(c, w, gens[c][w])
				source.Put(clusters[c], benchWork(w), int(gens[c][w]))
				updates++
			}
		}
		sink.waitCaughtUp(b, 10*time.Minute)
	}
	elapsed := b.Elapsed()
	b.StopTimer()

	b.ReportMetric(fullSync.Seconds(), "full-sync-s")
	b.ReportMetric(float64(updates)/elapsed.Seconds(), "updates/s")
	b.ReportMetric(perAgent, "hub-bytes/agent")
}
