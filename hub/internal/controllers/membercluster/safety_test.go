package membercluster

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

func TestConnectedFleetMismatch(t *testing.T) {
	refused := agentState{lastHeartbeat: t0, refusal: &syncserver.Refusal{Reason: "this agent serves fleet a, not the hub's fleet b", Peer: "10.0.0.9:4000"}}
	stillConnected := connectedAgent(t0)
	stillConnected.refusal = refused.refusal
	tests := []struct {
		name       string
		agent      agentState
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{name: "a refusing agent: FleetMismatch with its reason and address", agent: refused,
			wantStatus: metav1.ConditionFalse, wantReason: flotillav1.ReasonFleetMismatch, wantMsg: "(from 10.0.0.9:4000) refused this hub and applies nothing from it: this agent serves fleet a"},
		{name: "another agent of the cluster is connected: it stays connected", agent: stillConnected,
			wantStatus: metav1.ConditionTrue, wantReason: flotillav1.ReasonStreamOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := computeHealth(healthInput{now: t0, grace: grace, agent: tt.agent, known: true})
			c := out.connected
			if c.Status != tt.wantStatus || c.Reason != tt.wantReason || !strings.Contains(c.Message, tt.wantMsg) {
				t.Errorf("Connected = %s/%s %q; want %s/%s containing %q", c.Status, c.Reason, c.Message, tt.wantStatus, tt.wantReason, tt.wantMsg)
			}
		})
	}
}

func TestComputePruneBlocked(t *testing.T) {
	blocked := &syncserver.PruneBlocked{Epoch: 1700000000000001, WouldDelete: 3, Held: 4, Works: []string{"b", "c", "d"}}
	truncated := &syncserver.PruneBlocked{Epoch: 7, WouldDelete: 300, Held: 400, Works: []string{"b", "c"}}
	tests := []struct {
		name       string
		agent      agentState
		known      bool
		wantNil    bool
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    []string
	}{
		{name: "nothing heard of the agent: leave the condition as recorded", wantNil: true},
		{name: "connected, no prune heard yet: leave it", agent: connectedAgent(t0), known: true, wantNil: true},
		{name: "held: counts, Works, epoch and how to confirm", agent: agentState{pruneHeard: true, blocked: blocked}, known: true,
			wantStatus: metav1.ConditionTrue, wantReason: flotillav1.ReasonAwaitingPruneConfirmation,
			wantMsg: []string{"snapshot 1700000000000001", "delete 3 of the 4 objects", "(Works: b, c, d)", "nothing was deleted",
				"kubectl annotate membercluster m1 flotilla.dev/confirm-prune=1700000000000001 --overwrite"}},
		{name: "held, Works cut short: says there are more", agent: agentState{pruneHeard: true, blocked: truncated}, known: true,
			wantStatus: metav1.ConditionTrue, wantReason: flotillav1.ReasonAwaitingPruneConfirmation, wantMsg: []string{"(Works: b, c, ...)"}},
		{name: "pruned: clears", agent: agentState{pruneHeard: true}, known: true,
			wantStatus: metav1.ConditionFalse, wantReason: flotillav1.ReasonPruned},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := computePruneBlocked("m1", tt.agent, tt.known)
			if tt.wantNil {
				if c != nil {
					t.Fatalf("got %+v, want nil", c)
				}
				return
			}
			if c == nil || c.Type != flotillav1.ConditionPruneBlocked || c.Status != tt.wantStatus || c.Reason != tt.wantReason {
				t.Fatalf("got %+v, want %s/%s", c, tt.wantStatus, tt.wantReason)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(c.Message, m) {
					t.Errorf("message %q lacks %q", c.Message, m)
				}
			}
		})
	}
}

func TestConfirmDue(t *testing.T) {
	blocked := agentState{pruneHeard: true, blocked: &syncserver.PruneBlocked{Epoch: 42}}
	sent := blocked
	sent.confirmSent = 42
	ann := func(v string) map[string]string { return map[string]string{flotillav1.AnnotationConfirmPrune: v} }
	tests := []struct {
		name        string
		annotations map[string]string
		agent       agentState
		want        bool
	}{
		{name: "no annotation", agent: blocked},
		{name: "annotation for the held epoch", annotations: ann("42"), agent: blocked, want: true},
		{name: "annotation with spaces", annotations: ann(" 42 "), agent: blocked, want: true},
		{name: "annotation for another epoch", annotations: ann("41"), agent: blocked},
		{name: "not a number", annotations: ann("yes"), agent: blocked},
		{name: "nothing held", annotations: ann("42"), agent: agentState{pruneHeard: true}},
		{name: "already confirmed", annotations: ann("42"), agent: sent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			epoch, due := confirmDue(tt.annotations, tt.agent)
			if due != tt.want || (due && epoch != 42) {
				t.Errorf("confirmDue = %d, %v; want %v", epoch, due, tt.want)
			}
		})
	}
}

func TestTrackerPruneAndRefusal(t *testing.T) {
	tr := NewTracker(0)
	tr.AgentRefused("m1", syncserver.Refusal{Reason: "other fleet"})
	if got := wakeups(tr); len(got) != 1 {
		t.Fatalf("a refusal woke %v, want [m1]", got)
	}
	s, _ := tr.snapshot("m1")
	if s.refusal == nil || s.connected {
		t.Fatalf("after a refusal: %+v", s)
	}
	tr.AgentConnected("m1", syncserver.AgentInfo{ConnectedAt: t0})
	if s, _ := tr.snapshot("m1"); s.refusal != nil {
		t.Errorf("an accepted agent keeps the old refusal: %+v", s.refusal)
	}
	wakeups(tr)

	tr.AgentPruneBlocked("m1", syncserver.PruneBlocked{Epoch: 5, WouldDelete: 3, Held: 4})
	tr.markConfirmSent("m1", 5)
	if s, _ := tr.snapshot("m1"); !s.pruneHeard || s.blocked == nil || s.confirmSent != 5 {
		t.Errorf("after a held prune: %+v", s)
	}
	tr.AgentPruned("m1", 5, true)
	if s, _ := tr.snapshot("m1"); !s.pruneHeard || s.blocked != nil {
		t.Errorf("after the prune: %+v", s)
	}
	if got := wakeups(tr); len(got) != 2 {
		t.Errorf("a held prune and its prune woke %v, want twice", got)
	}
	tr.AgentPruned("m1", 6, false)
	if got := wakeups(tr); len(got) != 0 {
		t.Errorf("a routine prune woke %v; nothing changed", got)
	}
}
