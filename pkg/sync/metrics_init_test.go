package sync_test

import (
	"fmt"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
)

// TestClusterCountersStartAtZero: once a cluster's agent holds a stream,
// its per-cluster counters exist at zero (so an alert's increase() sees
// the first orphan, refusal or clamp); a cluster that never connected has
// none; a cluster whose MemberCluster is deleted loses them, the others
// keep theirs.
func TestClusterCountersStartAtZero(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "web", 1)
	converged(t, hub, synctest.StartAgent(t, p, "east", hub.Addr, nil), "east")
	got := clusterSeries(t, hub)
	for name, want := range wantPerCluster {
		east := got[name]["east"]
		if east.series != want || east.nonzero != 0 {
			t.Errorf("%s{cluster=east}: %d series, %d above zero; want %d at zero", name, east.series, east.nonzero, want)
		}
		if west := got[name]["west"]; west.series != 0 {
			t.Errorf("%s{cluster=west}: %d series for a cluster that never connected", name, west.series)
		}
	}

	// west connects too; then east's MemberCluster is deleted (its stream
	// ends): east's series go, west's stay.
	hub.Works.Put("west", "web", 1)
	converged(t, hub, synctest.StartAgent(t, p, "west", hub.Addr, nil), "west")
	hub.Clusters.Remove("east")
	synctest.Eventually(t, wait, "east's series gone", func() (bool, string) {
		got := clusterSeries(t, hub)
		for name := range wantPerCluster {
			if n := got[name]["east"].series; n != 0 {
				return false, fmt.Sprintf("%s{cluster=east}: %d series", name, n)
			}
		}
		return true, ""
	})
	got = clusterSeries(t, hub)
	for name, want := range wantPerCluster {
		if n := got[name]["west"].series; n != want {
			t.Errorf("%s{cluster=west}: %d series after east went, want %d", name, n, want)
		}
	}
}

// wantPerCluster is how many series each per-cluster counter has for a
// cluster whose agent connected.
var wantPerCluster = map[string]int{
	"flotilla_sync_works_orphaned_total":   1,
	"flotilla_sync_connects_limited_total": 1,
	// One per part the hub clamps (the what label's 15 values).
	"flotilla_sync_status_clamped_total": 15,
}

// seriesCount is how many series of a metric a cluster has, and how many
// of them are above zero.
type seriesCount struct{ series, nonzero int }

// clusterSeries counts the hub's series by metric and cluster.
func clusterSeries(t *testing.T, hub *synctest.Hub) map[string]map[string]seriesCount {
	t.Helper()
	families, err := hub.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]seriesCount{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "cluster" {
					continue
				}
				if got[f.GetName()] == nil {
					got[f.GetName()] = map[string]seriesCount{}
				}
				c := got[f.GetName()][l.GetValue()]
				c.series++
				if m.GetCounter().GetValue() != 0 {
					c.nonzero++
				}
				got[f.GetName()][l.GetValue()] = c
			}
		}
	}
	return got
}
