package membercluster

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// TestHeartbeatAgeFollowsTheTracker: the age is computed at scrape time
// from the last heartbeat heard, a member never heard from has no series,
// and a deleted member's series goes.
func TestHeartbeatAgeFollowsTheTracker(t *testing.T) {
	tr := NewTracker(time.Hour)
	now := time.Unix(1_800_000_000, 0)
	c := &HeartbeatCollector{Tracker: tr, Now: func() time.Time { return now }}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("%d series before any member was heard from, want 0", n)
	}
	tr.AgentConnected("a", syncserver.AgentInfo{ConnectedAt: now.Add(-30 * time.Second)})
	tr.AgentConnected("b", syncserver.AgentInfo{ConnectedAt: now.Add(-5 * time.Second)})
	tr.AgentHeartbeat("a", syncserver.Heartbeat{Time: now.Add(-2 * time.Second)})
	want := `
# HELP flotilla_member_heartbeat_age_seconds ` + helpOf(t, c) + `
# TYPE flotilla_member_heartbeat_age_seconds gauge
flotilla_member_heartbeat_age_seconds{cluster="a"} 2
flotilla_member_heartbeat_age_seconds{cluster="b"} 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "flotilla_member_heartbeat_age_seconds"); err != nil {
		t.Fatal(err)
	}
	// A member that stops heartbeating ages at each scrape.
	now = now.Add(time.Minute)
	if got := testutil.ToFloat64(onlyCluster(t, reg, "b")); got != 65 {
		t.Errorf("b's age a minute later is %v, want 65", got)
	}
	tr.forgetHeartbeat("b")
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Errorf("%d series after member b was deleted, want 1 (a)", n)
	}
}

func helpOf(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	d := (<-ch).String()
	i := strings.Index(d, `help: "`) + len(`help: "`)
	j := strings.Index(d[i:], `", `)
	return d[i : i+j]
}

// onlyCluster is the gauge of cluster as reg gathers it now.
func onlyCluster(t *testing.T, reg *prometheus.Registry, cluster string) prometheus.Gauge {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == cluster {
				g.Set(m.GetGauge().GetValue())
				return g
			}
		}
	}
	t.Fatalf("no series for cluster %s", cluster)
	return nil
}
