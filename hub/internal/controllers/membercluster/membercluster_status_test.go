package membercluster

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// t0 is the "now" of the tests.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const grace = 8 * time.Second

func connectedAgent(lastHeartbeat time.Time) agentState {
	return agentState{connected: true, lastHeartbeat: lastHeartbeat,
		info: syncserver.AgentInfo{Instance: "agent-0", Peer: "10.0.0.7:5123", ConnectedAt: lastHeartbeat}}
}

func at(t time.Time) *metav1.Time { return &metav1.Time{Time: t} }

func TestComputeHealth(t *testing.T) {
	readyFalse := metav1.Condition{Type: flotillav1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Whatever", Message: "as recorded"}
	readyUnknown := metav1.Condition{Type: flotillav1.ConditionReady, Status: metav1.ConditionUnknown, Reason: flotillav1.ReasonHeartbeatMissed, Message: "as recorded"}
	disconnected := connectedAgent(t0.Add(-2 * time.Second))
	disconnected.connected = false
	disconnected.disconnectReason = "rpc error: code = Unavailable desc = transport is closing"
	quietlyGone := disconnected
	quietlyGone.disconnectReason = ""

	type want struct {
		ready, connected          metav1.ConditionStatus
		readyReason, connReason   string
		readyMessage, connMessage string // substrings
		healthy, lost             bool
		lastHeartbeat             time.Time
		recheckAfter              time.Duration
	}
	tests := []struct {
		name string
		in   healthInput
		want want
	}{{
		name: "never heard of and nothing recorded: never connected, Ready unknown, nothing to recheck",
		in:   healthInput{now: t0, grace: grace, since: t0.Add(-time.Hour)},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonNeverConnected, readyMessage: "no agent has connected yet",
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonNeverConnected, connMessage: "no agent has connected yet"},
	}, {
		name: "connected agent heartbeating: Ready, stream open naming the agent and its address, recheck just after the grace period",
		in:   healthInput{now: t0, grace: grace, agent: connectedAgent(t0.Add(-3 * time.Second)), known: true},
		want: want{ready: metav1.ConditionTrue, readyReason: flotillav1.ReasonHeartbeating,
			connected: metav1.ConditionTrue, connReason: flotillav1.ReasonStreamOpen, connMessage: "agent agent-0 connected from 10.0.0.7:5123",
			healthy: true, lastHeartbeat: t0.Add(-3 * time.Second), recheckAfter: 5*time.Second + 100*time.Millisecond},
	}, {
		name: "a heartbeat exactly at the end of the grace period still counts",
		in:   healthInput{now: t0, grace: grace, agent: connectedAgent(t0.Add(-grace)), known: true},
		want: want{ready: metav1.ConditionTrue, readyReason: flotillav1.ReasonHeartbeating,
			connected: metav1.ConditionTrue, connReason: flotillav1.ReasonStreamOpen,
			healthy: true, lastHeartbeat: t0.Add(-grace), recheckAfter: 100 * time.Millisecond},
	}, {
		name: "connected but silent past the grace period: lost, with the last heartbeat in UTC and the grace period",
		in:   healthInput{now: t0, grace: grace, agent: connectedAgent(t0.Add(-grace - time.Nanosecond)), known: true},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonHeartbeatMissed, readyMessage: "no heartbeat since 2030-01-02T03:03:56Z (grace period 8s)",
			connected: metav1.ConditionTrue, connReason: flotillav1.ReasonStreamOpen,
			lost: true, lastHeartbeat: t0.Add(-grace - time.Nanosecond)},
	}, {
		name: "stream ended with a reason: Connected False says why, Ready holds within the grace period",
		in:   healthInput{now: t0, grace: grace, agent: disconnected, known: true},
		want: want{ready: metav1.ConditionTrue, readyReason: flotillav1.ReasonHeartbeating,
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonStreamClosed, connMessage: "the agent's stream ended: rpc error: code = Unavailable",
			healthy: true, lastHeartbeat: t0.Add(-2 * time.Second), recheckAfter: 6*time.Second + 100*time.Millisecond},
	}, {
		name: "stream ended without a reason",
		in:   healthInput{now: t0.Add(time.Minute), grace: grace, agent: quietlyGone, known: true},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonHeartbeatMissed,
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonStreamClosed, connMessage: "the agent's stream ended",
			lost: true, lastHeartbeat: t0.Add(-2 * time.Second)},
	}, {
		name: "a recorded heartbeat newer than the one in memory wins",
		in:   healthInput{now: t0, grace: grace, agent: connectedAgent(t0.Add(-time.Minute)), known: true, recorded: at(t0.Add(-time.Second))},
		want: want{ready: metav1.ConditionTrue, readyReason: flotillav1.ReasonHeartbeating,
			connected: metav1.ConditionTrue, connReason: flotillav1.ReasonStreamOpen,
			healthy: true, lastHeartbeat: t0.Add(-time.Second), recheckAfter: 7*time.Second + 100*time.Millisecond},
	}, {
		name: "a hub that just started keeps the recorded Ready until its own grace period ends",
		in: healthInput{now: t0, grace: grace, since: t0.Add(-time.Second), recorded: at(t0.Add(-time.Hour)),
			conditions: []metav1.Condition{readyFalse}},
		want: want{ready: metav1.ConditionFalse, readyReason: "Whatever", readyMessage: "as recorded",
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonStreamClosed, connMessage: "no agent is connected to this hub instance",
			lastHeartbeat: t0.Add(-time.Hour), recheckAfter: 7*time.Second + 100*time.Millisecond},
	}, {
		name: "a hub that just started does not call a recorded unknown Ready healthy",
		in: healthInput{now: t0, grace: grace, since: t0, recorded: at(t0.Add(-time.Hour)),
			conditions: []metav1.Condition{readyUnknown}},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonHeartbeatMissed,
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonStreamClosed,
			lastHeartbeat: t0.Add(-time.Hour), recheckAfter: grace + 100*time.Millisecond},
	}, {
		name: "a hub that just started with a recorded heartbeat and no condition says Ready",
		in:   healthInput{now: t0, grace: grace, since: t0, recorded: at(t0.Add(-time.Hour))},
		want: want{ready: metav1.ConditionTrue, readyReason: flotillav1.ReasonHeartbeating,
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonStreamClosed,
			healthy: true, lastHeartbeat: t0.Add(-time.Hour), recheckAfter: grace + 100*time.Millisecond},
	}, {
		name: "nothing heard past this hub's own grace period: lost",
		in: healthInput{now: t0, grace: grace, since: t0.Add(-time.Minute), recorded: at(t0.Add(-time.Hour)),
			conditions: []metav1.Condition{readyFalse}},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonHeartbeatMissed, readyMessage: "no heartbeat since 2030-01-02T02:04:05Z",
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonStreamClosed,
			lost: true, lastHeartbeat: t0.Add(-time.Hour)},
	}, {
		name: "Pending, never connected: NotAccepted names the accept command",
		in:   healthInput{now: t0, grace: grace, since: t0.Add(-time.Hour), name: "east", acceptance: flotillav1.AcceptancePending},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonNeverConnected,
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonNotAccepted, connMessage: "kubectl flotilla accept east"},
	}, {
		name: "Denied after it ran: NotAccepted, and past the grace period not lost (no taint, no partition brake)",
		in:   healthInput{now: t0.Add(time.Minute), grace: grace, agent: disconnected, known: true, name: "east", acceptance: flotillav1.AcceptanceDenied},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonHeartbeatMissed,
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonNotAccepted, connMessage: "is Denied",
			lastHeartbeat: t0.Add(-2 * time.Second)},
	}, {
		name: "Accepted explicitly: as if unset",
		in:   healthInput{now: t0, grace: grace, agent: connectedAgent(t0.Add(-3 * time.Second)), known: true, name: "east", acceptance: flotillav1.AcceptanceAccepted},
		want: want{ready: metav1.ConditionTrue, readyReason: flotillav1.ReasonHeartbeating,
			connected: metav1.ConditionTrue, connReason: flotillav1.ReasonStreamOpen,
			healthy: true, lastHeartbeat: t0.Add(-3 * time.Second), recheckAfter: 5*time.Second + 100*time.Millisecond},
	}, {
		name: "Push member reached: Ready, Connected by push naming the hub",
		in:   healthInput{now: t0, grace: grace, agent: pushing(t0.Add(-time.Second)), known: true},
		want: want{ready: metav1.ConditionTrue, readyReason: flotillav1.ReasonHeartbeating, readyMessage: "Push mode",
			connected: metav1.ConditionTrue, connReason: flotillav1.ReasonPushing, connMessage: "the hub (hub-0)",
			healthy: true, lastHeartbeat: t0.Add(-time.Second), recheckAfter: 7*time.Second + 100*time.Millisecond},
	}, {
		name: "Push member's apiserver lost past the grace period: Unreachable, lost like a silent agent",
		in:   healthInput{now: t0, grace: grace, agent: pushLost(t0.Add(-time.Minute)), known: true},
		want: want{ready: metav1.ConditionUnknown, readyReason: flotillav1.ReasonHeartbeatMissed,
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonPushUnreachable, connMessage: "connection refused",
			lost: true, lastHeartbeat: t0.Add(-time.Minute)},
	}, {
		name: "Push member with a bad kubeconfig Secret, never reached: Ready False naming the Secret, not lost",
		in:   healthInput{now: t0, grace: grace, since: t0.Add(-time.Hour), agent: agentState{pushProblem: &pushProblem{reason: flotillav1.ReasonKubeconfigInvalid, message: "Secret flotilla-system/x does not exist"}}, known: true},
		want: want{ready: metav1.ConditionFalse, readyReason: flotillav1.ReasonKubeconfigInvalid, readyMessage: "flotilla-system/x",
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonKubeconfigInvalid, connMessage: "flotilla-system/x"},
	}, {
		name: "Push member whose Secret broke while it ran: Ready False at once, lost only past the grace period",
		in:   healthInput{now: t0, grace: grace, agent: withProblem(pushLost(t0.Add(-time.Minute))), known: true},
		want: want{ready: metav1.ConditionFalse, readyReason: flotillav1.ReasonKubeconfigInvalid, readyMessage: "flotilla-system/x",
			connected: metav1.ConditionFalse, connReason: flotillav1.ReasonKubeconfigInvalid,
			lost: true, lastHeartbeat: t0.Add(-time.Minute)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := computeHealth(tt.in)
			w := tt.want
			if out.ready.Type != flotillav1.ConditionReady || out.ready.Status != w.ready || out.ready.Reason != w.readyReason {
				t.Errorf("Ready = %s %s/%s (%q), want %s/%s", out.ready.Type, out.ready.Status, out.ready.Reason, out.ready.Message, w.ready, w.readyReason)
			}
			if !strings.Contains(out.ready.Message, w.readyMessage) {
				t.Errorf("Ready message %q does not contain %q", out.ready.Message, w.readyMessage)
			}
			if out.connected.Type != flotillav1.ConditionConnected || out.connected.Status != w.connected || out.connected.Reason != w.connReason {
				t.Errorf("Connected = %s %s/%s (%q), want %s/%s", out.connected.Type, out.connected.Status, out.connected.Reason, out.connected.Message, w.connected, w.connReason)
			}
			if !strings.Contains(out.connected.Message, w.connMessage) {
				t.Errorf("Connected message %q does not contain %q", out.connected.Message, w.connMessage)
			}
			if out.healthy != w.healthy || out.lost != w.lost {
				t.Errorf("healthy, lost = %t, %t, want %t, %t", out.healthy, out.lost, w.healthy, w.lost)
			}
			if !out.lastHeartbeat.Equal(w.lastHeartbeat) {
				t.Errorf("lastHeartbeat = %s, want %s", out.lastHeartbeat, w.lastHeartbeat)
			}
			if out.recheckAfter != w.recheckAfter {
				t.Errorf("recheckAfter = %s, want %s", out.recheckAfter, w.recheckAfter)
			}
			if out.healthy && out.lost {
				t.Error("healthy and lost at once")
			}
		})
	}
}

