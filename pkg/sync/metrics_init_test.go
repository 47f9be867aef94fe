package sync_test

import (
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
)

// TestClusterCountersStartAtZero: once a cluster's agent holds a stream,
// its per-cluster counters exist at zero (so an alert's increase() sees
// the first orphan, refusal or clamp); a cluster that never connected has
// none.
func TestClusterCountersStartAtZero(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "web", 1)
	agent := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	synctest.Eventually(t, wait, "the agent holding its Work", func() (bool, string) {
		d := synctest.Diff(hub.Works.Desired("east"), agent.Applier.HeldGenerations())
		return d == "", d
	})
	families, err := hub.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Series per cluster of each metric, and whether any is above zero.
	type count struct{ series, nonzero int }
	got := map[string]map[string]count{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "cluster" {
					continue
				}
				if got[f.GetName()] == nil {
					got[f.GetName()] = map[string]count{}
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
	for name, want := range map[string]int{
		"flotilla_sync_works_orphaned_total":   1,
		"flotilla_sync_connects_limited_total": 1,
		// One per part the hub clamps (the what label's 15 values).
		"flotilla_sync_status_clamped_total": 15,
	} {
		east := got[name]["east"]
		if east.series != want || east.nonzero != 0 {
			t.Errorf("%s{cluster=east}: %d series, %d above zero; want %d at zero", name, east.series, east.nonzero, want)
		}
		if west := got[name]["west"]; west.series != 0 {
			t.Errorf("%s{cluster=west}: %d series for a cluster that never connected", name, west.series)
		}
	}
}
