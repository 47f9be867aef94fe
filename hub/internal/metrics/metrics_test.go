package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestClusterSeriesLifecycle: a member's drop counters exist at zero from
// its first connect, and every hub-side series of a member goes with its
// MemberCluster, leaving the other members' alone.
func TestClusterSeriesLifecycle(t *testing.T) {
	InitCluster("east")
	InitCluster("west")
	Evictions.WithLabelValues("east", "Unreachable").Inc()
	Evictions.WithLabelValues("west", "Unreachable").Inc()
	count := func(v prometheus.Collector, cluster string) int {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(v)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "cluster" && l.GetValue() == cluster {
						n++
					}
				}
			}
		}
		return n
	}
	if n := count(WorkStatusDropped, "east"); n != 2 {
		t.Errorf("east: %d drop series after its first connect, want 2 (rejected, buffer_full)", n)
	}
	if v := testutil.ToFloat64(WorkStatusDropped.WithLabelValues("east", DroppedRejected)); v != 0 {
		t.Errorf("east rejected = %v before any drop, want 0", v)
	}
	ForgetCluster("east")
	if n := count(WorkStatusDropped, "east") + count(Evictions, "east"); n != 0 {
		t.Errorf("east: %d series left after its MemberCluster went", n)
	}
	if n := count(WorkStatusDropped, "west") + count(Evictions, "west"); n != 3 {
		t.Errorf("west: %d series, want its 3 (two drop results, one eviction)", n)
	}
	ForgetCluster("west")
}