func TestWithUnreachableTaint(t *testing.T) {
	addedBefore := metav1.NewTime(t0.Add(-time.Hour))
	now := t0.Add(750 * time.Millisecond)
	addedNow := metav1.NewTime(t0) // truncated to the second
	unreachable := func(added *metav1.Time) corev1.Taint {
		return corev1.Taint{Key: flotillav1.TaintClusterUnreachable, Effect: corev1.TaintEffectNoExecute, TimeAdded: added}
	}
	dedicated := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	sameKeyNoSchedule := corev1.Taint{Key: flotillav1.TaintClusterUnreachable, Effect: corev1.TaintEffectNoSchedule}

	tests := []struct {
		name    string
		taints  []corev1.Taint
		present bool
		want    []corev1.Taint
	}{
		{"healthy cluster without taints stays without", nil, false, []corev1.Taint{}},
		{"lost cluster gets the taint, added now truncated to the second", nil, true, []corev1.Taint{unreachable(&addedNow)}},
		{"the taint is appended after the cluster's own taints", []corev1.Taint{dedicated}, true, []corev1.Taint{dedicated, unreachable(&addedNow)}},
		{"a cluster still lost keeps the taint's original time", []corev1.Taint{dedicated, unreachable(&addedBefore)}, true, []corev1.Taint{dedicated, unreachable(&addedBefore)}},
		{"a recovered cluster loses the taint and keeps its others in order", []corev1.Taint{unreachable(&addedBefore), dedicated}, false, []corev1.Taint{dedicated}},
		{"a NoSchedule taint with the same key is not the unreachable taint", []corev1.Taint{sameKeyNoSchedule}, false, []corev1.Taint{sameKeyNoSchedule}},
		{"a NoSchedule taint with the same key does not stand in for the unreachable taint", []corev1.Taint{sameKeyNoSchedule}, true, []corev1.Taint{sameKeyNoSchedule, unreachable(&addedNow)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]corev1.Taint(nil), tt.taints...)
			got := withUnreachableTaint(in, tt.present, now)
			if !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if !equality.Semantic.DeepEqual(in, tt.taints) && !(len(in) == 0 && len(tt.taints) == 0) {
				t.Errorf("input changed to %+v", in)
			}
			// Applying it again changes nothing: the controller relies on
			// this to skip writes.
			if again := withUnreachableTaint(got, tt.present, now.Add(time.Minute)); !equality.Semantic.DeepEqual(again, got) {
				t.Errorf("not idempotent: %+v then %+v", got, again)
			}
		})
	}
}

func pushing(lastHeartbeat time.Time) agentState {
	return agentState{connected: true, push: true, lastHeartbeat: lastHeartbeat,
		info: syncserver.AgentInfo{Instance: "hub-0", Peer: "https://10.0.0.9:6443", ConnectedAt: lastHeartbeat}}
}

func pushLost(lastHeartbeat time.Time) agentState {
	s := pushing(lastHeartbeat)
	s.connected = false
	s.disconnectReason = "member /readyz: connection refused"
	return s
}

func withProblem(s agentState) agentState {
	s.pushProblem = &pushProblem{reason: flotillav1.ReasonKubeconfigInvalid, message: "Secret flotilla-system/x has no key \"kubeconfig\""}
	return s
}
