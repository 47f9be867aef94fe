package membercluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

func summary(cpu string) *flotillav1.ResourceSummary {
	return &flotillav1.ResourceSummary{Nodes: 1, Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}
}

// wakeups drains the Tracker's events and returns the cluster names woken.
func wakeups(tr *Tracker) []string {
	var out []string
	for {
		select {
		case e := <-tr.Events():
			out = append(out, e.Object.GetName())
		default:
			return out
		}
	}
}

func TestTrackerWakesOnConnectAndDisconnect(t *testing.T) {
	tr := NewTracker(time.Minute)
	tr.AgentConnected("m1", syncserver.AgentInfo{Instance: "agent-0", ConnectedAt: t0})
	if got := wakeups(tr); len(got) != 1 || got[0] != "m1" {
		t.Fatalf("after connect woke %v, want [m1]", got)
	}
	tr.AgentDisconnected("m1", errors.New("stream reset"))
	if got := wakeups(tr); len(got) != 1 || got[0] != "m1" {
		t.Fatalf("after disconnect woke %v, want [m1]", got)
	}
	// Connecting again right away still wakes: connection changes are
	// never rate limited.
	tr.AgentConnected("m1", syncserver.AgentInfo{Instance: "agent-1", ConnectedAt: t0.Add(time.Second)})
	if got := wakeups(tr); len(got) != 1 {
		t.Fatalf("after reconnect woke %v, want [m1]", got)
	}
}

// TestTrackerHeartbeatWakeups: heartbeats wake the controller only when
// they may change what it writes, at most once per interval per cluster
// for resource changes, and at once after a silence.
func TestTrackerHeartbeatWakeups(t *testing.T) {
	const interval = time.Minute
	tests := []struct {
		name string
		// sinceWake is how long ago the cluster was last woken.
		sinceWake time.Duration
		hb        syncserver.Heartbeat
		wantWake  bool
	}{
		{"a steady heartbeat without resources does not wake", 0, syncserver.Heartbeat{Time: t0.Add(2 * time.Second)}, false},
		{"a steady heartbeat with unchanged resources does not wake", 0, syncserver.Heartbeat{Time: t0.Add(2 * time.Second), Resources: summary("4")}, false},
		{"a steady heartbeat with unchanged resources does not wake even long after the last wake", 2 * interval, syncserver.Heartbeat{Time: t0.Add(2 * time.Second), Resources: summary("4")}, false},
		{"changed resources within the interval since the last wake do not wake", interval / 2, syncserver.Heartbeat{Time: t0.Add(2 * time.Second), Resources: summary("3")}, false},
		{"changed resources once the interval has passed wake", interval, syncserver.Heartbeat{Time: t0.Add(2 * time.Second), Resources: summary("3")}, true},
		{"a heartbeat after a silence longer than the interval wakes", 0, syncserver.Heartbeat{Time: t0.Add(interval + time.Second)}, true},
		{"a heartbeat after a silence of exactly the interval does not wake", 0, syncserver.Heartbeat{Time: t0.Add(interval)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(interval)
			tr.AgentConnected("m1", syncserver.AgentInfo{ConnectedAt: t0, Resources: summary("4")})
			wakeups(tr)
			// The wake-up limit runs on the process clock: move the last
			// wake-up back rather than sleep.
			tr.mu.Lock()
			tr.lastWake["m1"] = time.Now().Add(-tt.sinceWake)
			tr.mu.Unlock()

			tr.AgentHeartbeat("m1", tt.hb)
			if got := len(wakeups(tr)) > 0; got != tt.wantWake {
				t.Errorf("woke = %t, want %t", got, tt.wantWake)
			}
			// Whether or not it woke, the heartbeat is recorded.
			s, ok := tr.snapshot("m1")
			if !ok || !s.lastHeartbeat.Equal(tt.hb.Time) {
				t.Errorf("lastHeartbeat = %s (known %t), want %s", s.lastHeartbeat, ok, tt.hb.Time)
			}
			want := summary("4")
			if tt.hb.Resources != nil {
				want = tt.hb.Resources
			}
			if s.resources == nil || !s.resources.Allocatable.Cpu().Equal(*want.Allocatable.Cpu()) {
				t.Errorf("resources = %+v, want %+v", s.resources, want)
			}
		})
	}
}

