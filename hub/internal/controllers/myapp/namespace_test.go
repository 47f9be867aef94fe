package myapp

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func sharedPolicy(level flotillav1.PodSecurityLevel) flotillav1.FleetNamespacePolicy {
	return flotillav1.FleetNamespacePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-shared"},
		Spec:       flotillav1.FleetNamespacePolicySpec{HubNamespaces: []string{"shop"}, MemberNamespaces: []string{"shared-*"}, PodSecurity: level},
	}
}

// TestWithdrawnGrantHoldsTheWorks: an app placed into a granted namespace
// gets Works with the policy's Pod Security level; once the grant is
// withdrawn, a spec change writes no Work, deletes none, keeps the
// placement and says why in Scheduled, Degraded and Ready; when the
// grant comes back, the held change is written.
func TestWithdrawnGrantHoldsTheWorks(t *testing.T) {
	h := newHub(t, app(func(a *flotillav1.MyApp) { a.Spec.TargetNamespace = "shared-x" }), "a", "b")
	h.policies = []flotillav1.FleetNamespacePolicy{sharedPolicy(flotillav1.PodSecurityRestricted)}
	h.settle()
	h.wantReady(flotillav1.ReasonReady, "")
	before := h.uidsByCluster()
	if len(before) != 2 {
		t.Fatalf("Works in %v, want a and b", before)
	}
	for name, w := range h.works {
		if w.Spec.PodSecurity != flotillav1.PodSecurityRestricted {
			t.Errorf("Work of %s has podSecurity %q, want the policy's restricted", name, w.Spec.PodSecurity)
		}
	}
	placement := h.app.Status.Placement.DeepCopy()

	h.policies = nil
	scale(h, 6)
	d := h.reconcile()
	if len(d.works.apply) != 0 || len(d.works.remove) != 0 {
		t.Fatalf("a denied app writes %d and deletes %d Works, want none", len(d.works.apply), len(d.works.remove))
	}
	if got := h.replicasByCluster(); got != "a=2 b=2" {
		t.Errorf("Works %s, want them as they were (a=2 b=2)", got)
	}
	if !equalPlacement(h.app.Status.Placement, placement) {
		t.Errorf("placement changed to %+v, want it kept", h.app.Status.Placement)
	}
	for _, typ := range []string{flotillav1.ConditionScheduled, flotillav1.ConditionReady} {
		c := meta.FindStatusCondition(h.app.Status.Conditions, typ)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != flotillav1.ReasonNamespaceNotAllowed || c.ObservedGeneration != h.app.Generation {
			t.Fatalf("%s = %+v, want False %s for generation %d", typ, c, flotillav1.ReasonNamespaceNotAllowed, h.app.Generation)
		}
	}
	c := meta.FindStatusCondition(h.app.Status.Conditions, flotillav1.ConditionScheduled)
	for _, s := range []string{`spec.targetNamespace "shared-x" is not allowed`, `no FleetNamespacePolicy matches hub namespace "shop"`} {
		if !strings.Contains(c.Message, s) {
			t.Errorf("Scheduled message %q does not contain %q", c.Message, s)
		}
	}
	if !meta.IsStatusConditionTrue(h.app.Status.Conditions, flotillav1.ConditionDegraded) {
		t.Errorf("Degraded is not True: %+v", h.app.Status.Conditions)
	}
	if len(h.app.Status.Clusters) != 2 {
		t.Errorf("status lists %d clusters, want the 2 the app still runs on", len(h.app.Status.Clusters))
	}

	// The grant comes back, with another level: the held change and the
	// new level are written to the same Works.
	h.policies = []flotillav1.FleetNamespacePolicy{sharedPolicy(flotillav1.PodSecurityBaseline)}
	h.settle()
	h.wantReady(flotillav1.ReasonReady, "")
	if got := h.replicasByCluster(); got != "a=6 b=6" {
		t.Errorf("Works %s after the grant came back, want a=6 b=6 (Duplicated)", got)
	}
	for name, uid := range h.uidsByCluster() {
		if before[name] != uid {
			t.Errorf("the Work of %s was replaced", name)
		}
		if h.works[name].Spec.PodSecurity != flotillav1.PodSecurityBaseline {
			t.Errorf("Work of %s has podSecurity %q, want baseline", name, h.works[name].Spec.PodSecurity)
		}
	}
}

// TestDeniedAppKeepsItsRollout: a Progressive rollout's state is held, not
// cleared, while the namespace is not allowed.
func TestDeniedAppKeepsItsRollout(t *testing.T) {
	a := app(func(a *flotillav1.MyApp) { a.Spec.TargetNamespace = "kube-system" })
	a.Status.Rollout = &flotillav1.RolloutStatus{TargetRevision: "abc"}
	a.Status.Placement = &flotillav1.PlacementDecision{Clusters: []flotillav1.TargetCluster{{Name: "a", Replicas: 2}}}
	h := newHub(t, a, "a")
	d := h.reconcile()
	if len(d.works.apply) != 0 {
		t.Fatalf("a Work was written for kube-system without a grant")
	}
	if d.status.Rollout == nil || d.status.Rollout.TargetRevision != "abc" {
		t.Errorf("rollout = %+v, want it kept", d.status.Rollout)
	}
	if ptr.Deref(d.status.Placement, flotillav1.PlacementDecision{}).Clusters[0].Name != "a" {
		t.Errorf("placement = %+v, want it kept", d.status.Placement)
	}
}

func equalPlacement(a, b *flotillav1.PlacementDecision) bool {
	if a == nil || b == nil {
		return a == b
	}
	if len(a.Clusters) != len(b.Clusters) {
		return false
	}
	for i := range a.Clusters {
		if a.Clusters[i].Name != b.Clusters[i].Name || a.Clusters[i].Replicas != b.Clusters[i].Replicas {
			return false
		}
	}
	return true
}
