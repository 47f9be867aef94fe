package sync_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// TestIntendedDeletesArePacedPerMember checks the per-member delete rate
// limit over real gRPC. Many marked Works deleted at once reach the agent
// paced (never more than the token bucket allows since the deletes began,
// with the backlog in flotilla_sync_deletions_pending) and eventually all;
// an upsert of another Work overtakes the waiting deletes; a Work
// re-created while its delete waits is upserted and never deleted; a
// second agent's deletes do not wait behind the first's; the gauge returns
// to zero and goes away with the stream. It asserts no durations: the only
// clock in it is the bound "burst + rate x elapsed", which a slow machine
// only loosens.
func TestIntendedDeletesArePacedPerMember(t *testing.T) {
	synctest.CheckGoroutines(t)
	const (
		rate  = 5.0
		burst = 2
		n     = 16 // (n-burst)/rate = 2.8s of backlog
	)
	p := synctest.NewPKI(t)
	logs := &messages{}
	hub := synctest.StartHub(t, p, []string{"east", "west"}, func(c *server.Config) {
		c.DeleteRate, c.DeleteBurst = rate, burst
		c.Logger = funcr.New(logs.add, funcr.Options{})
	})
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("d-%02d", i)
		hub.Works.Put("east", names[i], 1)
	}
	last := names[n-1] // the last to be deleted: re-created while it waits
	hub.Works.Put("east", "other", 1)
	for _, name := range []string{"w-0", "w-1", "west-other"} {
		hub.Works.Put("west", name, 1)
	}
	east := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	converged(t, hub, east, "east")
	converged(t, hub, west, "west")

	pending := func(cluster string) int {
		st, _ := hub.Server.Stats(cluster)
		return st.DeletionsPending
	}
	gauge := func(cluster string) float64 {
		return counterValue(t, hub, "flotilla_sync_deletions_pending", "cluster", cluster)
	}
	sentDeletes := func() int {
		return int(counterValue(t, hub, "flotilla_sync_messages_sent_total", "type", "delete"))
	}
	deletes := func(a *synctest.Agent) int {
		_, d, _ := a.Applier.Counts()
		return d
	}
	// The token bucket's bound: since start, at most burst plus rate per
	// second elapsed (plus one for rounding) may have reached the agent.
	// Elapsed is read after the count, so a slow machine only loosens it.
	start := time.Now()
	withinBucket := func() string {
		got := deletes(east)
		allowed := burst + int(rate*time.Since(start).Seconds()) + 1
		if got > allowed {
			return fmt.Sprintf("east received %d deletes %s after they began; the bucket allows at most %d", got, time.Since(start), allowed)
		}
		return ""
	}

	for _, name := range names {
		hub.Works.Delete("east", name)
	}
	// Every delete has been either sent or put in the backlog, and some
	// wait: the last one is among them, since they wait in order.
	synctest.Eventually(t, wait, "east's deletes sent or waiting", func() (bool, string) {
		if why := withinBucket(); why != "" {
			t.Fatal(why)
		}
		w, s := pending("east"), sentDeletes()
		return w+s == n, fmt.Sprintf("%d waiting + %d sent, want %d", w, s, n)
	})
	if w := pending("east"); w < 3 {
		t.Fatalf("only %d deletes wait right after %d were asked for at once with burst %d; want a backlog", w, n, burst)
	}
	if g := gauge("east"); g < 1 {
		t.Errorf("flotilla_sync_deletions_pending{cluster=east} = %v with a backlog, want > 0", g)
	}

	// While east's deletes wait: re-create the last one, change another
	// Work, and delete two Works of west (within its own burst).
	recreated := hub.Works.Put("east", last, 1)
	hub.Works.Put("east", "other", 2)
	hub.Works.Delete("west", "w-0")
	hub.Works.Delete("west", "w-1")
	hub.Works.Put("west", "west-other", 2)

	synctest.Eventually(t, wait, "east's upserts overtaking its waiting deletes", func() (bool, string) {
		held := east.Applier.HeldGenerations()
		key := fmt.Sprintf("%s@1 (uid %s)", last, recreated.UID)
		return held["other"] == 2 && east.Applier.Applies()[key] == 1, fmt.Sprintf("holds %v", held)
	})
	if w := pending("east"); w == 0 {
		t.Errorf("east's backlog drained before its upserts arrived: they waited behind the deletes (log %v)", east.Applier.Log())
	}
	synctest.Eventually(t, wait, "west's deletes and upsert", func() (bool, string) {
		d := synctest.Diff(hub.Works.Desired("west"), west.Applier.HeldGenerations())
		return d == "", d
	})
	if w := pending("east"); w == 0 {
		t.Errorf("east's backlog drained before west's two deletes arrived: west waited behind east")
	}
	if w, g := pending("west"), gauge("west"); w != 0 || g != 0 {
		t.Errorf("west has %d deletes waiting (gauge %v) after 2 deletes with burst %d, want 0", w, g, burst)
	}

	// The rest of east's deletes arrive, and the re-created Work stays.
	synctest.Eventually(t, wait, "east's backlog draining", func() (bool, string) {
		if why := withinBucket(); why != "" {
			t.Fatal(why)
		}
		// Nothing waits, and east received every delete the hub sent it
		// (the hub's count includes west's two).
		got, w, sent := deletes(east), pending("east"), sentDeletes()-2
		return got >= n-1 && w == 0 && got == sent, fmt.Sprintf("%d deletes received of %d sent, %d waiting", got, sent, w)
	})
	if slices.Contains(east.Applier.Log(), "delete "+last) {
		t.Fatalf("%s was deleted although it was re-created while its delete waited: %v", last, east.Applier.Log())
	}
	converged(t, hub, east, "east")
	if g := gauge("east"); g != 0 {
		t.Errorf("flotilla_sync_deletions_pending{cluster=east} = %v after the backlog drained, want 0", g)
	}
	if got := logs.count(`"cluster"="east"`, "pacing Work deletions"); got != 1 {
		t.Errorf("east's stream logged pacing %d times, want once:\n%s", got, logs)
	}
	if got := logs.count(`"cluster"="west"`, "pacing Work deletions"); got != 0 {
		t.Errorf("west's stream logged pacing %d times, want never:\n%s", got, logs)
	}

	// The series goes with the stream.
	east.Stop()
	synctest.Eventually(t, wait, "east's gauge removed with its stream", func() (bool, string) {
		return !hasSeries(t, hub, "flotilla_sync_deletions_pending", "cluster", "east"), "still there"
	})
}

