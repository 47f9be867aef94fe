package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

// gaugeValue is the value of the first series of gauge or counter name
// whose labels include labels; ok is false when there is none.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// wantMetric is a check that metric name (with labels) is want.
func wantMetric(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) func() error {
	return func() error {
		got, ok := gaugeValue(t, reg, name, labels)
		if !ok {
			return fmt.Errorf("%s%v absent, want %v", name, labels, want)
		}
		if got != want {
			return fmt.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
		return nil
	}
}

// TestAgentAndHubMetricsFollowTheFleet: the agent's metrics move as it
// connects, applies and repairs a hand edit, and
// the hub's heartbeat age, leader and MyApp status-write metrics as the
// hub runs; a new hub makes the agent reconnect and resume.
func TestAgentAndHubMetricsFollowTheFleet(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	hubReg := newRegistry()
	_, stopHub := f.startSyncHubWith(t, syncAddr, func(o *setup.Options) { o.Registerer = hubReg })
	agentReg := newRegistry()
	opts := f.agentOptions(t, "member-1", syncAddr)
	opts.Registerer = agentReg
	startAgent(t, opts)
	waitReady(t, f.hub, "member-1")

	// Connected with nothing held: a full snapshot, the leader, stream up.
	eventually(t, "agent stream up", 30*time.Second, wantMetric(t, agentReg, "flotilla_agent_stream_up", nil, 1))
	eventually(t, "agent leader", 30*time.Second, wantMetric(t, agentReg, "flotilla_agent_leader", nil, 1))
	eventually(t, "one full snapshot", 30*time.Second, wantMetric(t, agentReg, "flotilla_agent_snapshots_total", nil, 1))
	eventually(t, "a successful prune after the snapshot", 30*time.Second, func() error {
		if v, _ := gaugeValue(t, agentReg, "flotilla_agent_prunes_total", map[string]string{"result": "success"}); v < 1 {
			return fmt.Errorf("prunes_total{result=success} = %v", v)
		}
		return nil
	})
	if err := wantMetric(t, agentReg, "flotilla_agent_resumes_total", nil, 0)(); err != nil {
		t.Error(err)
	}
	eventually(t, "the hub's heartbeat age of member-1", 30*time.Second, func() error {
		age, ok := gaugeValue(t, hubReg, "flotilla_member_heartbeat_age_seconds", map[string]string{"cluster": "member-1"})
		if !ok {
			return fmt.Errorf("no flotilla_member_heartbeat_age_seconds{cluster=member-1}")
		}
		// Heartbeats every 500 ms; a scrape finds the age below the
		// hub's 3 s grace while the agent runs.
		if age < 0 || age > 3 {
			return fmt.Errorf("age %v s", age)
		}
		return nil
	})
	eventually(t, "the hub leads", 30*time.Second, wantMetric(t, ctrlmetrics.Registry, "flotilla_hub_leader", nil, 1))

	writesBefore, _ := gaugeValue(t, ctrlmetrics.Registry, "flotilla_myapp_status_writes_total", map[string]string{"result": "success"})
	app := newApp("web", 1, flotillav1.Placement{})
	app.Spec.Image = "nginx:1.27"
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one Work applied", 60*time.Second, func() error {
		if v, _ := gaugeValue(t, agentReg, "flotilla_agent_applies_total", map[string]string{"result": "success"}); v < 1 {
			return fmt.Errorf("applies_total{result=success} = %v", v)
		}
		return wantMetric(t, agentReg, "flotilla_agent_works_held", nil, 1)()
	})
	mfs, err := agentReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	observed := uint64(0)
	for _, mf := range mfs {
		if mf.GetName() == "flotilla_agent_apply_duration_seconds" {
			observed = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if observed == 0 {
		t.Error("flotilla_agent_apply_duration_seconds observed no apply")
	}
	eventually(t, "MyApp status written", 30*time.Second, func() error {
		if v, _ := gaugeValue(t, ctrlmetrics.Registry, "flotilla_myapp_status_writes_total", map[string]string{"result": "success"}); v <= writesBefore {
			return fmt.Errorf("status_writes_total{result=success} still %v", v)
		}
		return nil
	})

	// A hand edit in the member is drift: the agent repairs it.
	eventually(t, "Deployment web in member-1", 60*time.Second, func() error {
		_, err := f.deployment(ctx, "member-1", "default", "web")
		return err
	})
	// The member's controllers write the Deployment too: re-read and retry
	// on a conflict, so only the edit itself is what the test makes.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := f.deployment(ctx, "member-1", "default", "web")
		if err != nil {
			return err
		}
		d.Spec.Replicas = ptr.To[int32](5)
		return f.members["member-1"].Update(ctx, d)
	}); err != nil {
		t.Fatalf("editing Deployment web in member-1 by hand: %v", err)
	}
	eventually(t, "a drift repair counted", 30*time.Second, func() error {
		if v, _ := gaugeValue(t, agentReg, "flotilla_agent_drift_repairs_total", map[string]string{"result": "success"}); v < 1 {
			return fmt.Errorf("drift_repairs_total{result=success} = %v", v)
		}
		return nil
	})

	// A new hub: the agent reconnects, says it holds the Work, and its
	// stream is a resume, not a full snapshot.
	stopHub()
	if err := wantMetric(t, agentReg, "flotilla_agent_stream_reconnects_total", nil, 0)(); err != nil {
		t.Error(err)
	}
	f.startSyncHubWith(t, syncAddr, func(o *setup.Options) { o.Registerer = newRegistry() })
	eventually(t, "the agent resumed with the new hub", 60*time.Second, wantMetric(t, agentReg, "flotilla_agent_resumes_total", nil, 1))
	if err := wantMetric(t, agentReg, "flotilla_agent_snapshots_total", nil, 1)(); err != nil {
		t.Error(err)
	}
	if v, _ := gaugeValue(t, agentReg, "flotilla_agent_stream_reconnects_total", nil); v < 1 {
		t.Errorf("flotilla_agent_stream_reconnects_total = %v after the hub restarted, want at least 1", v)
	}
	eventually(t, "agent stream up again", 30*time.Second, wantMetric(t, agentReg, "flotilla_agent_stream_up", nil, 1))
}