func TestTrackerFirstHeartbeatOfAnUnknownClusterWakes(t *testing.T) {
	tr := NewTracker(time.Minute)
	tr.AgentHeartbeat("m1", syncserver.Heartbeat{Time: t0})
	if got := wakeups(tr); len(got) != 1 || got[0] != "m1" {
		t.Errorf("woke %v, want [m1]", got)
	}
}

func TestTrackerRateLimitsEachClusterOnItsOwn(t *testing.T) {
	tr := NewTracker(time.Minute)
	for _, c := range []string{"m1", "m2"} {
		tr.AgentConnected(c, syncserver.AgentInfo{ConnectedAt: t0, Resources: summary("4")})
	}
	wakeups(tr)
	tr.mu.Lock()
	tr.lastWake["m2"] = time.Now().Add(-time.Hour)
	tr.mu.Unlock()
	for _, c := range []string{"m1", "m2"} {
		tr.AgentHeartbeat(c, syncserver.Heartbeat{Time: t0.Add(time.Second), Resources: summary("2")})
	}
	if got := wakeups(tr); len(got) != 1 || got[0] != "m2" {
		t.Errorf("woke %v, want only [m2], whose last wake-up was long ago", got)
	}
}

func TestTrackerSnapshot(t *testing.T) {
	tr := NewTracker(time.Minute)
	if _, ok := tr.snapshot("m1"); ok {
		t.Fatal("snapshot of a cluster never heard of says known")
	}

	info := syncserver.AgentInfo{Identity: "flotilla://cluster/m1", Version: "v1", Instance: "agent-0", KubernetesVersion: "v1.37.2",
		Peer: "10.0.0.7:5123", ConnectedAt: t0, Resources: summary("4")}
	tr.AgentConnected("m1", info)
	s, ok := tr.snapshot("m1")
	if !ok || !s.connected || s.info != info || !s.lastHeartbeat.Equal(t0) || s.resources != info.Resources || s.disconnectReason != "" {
		t.Fatalf("snapshot after connect = %+v (known %t)", s, ok)
	}

	// The snapshot is a copy: changing it changes nothing in the Tracker,
	// and later events do not change it.
	s.connected = false
	s.lastHeartbeat = time.Time{}
	s.info.Instance = "changed"
	tr.AgentHeartbeat("m1", syncserver.Heartbeat{Time: t0.Add(time.Second), Resources: summary("2")})
	again, _ := tr.snapshot("m1")
	if !again.connected || !again.lastHeartbeat.Equal(t0.Add(time.Second)) || again.info.Instance != "agent-0" {
		t.Errorf("the Tracker's state changed through a snapshot: %+v", again)
	}
	if again.resources.Allocatable.Cpu().String() != "2" {
		t.Errorf("resources after the heartbeat = %v, want cpu 2", again.resources.Allocatable)
	}
	if got := s.resources.Allocatable.Cpu().String(); got != "4" {
		t.Errorf("an earlier snapshot's resources changed to cpu %s", got)
	}

	// A reconnect without a summary keeps the last known one.
	tr.AgentConnected("m1", syncserver.AgentInfo{Instance: "agent-1", ConnectedAt: t0.Add(time.Minute)})
	if s, _ := tr.snapshot("m1"); s.resources == nil || s.resources.Allocatable.Cpu().String() != "2" || s.info.Instance != "agent-1" {
		t.Errorf("after a reconnect without resources: %+v", s)
	}
}

func TestTrackerDisconnectReasons(t *testing.T) {
	tests := []struct {
		name   string
		events func(tr *Tracker)
		want   string
	}{{
		name: "a disconnect records its error",
		events: func(tr *Tracker) {
			tr.AgentDisconnected("m1", errors.New("rpc error: code = Unavailable"))
		},
		want: "rpc error: code = Unavailable",
	}, {
		name: "a disconnect without an error keeps the previous reason",
		events: func(tr *Tracker) {
			tr.AgentDisconnected("m1", errors.New("first"))
			tr.AgentDisconnected("m1", nil)
		},
		want: "first",
	}, {
		name: "a reconnect clears the reason",
		events: func(tr *Tracker) {
			tr.AgentDisconnected("m1", errors.New("first"))
			tr.AgentConnected("m1", syncserver.AgentInfo{ConnectedAt: t0.Add(time.Second)})
		},
		want: "",
	}, {
		name: "a disconnect without an error after a reconnect has no reason",
		events: func(tr *Tracker) {
			tr.AgentDisconnected("m1", errors.New("first"))
			tr.AgentConnected("m1", syncserver.AgentInfo{ConnectedAt: t0.Add(time.Second)})
			tr.AgentDisconnected("m1", nil)
		},
		want: "",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(time.Minute)
			tr.AgentConnected("m1", syncserver.AgentInfo{ConnectedAt: t0})
			tt.events(tr)
			s, _ := tr.snapshot("m1")
			if s.disconnectReason != tt.want {
				t.Errorf("disconnectReason = %q, want %q", s.disconnectReason, tt.want)
			}
			// And computeHealth says it in Connected's message.
			h := computeHealth(healthInput{now: t0.Add(2 * time.Second), grace: grace, agent: s, known: true})
			if !s.connected && tt.want != "" && h.connected.Message != "the agent's stream ended: "+tt.want {
				t.Errorf("Connected message = %q", h.connected.Message)
			}
		})
	}
}