// TestDeleteLimitOff checks that a negative rate turns the limit off: many
// marked deletes go out at once with nothing waiting.
func TestDeleteLimitOff(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) {
		c.DeleteRate, c.DeleteBurst = -1, 1
	})
	const n = 20
	for i := range n {
		hub.Works.Put("east", fmt.Sprintf("d-%02d", i), 1)
	}
	east := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, east, "east")
	for i := range n {
		hub.Works.Delete("east", fmt.Sprintf("d-%02d", i))
	}
	synctest.Eventually(t, wait, "every delete sent", func() (bool, string) {
		if st, _ := hub.Server.Stats("east"); st.DeletionsPending != 0 {
			t.Fatalf("%d deletes wait with the limit off", st.DeletionsPending)
		}
		_, d, _ := east.Applier.Counts()
		return d == n, fmt.Sprintf("%d deletes", d)
	})
}

// TestDeleteLimitConfig checks that server.New refuses a negative burst
// and a NaN rate, naming the field.
func TestDeleteLimitConfig(t *testing.T) {
	p := synctest.NewPKI(t)
	for _, tc := range []struct {
		rate  float64
		burst int
		want  string
	}{
		{rate: 1, burst: -1, want: "DeleteBurst"},
		{rate: nan(), burst: 1, want: "DeleteRate"},
	} {
		_, err := server.New(server.Config{
			Works: synctest.NewWorks(), Clusters: synctest.NewClusters(), TLS: p.ServerTLS(t),
			DeleteRate: tc.rate, DeleteBurst: tc.burst,
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rate %v burst %d: err = %v, want one naming %s", tc.rate, tc.burst, err, tc.want)
		}
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// hasSeries says whether metric name has a series with label=value.
func hasSeries(t *testing.T, hub *synctest.Hub, name, label, value string) bool {
	t.Helper()
	families, err := hub.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, label, value) {
				return true
			}
		}
	}
	return false
}

// messages collects log lines from a funcr logger.
type messages struct {
	mu    sync.Mutex
	lines []string
}

func (m *messages) add(prefix, args string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lines = append(m.lines, prefix+" "+args)
}

// count counts the lines holding every one of subs.
func (m *messages) count(subs ...string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range m.lines {
		if !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(l, s) }) {
			n++
		}
	}
	return n
}

func (m *messages) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.lines, "\n")
}
