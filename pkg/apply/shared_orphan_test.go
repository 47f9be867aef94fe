package apply

import (
	"testing"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestForgottenWorkKeepsItsSharedDependency: Works A and B share a
// ConfigMap. A is forgotten (orphaned: its pods keep running and may
// still mount the ConfigMap), so the ConfigMap is marked kept for
// orphans; deleting B, its last holder, then releases it (it keeps
// running without Flotilla's labels) instead of deleting it, while B's
// own Deployment is deleted. A ConfigMap only a forgotten Work held is
// left as it is, unmarked and unrecorded.
func TestForgottenWorkKeepsItsSharedDependency(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	data := map[string]string{"key": "value"}
	workA := sharedDepWork(t, f.work("a"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "a", "a:1", 1))
	workB := sharedDepWork(t, f.work("b"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "b", "b:1", 1))
	workC := sharedDepWork(t, f.work("c"), 1, "team-a", sharedDepCM(f.ns, "only-c", data, "10"), deployment(f.ns, "c", "c:1", 1))
	for _, w := range []*v1alpha1.Work{workA, workB, workC} {
		for i, r := range f.apply(a, w) {
			if r.Reason != v1alpha1.ReasonApplied {
				t.Fatalf("Work %s manifest %d: reason %q (%s), want Applied", w.Name, i, r.Reason, r.Message)
			}
		}
	}
	uid := f.mustCM(f.ns, "settings", "both Works applied it").UID

	if err := a.Forget(f.ctx, workA.Name); err != nil {
		t.Fatalf("forgetting Work %s: %v", workA.Name, err)
	}
	if err := a.Forget(f.ctx, workC.Name); err != nil {
		t.Fatalf("forgetting Work %s: %v", workC.Name, err)
	}
	cm := f.mustCM(f.ns, "settings", "after Work "+workA.Name+" was forgotten")
	if cm.Annotations[v1alpha1.AnnotationKeptForOrphans] != "true" {
		t.Errorf("the shared ConfigMap of the forgotten Work lacks %s=true: annotations %v", v1alpha1.AnnotationKeptForOrphans, cm.Annotations)
	}
	only := f.mustCM(f.ns, "only-c", "after Work "+workC.Name+" was forgotten")
	if _, marked := only.Annotations[v1alpha1.AnnotationKeptForOrphans]; marked || only.Labels[v1alpha1.LabelDependency] != "true" {
		t.Errorf("a ConfigMap only the forgotten Work held was changed: labels %v, annotations %v", only.Labels, only.Annotations)
	}
	if !f.exists(f.ns, "a") {
		t.Fatalf("the forgotten Work's Deployment was deleted")
	}

	if _, err := a.Delete(f.ctx, workB.Name); err != nil {
		t.Fatalf("deleting Work %s: %v", workB.Name, err)
	}
	f.gone(f.ns, "b")
	cm = f.mustCM(f.ns, "settings", "Work "+workB.Name+", its last holder, was deleted while the forgotten Work's pods may use it")
	if cm.UID != uid {
		t.Errorf("the shared ConfigMap was replaced: UID %s, want %s", cm.UID, uid)
	}
	for _, k := range []string{v1alpha1.LabelDependency, v1alpha1.LabelFleet, v1alpha1.LabelCluster, v1alpha1.LabelMyAppNamespace} {
		if _, ok := cm.Labels[k]; ok {
			t.Errorf("the released ConfigMap still carries label %s: %v", k, cm.Labels)
		}
	}
	if _, ok := cm.Annotations[v1alpha1.AnnotationKeptForOrphans]; ok {
		t.Errorf("the released ConfigMap still carries %s", v1alpha1.AnnotationKeptForOrphans)
	}
	if !f.exists(f.ns, "a") {
		t.Errorf("the forgotten Work's Deployment was deleted with Work %s", workB.Name)
	}
}