// TestTrackerNeverBlocks: with nobody reading the events, the Tracker drops
// wake-ups instead of blocking the sync server.
func TestTrackerNeverBlocks(t *testing.T) {
	tr := NewTracker(time.Minute)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			tr.AgentConnected(fmt.Sprintf("m%d", i), syncserver.AgentInfo{ConnectedAt: t0})
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("AgentConnected blocked on a full event buffer")
	}
	if n := len(wakeups(tr)); n != cap(tr.events) {
		t.Errorf("%d wake-ups buffered, want the buffer's %d", n, cap(tr.events))
	}
	if _, ok := tr.snapshot("m1999"); !ok {
		t.Error("the state of a cluster whose wake-up was dropped was not recorded")
	}
}

// TestTrackerPushStates: PushUp connects a Push member and then
// heartbeats; PushDown ends only the hub's own push connection, never an
// agent's stream; PushUnavailable records why the hub cannot push and ends
// the push connection; the next PushUp clears it.
func TestTrackerPushStates(t *testing.T) {
	tr := NewTracker(time.Hour)
	now := time.Now()
	info := syncserver.AgentInfo{Identity: "push:m", Instance: "hub-0"}
	tr.PushUp("m", info, now, nil)
	s, _ := tr.snapshot("m")
	if !s.connected || !s.push || !s.info.ConnectedAt.Equal(now) {
		t.Fatalf("after PushUp: connected %t push %t connectedAt %s", s.connected, s.push, s.info.ConnectedAt)
	}
	later := now.Add(2 * time.Second)
	tr.PushUp("m", info, later, nil)
	if s, _ = tr.snapshot("m"); !s.lastHeartbeat.Equal(later) || !s.info.ConnectedAt.Equal(now) {
		t.Fatalf("a second PushUp is a heartbeat: lastHeartbeat %s connectedAt %s", s.lastHeartbeat, s.info.ConnectedAt)
	}
	tr.PushDown("m", errors.New("member /readyz: refused"))
	if s, _ = tr.snapshot("m"); s.connected || s.disconnectReason == "" {
		t.Fatalf("after PushDown: connected %t reason %q", s.connected, s.disconnectReason)
	}

	// An agent's stream is not the hub's push: PushDown leaves it alone.
	tr.AgentConnected("a", syncserver.AgentInfo{Identity: "flotilla://cluster/a", ConnectedAt: now})
	tr.PushDown("a", errors.New("disengaged"))
	if s, _ = tr.snapshot("a"); !s.connected || s.push {
		t.Fatalf("PushDown touched an agent's stream: connected %t push %t", s.connected, s.push)
	}
	// An agent that connects replaces a push connection.
	tr.PushUp("a2", info, now, nil)
	tr.AgentConnected("a2", syncserver.AgentInfo{Identity: "flotilla://cluster/a2", ConnectedAt: now})
	if s, _ = tr.snapshot("a2"); !s.connected || s.push {
		t.Fatalf("an agent's connect after a push: connected %t push %t", s.connected, s.push)
	}

	tr.PushUp("p", info, now, nil)
	tr.PushUnavailable("p", flotillav1.ReasonKubeconfigInvalid, "Secret flotilla-system/x does not exist")
	if s, _ = tr.snapshot("p"); s.connected || s.pushProblem == nil || s.pushProblem.reason != flotillav1.ReasonKubeconfigInvalid {
		t.Fatalf("after PushUnavailable: connected %t problem %+v", s.connected, s.pushProblem)
	}
	tr.PushUp("p", info, later, nil)
	if s, _ = tr.snapshot("p"); !s.connected || s.pushProblem != nil {
		t.Fatalf("after PushUp again: connected %t problem %+v", s.connected, s.pushProblem)
	}
}
