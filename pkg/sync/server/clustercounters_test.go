package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestClusterCountersExportWhatWasCounted: each cluster's counters come
// out as the series a CounterVec would make (every part of the clamp
// metric, at zero until counted), with the values counted, and a
// forgotten cluster's series go while the others' stay.
func TestClusterCountersExportWhatWasCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.initCluster("east")
	m.perCluster.incOrphaned("east")
	m.perCluster.addClamped("east", clampMessage, 3)
	m.perCluster.addClamped("east", clampMessage, 2)
	m.perCluster.incLimited("west") // refused before it was accepted
	m.perCluster.addClamped("east", "not-a-part", 7)

	got := gatherCluster(t, reg)
	want := map[string]float64{
		"flotilla_sync_works_orphaned_total/east":                 1,
		"flotilla_sync_connects_limited_total/east":               0,
		"flotilla_sync_status_clamped_total/east/" + clampMessage: 5,
		"flotilla_sync_status_clamped_total/east/" + clampSignal:  0,
		"flotilla_sync_works_orphaned_total/west":                 0,
		"flotilla_sync_connects_limited_total/west":               1,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if n := len(got); n != 2*(2+len(clampWhats)) {
		t.Errorf("%d series for two clusters, want %d: %v", n, 2*(2+len(clampWhats)), got)
	}

	m.forgetCluster("east")
	got = gatherCluster(t, reg)
	if n := len(got); n != 2+len(clampWhats) {
		t.Errorf("%d series after east was forgotten, want west's %d: %v", n, 2+len(clampWhats), got)
	}
	if _, ok := got["flotilla_sync_connects_limited_total/west"]; !ok {
		t.Errorf("west's series went with east's: %v", got)
	}
}

// gatherCluster maps "name/cluster[/what]" to the value of each series
// with a cluster label.
func gatherCluster(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			key, has := f.GetName(), false
			for _, l := range s.GetLabel() {
				if l.GetName() == "cluster" {
					has = true
				}
			}
			if !has {
				continue
			}
			// Gather sorts labels by name: cluster, then what.
			for _, l := range s.GetLabel() {
				key += "/" + l.GetValue()
			}
			out[key] = s.GetCounter().GetValue()
		}
	}
	return out
}
