package rollout

import (
	"strings"
	"testing"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestRolloutAtZeroCompletesAtOnce: with no replica anywhere a new revision
// has nothing to wait for: every cluster takes it in the same step, unless
// the rollout is paused or stopped after a failure.
func TestRolloutAtZeroCompletesAtOnce(t *testing.T) {
	complete := &flotillav1.RolloutStatus{CurrentRevision: rev("v1"), TargetRevision: rev("v1"), Phase: flotillav1.RolloutPhaseComplete,
		Clusters:  []flotillav1.ClusterRolloutStatus{cstat("a", "v1", flotillav1.ClusterRolloutSucceeded), cstat("b", "v1", flotillav1.ClusterRolloutSucceeded), cstat("c", "v1", flotillav1.ClusterRolloutSucceeded)},
		Revisions: []flotillav1.RevisionTemplate{tmpl("v1")}}
	atZero := func(names ...string) []Target {
		var out []Target
		for _, n := range names {
			tg := target(n, "v1", 0)
			tg.Assigned = 0
			out = append(out, tg)
		}
		return out
	}
	zeroSpec := func(image string, paused bool) *flotillav1.MyAppSpec {
		s := progressiveSpec(image)
		s.Replicas = new(int32)
		s.Rollout.Paused = paused
		return s
	}
	for _, tc := range []struct {
		name        string
		prev        *flotillav1.RolloutStatus
		spec        *flotillav1.MyAppSpec
		targets     []Target
		wantPhase   flotillav1.RolloutPhase
		wantImage   string // every cluster's revision
		wantCurrent string
		wantDone    bool
	}{{
		name: "an image change at 0 replicas completes in one step",
		prev: complete, spec: zeroSpec("v2", false), targets: atZero("a", "b", "c"),
		wantPhase: flotillav1.RolloutPhaseComplete, wantImage: "v2", wantCurrent: "v2", wantDone: true,
	}, {
		name: "a rollout under way when the app scales to zero completes in one step",
		prev: rolling(cstat("a", "v2", flotillav1.ClusterRolloutUpdating, 0), cstat("b", "v1", flotillav1.ClusterRolloutPending), cstat("c", "v1", flotillav1.ClusterRolloutPending)),
		spec: zeroSpec("v2", false), targets: atZero("a", "b", "c"),
		wantPhase: flotillav1.RolloutPhaseComplete, wantImage: "v2", wantCurrent: "v2", wantDone: true,
	}, {
		name: "paused holds even at 0",
		prev: complete, spec: zeroSpec("v2", true), targets: atZero("a", "b", "c"),
		wantPhase: flotillav1.RolloutPhasePaused, wantCurrent: "v1",
	}, {
		name: "a failed rollout stays failed until a new revision, even at 0",
		prev: func() *flotillav1.RolloutStatus {
			r := rolling(cstat("a", "v2", flotillav1.ClusterRolloutFailed, 0), cstat("b", "v1", flotillav1.ClusterRolloutPending), cstat("c", "v1", flotillav1.ClusterRolloutPending))
			r.Phase = flotillav1.RolloutPhaseFailed
			return r
		}(),
		spec: zeroSpec("v2", false), targets: atZero("a", "b", "c"),
		wantPhase: flotillav1.RolloutPhaseFailed, wantCurrent: "v1",
	}, {
		name: "a rollout with replicas somewhere still goes in waves",
		prev: complete, spec: zeroSpec("v2", false), targets: append(atZero("a", "b"), target("c", "v1", 2)),
		wantPhase: flotillav1.RolloutPhaseProgressing, wantCurrent: "v1",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res := Step(tc.prev, tc.spec, tc.targets, t0, testKey)
			st := res.Status
			if st.Phase != tc.wantPhase || st.CurrentRevision != rev(tc.wantCurrent) {
				t.Fatalf("phase %s current %s (%s), want %s current %s", st.Phase, st.CurrentRevision, st.Message, tc.wantPhase, rev(tc.wantCurrent))
			}
			if res.Completed != tc.wantDone {
				t.Errorf("Completed = %v, want %v", res.Completed, tc.wantDone)
			}
			if tc.wantImage == "" {
				return
			}
			for _, c := range st.Clusters {
				if c.Revision != rev(tc.wantImage) || c.Phase != flotillav1.ClusterRolloutSucceeded || res.Revisions[c.Name].Name != rev(tc.wantImage) {
					t.Errorf("cluster %s on %s %s, renders %s; want %s Succeeded", c.Name, c.Revision, c.Phase, res.Revisions[c.Name].Name, rev(tc.wantImage))
				}
			}
			if st.Progress != "3/3" || !strings.Contains(st.Message, "scaled to zero") || res.RequeueAfter != 0 {
				t.Errorf("progress %q, message %q, requeue %v", st.Progress, st.Message, res.RequeueAfter)
			}
			if len(st.Revisions) != 1 || st.Revisions[0].Name != rev(tc.wantImage) {
				t.Errorf("revisions kept: %v, want only the target", st.Revisions)
			}
		})
	}
}
