package fleet_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// TestFleetComesUpAndStops starts a local Flotilla with two members (hub
// and agents as processes) serving /metrics as shipped (HTTPS, tokens),
// waits for both members to be Ready through their agents' heartbeats,
// reads the agent leader from the metrics with the scraper's token, has a
// real Prometheus scrape the hub and the agents, and stops everything,
// leaving no process.
func TestFleetComesUpAndStops(t *testing.T) {
	bin := t.TempDir()
	if err := fleet.BuildBinaries("../..", bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := fleet.Start(ctx, fleet.Config{
		Dir: t.TempDir(), FlotillaBinDir: bin, CRDDir: "../../deploy/hub/crds",
		Members: testbed.DefaultMembers(2), HeartbeatGrace: 3 * time.Second,
		SecureMetrics: true, Pprof: true,
	})
	if err != nil {
		t.Fatalf("starting the fleet: %v", err)
	}
	// The agents run with GODEBUG=memprofilerate=0, as shipped, and
	// --pprof-bind-address: asked for profiles, the agent samples again.
	heap := filepath.Join(t.TempDir(), "agent.heap.txt")
	if err := fleet.SaveHeapText(f.AgentPprofAddr("agent-member-1-0"), heap); err != nil {
		t.Errorf("the agent's heap profile: %v", err)
	} else if text, err := os.ReadFile(heap); err != nil {
		t.Error(err)
	} else if first, _, _ := strings.Cut(string(text), "\n"); !strings.HasSuffix(first, "@ heap/1048576") {
		t.Errorf("the agent's heap profile begins %q; want it sampled at Go's default rate (heap/1048576), as --pprof-bind-address turns on", first)
	}
	var pids []int
	for _, c := range f.Testbed.Clusters() {
		for _, pid := range c.PIDs() {
			pids = append(pids, pid)
		}
	}
	leader, err := f.AgentLeader("member-1")
	if err != nil {
		t.Errorf("finding member-1's agent leader: %v", err)
	} else if leader != "agent-member-1-0" {
		t.Errorf("leader %q, want agent-member-1-0 (the only replica)", leader)
	}
	eps := f.MetricsEndpoints()
	if len(eps) != 3 {
		t.Errorf("metrics endpoints %+v, want the hub and two agents", eps)
	}
	for _, ep := range eps {
		if ep.Token == "" {
			t.Errorf("%s: no scraper token with SecureMetrics", ep.Process)
		}
		if m := fleet.Scrape(ep.Addr); m != "" {
			t.Errorf("%s answered /metrics over plain HTTP with SecureMetrics", ep.Process)
		}
		if code, _ := fleet.GetMetrics(ep.Addr, ""); code != 401 {
			t.Errorf("%s: /metrics without a token answered %d, want 401", ep.Process, code)
		}
	}
	p, err := f.StartFleetPrometheus(ctx)
	if err != nil {
		t.Errorf("starting the fleet's Prometheus: %v", err)
	} else {
		pids = append(pids, p.Process().Pid())
	}
	if err := f.Stop(); err != nil {
		t.Fatalf("stopping the fleet: %v", err)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("process %d still exists after Stop", pid)
		}
	}
}
