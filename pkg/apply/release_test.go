package apply

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// orphanWork is newWork with spec.deletionPolicy Orphan.
func orphanWork(t *testing.T, name string, gen int64, objs ...*appsv1.Deployment) *v1alpha1.Work {
	t.Helper()
	w := newWork(t, name, gen)
	for _, d := range objs {
		w.Spec.Manifests = append(w.Spec.Manifests, newWork(t, name, gen, d).Spec.Manifests...)
	}
	w.Spec.DeletionPolicy = v1alpha1.DeletionPolicyOrphan
	return w
}

// assertReleased fails unless Deployment ns/name still runs with UID uid
// and carries nothing of Flotilla's: no label, no annotation, no
// managedFields entry of the applier a.
func (f *fixture) assertReleased(a *Applier, ns, name string, uid any) {
	f.t.Helper()
	d := f.getDeployment(ns, name)
	if d.UID != uid {
		f.t.Fatalf("Deployment %s/%s was replaced: uid %s, want %s", ns, name, d.UID, uid)
	}
	for _, k := range releasedLabels {
		if v, ok := d.Labels[k]; ok {
			f.t.Errorf("released Deployment %s/%s still has label %s=%q", ns, name, k, v)
		}
	}
	if v, ok := d.Annotations[v1alpha1.AnnotationWork]; ok {
		f.t.Errorf("released Deployment %s/%s still has annotation %s=%q", ns, name, v1alpha1.AnnotationWork, v)
	}
	for _, e := range d.ManagedFields {
		if e.Manager == a.FieldOwner() {
			f.t.Errorf("released Deployment %s/%s still has a managedFields entry of %s (%s)", ns, name, e.Manager, e.Operation)
		}
	}
	if d.Spec.Template.Labels["app"] != name || *d.Spec.Replicas != 1 {
		f.t.Errorf("releasing changed the Deployment's own fields: template labels %v, replicas %d", d.Spec.Template.Labels, *d.Spec.Replicas)
	}
}

// TestOrphanPolicyReleasesInsteadOfDeleting shows that a Work applied with
// deletionPolicy Orphan keeps its objects when it is deleted (also by an
// Applier restarted since, which knows the policy from the record), when a
// prune leaves it out (where it does not count against the brake), and
// when an object is dropped from it; that they are released, so no apply
// can take them back; and that a Delete Work next to them is deleted as
// before.
func TestOrphanPolicyReleasesInsteadOfDeleting(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	web := orphanWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1))
	f.apply(a, web)
	webUID := f.getDeployment(f.ns, "web").UID
	if cm := f.recordOf(web.Name); cm == nil || cm.Data[recordPolicyKey] != string(v1alpha1.DeletionPolicyOrphan) {
		t.Fatalf("the record of %s does not hold the Orphan policy: %v", web.Name, cm)
	}

	// A restarted agent deletes the Work: the objects are released.
	restarted := f.recordingApplier(Options{})
	deleted, err := restarted.Delete(f.ctx, web.Name)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if len(deleted) != 0 {
		t.Errorf("Delete of an Orphan Work reported deletions: %v", deleted)
	}
	f.assertReleased(restarted, f.ns, "web", webUID)
	if cm := f.recordOf(web.Name); cm != nil {
		t.Errorf("the record of %s survived its release", web.Name)
	}
	// Nothing of Flotilla's takes it back: an apply of the same Work finds
	// it not owned.
	res, err := restarted.Apply(f.ctx, newWork(t, web.Name, 2, deployment(f.ns, "web", "web:2", 1)))
	if err == nil || res[0].Reason != v1alpha1.ReasonNotOwned {
		t.Fatalf("applying over a released object: reason %q, err %v; want NotOwned", res[0].Reason, err)
	}

	// A prune releases Orphan Works and deletes Delete Works; released
	// objects do not weigh on the brake (1 deletion of 7 held objects).
	f2 := f.with(t)
	b := f2.recordingApplier(Options{})
	var batch []*appsv1.Deployment
	for _, n := range []string{"b1", "b2", "b3", "b4", "b5", "b6"} {
		batch = append(batch, deployment(f.ns, n, n+":1", 1))
	}
	f.apply(b, orphanWork(t, f.work("batch"), 1, batch...))
	api := newWork(t, f.work("api"), 1, deployment(f.ns, "api", "api:1", 1))
	f.apply(b, api)
	b1 := f.getDeployment(f.ns, "b1").UID
	deleted, err = b.Prune(f.ctx, sets.New[string](), false)
	if err != nil {
		t.Fatalf("an unconfirmed prune of 6 released and 1 deleted object: %v", err)
	}
	if len(deleted) != 1 || deleted[0].Name != "api" {
		t.Errorf("Prune deleted %v, want only api", deleted)
	}
	f.gone(f.ns, "api")
	f.assertReleased(b, f.ns, "b1", b1)
	for _, n := range []string{"b2", "b3", "b4", "b5", "b6"} {
		if !f.exists(f.ns, n) {
			t.Errorf("Deployment %s of the Orphan Work was deleted by the prune", n)
		}
	}

	// An object dropped from an Orphan Work is released, the rest stays
	// managed.
	two := orphanWork(t, f.work("two"), 1, deployment(f.ns, "keep", "k:1", 1), deployment(f.ns, "drop", "d:1", 1))
	f.apply(b, two)
	dropUID := f.getDeployment(f.ns, "drop").UID
	f.apply(b, orphanWork(t, two.Name, 2, deployment(f.ns, "keep", "k:2", 1)))
	f.assertReleased(b, f.ns, "drop", dropUID)
	if d := f.getDeployment(f.ns, "keep"); d.Labels[v1alpha1.LabelWork] != v1alpha1.WorkLabelValue(two.Name) {
		t.Errorf("the kept object lost its Work label: %v", d.Labels)
	}

	// A Work switched from Delete to Orphan is released on delete.
	sw := newWork(t, f.work("switch"), 1, deployment(f.ns, "switch", "s:1", 1))
	f.apply(b, sw)
	swUID := f.getDeployment(f.ns, "switch").UID
	f.apply(b, orphanWork(t, sw.Name, 2, deployment(f.ns, "switch", "s:1", 1)))
	if _, err := b.Delete(f.ctx, sw.Name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	f.assertReleased(b, f.ns, "switch", swUID)
}
