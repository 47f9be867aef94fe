package apply

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestForgetOrphansAWorksObjects shows that Forget drops a Work's record
// and nothing else: its Deployment keeps running with the same UID and its
// labels, Applied no longer lists the Work, a confirmed Prune that leaves
// the Work out deletes nothing (while it still deletes another Work's
// recorded objects), a new Applier (an agent restart) does not find the
// record either, and applying a Work of the same name adopts the same
// object again.
func TestForgetOrphansAWorksObjects(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	web := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1))
	api := newWork(t, f.work("api"), 1, deployment(f.ns, "api", "api:1", 1))
	f.apply(a, web)
	f.apply(a, api)
	uid := f.getDeployment(f.ns, "web").UID

	if err := a.Forget(f.ctx, web.Name); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if cm := f.recordOf(web.Name); cm != nil {
		t.Errorf("the record ConfigMap of %s is still there", web.Name)
	}
	if objs := a.AppliedSet(web.Name); objs != nil {
		t.Errorf("AppliedSet(%s) = %v after Forget, want none", web.Name, objs)
	}
	for _, w := range a.Applied() {
		if w.Name == web.Name {
			t.Errorf("Applied still lists %s", web.Name)
		}
	}
	d := f.getDeployment(f.ns, "web")
	if d.UID != uid || d.Labels[v1alpha1.LabelWork] != v1alpha1.WorkLabelValue(web.Name) {
		t.Fatalf("the Deployment changed after Forget: uid %s (was %s), labels %v", d.UID, uid, d.Labels)
	}

	// A confirmed prune to nothing reaches only what is still recorded.
	deleted, err := a.Prune(f.ctx, sets.New[string](), true)
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	for _, id := range deleted {
		if id.Name == "web" {
			t.Errorf("Prune deleted the orphaned %v", id)
		}
	}
	f.gone(f.ns, "api")
	if !f.exists(f.ns, "web") || f.getDeployment(f.ns, "web").UID != uid {
		t.Fatal("the orphaned Deployment was deleted or replaced by the prune")
	}

	// After a restart nothing is recorded for the Work either.
	restarted := f.recordingApplier(Options{})
	if err := restarted.Load(f.ctx); err != nil {
		t.Fatal(err)
	}
	if objs := restarted.AppliedSet(web.Name); objs != nil {
		t.Errorf("a restarted Applier found %v recorded for %s", objs, web.Name)
	}
	if _, err := restarted.Delete(f.ctx, web.Name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if !f.exists(f.ns, "web") {
		t.Fatal("deleting the forgotten Work deleted its orphaned Deployment")
	}

	// A Work of the same name adopts the same object again.
	f.apply(restarted, newWork(t, web.Name, 2, deployment(f.ns, "web", "web:2", 1)))
	d = f.getDeployment(f.ns, "web")
	if d.UID != uid || d.Spec.Template.Spec.Containers[0].Image != "web:2" {
		t.Fatalf("re-applying did not adopt the orphan: uid %s (was %s), image %s", d.UID, uid, d.Spec.Template.Spec.Containers[0].Image)
	}
	if objs := restarted.AppliedSet(web.Name); len(objs) != 1 || objs[0].UID != uid {
		t.Errorf("the record after adoption = %v, want the Deployment with uid %s", objs, uid)
	}
}
