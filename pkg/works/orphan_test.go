package works

import (
	"testing"

	"k8s.io/utils/ptr"
)

// TestStoreOrphanKeepsTheObjects shows that Orphan forgets a Work without
// deleting its Deployment: the Work is no longer held, a hand edit is not
// set back and no status is reported for it, a confirmed snapshot that
// leaves it out deletes nothing of it, and the same Work sent again
// adopts the same Deployment.
func TestStoreOrphanKeepsTheObjects(t *testing.T) {
	f := newStoreFixture(t, "store-orphan")
	a, b := f.work("a", 1, f.deployment("a", 1)), f.work("b", 1, f.deployment("b", 1))
	f.apply(a)
	f.apply(b)
	uid := f.mustGet("a").UID
	reports := len(f.reporter.of(a.Name))

	if err := f.store.Orphan(t.Context(), a.Name); err != nil {
		t.Fatalf("Orphan: %v", err)
	}
	for _, h := range f.held() {
		if h.Name == a.Name {
			t.Errorf("the orphaned Work is still held")
		}
	}
	// A hand edit of the orphan is its owner's business now.
	d := f.mustGet("a")
	d.Spec.Replicas = ptr.To[int32](4)
	if err := f.c.Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	f.reconcile(a.Name)
	if got := f.mustGet("a"); *got.Spec.Replicas != 4 || got.UID != uid {
		t.Errorf("the orphan was touched: replicas %d, uid %s (was %s)", *got.Spec.Replicas, got.UID, uid)
	}
	if n := len(f.reporter.of(a.Name)); n != reports {
		t.Errorf("%d status reports for the orphaned Work after Orphan, want none more than %d", n, reports)
	}

	// A confirmed prune to nothing deletes b's Deployment, not a's.
	if err := f.store.SnapshotComplete(t.Context(), nil, true); err != nil {
		t.Fatal(err)
	}
	if got, err := f.get("a"); err != nil || got.UID != uid || got.DeletionTimestamp != nil {
		t.Fatalf("the orphaned Deployment was pruned: %v", err)
	}
	if got, err := f.get("b"); err == nil && got.DeletionTimestamp == nil {
		t.Errorf("b's Deployment survived the confirmed prune")
	}

	// The same Work sent again adopts the Deployment.
	f.apply(f.work("a", 2, f.deployment("a", 1)))
	if got := f.mustGet("a"); got.UID != uid || *got.Spec.Replicas != 1 {
		t.Errorf("re-applying did not adopt the orphan: uid %s (was %s), replicas %d", got.UID, uid, *got.Spec.Replicas)
	}
}
