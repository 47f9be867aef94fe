package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

func TestRecordName(t *testing.T) {
	long := "shop." + strings.Repeat("a", 250)
	for _, tc := range []struct {
		name, owner, work, want string
	}{
		{"owner and Work name", DefaultFieldOwner, "shop.web", "flotilla-agent.shop.web"},
		{"another owner, another record", "flotilla-hub", "shop.web", "flotilla-hub.shop.web"},
		{"too long", DefaultFieldOwner, long, ""},
		{"an owner that is no name part", "Flotilla Agent", "shop.web", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RecordName(tc.owner, tc.work)
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Fatalf("RecordName(%q, %q) = %q, not a valid name: %v", tc.owner, tc.work, got, errs)
			}
			if tc.want != "" && got != tc.want {
				t.Errorf("RecordName(%q, %q) = %q, want %q", tc.owner, tc.work, got, tc.want)
			}
			if other := RecordName(tc.owner, tc.work+"x"); other == got {
				t.Errorf("RecordName gives %q for two Works", got)
			}
		})
	}
}

// deploymentID names Deployment ns/name.
func deploymentID(ns, name string) v1alpha1.ResourceIdentifier {
	return v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: ns, Name: name}
}

// recorded is the entry Work's record should hold for live Deployment
// ns/name, applied as it is now: its UID and generation.
func (f *fixture) recorded(ns, name string) AppliedObject {
	f.t.Helper()
	d := f.getDeployment(ns, name)
	return AppliedObject{ResourceIdentifier: deploymentID(ns, name), UID: d.UID, Generation: d.Generation}
}

// recordOf reads Work work's record ConfigMap; nil when there is none.
func (f *fixture) recordOf(work string) *corev1.ConfigMap {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	err := f.c.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: RecordName(DefaultFieldOwner, work)}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatalf("reading the record of Work %s: %v", work, err)
	}
	return cm
}

// recordedObjects decodes Work work's record ConfigMap.
func (f *fixture) recordedObjects(work string) []AppliedObject {
	f.t.Helper()
	cm := f.recordOf(work)
	if cm == nil {
		f.t.Fatalf("Work %s has no record", work)
	}
	var objs []AppliedObject
	if err := json.Unmarshal([]byte(cm.Data["objects"]), &objs); err != nil {
		f.t.Fatalf("decoding the record of Work %s: %v", work, err)
	}
	return objs
}

// exists says Deployment ns/name exists and is not being deleted.
func (f *fixture) exists(ns, name string) bool {
	f.t.Helper()
	d := &appsv1.Deployment{}
	err := f.c.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: name}, d)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		f.t.Fatalf("getting Deployment %s/%s: %v", ns, name, err)
	}
	return d.DeletionTimestamp == nil
}

// labelledCopy is Deployment ns/name carrying every label and annotation
// Flotilla would put on Work work's object, created by hand: what a hub
// restored from a backup, a re-installed Work CRD or another agent would
// leave behind, never applied by this Applier.
func (f *fixture) labelledCopy(ns, name, work string) *appsv1.Deployment {
	f.t.Helper()
	d := deployment(ns, name, "copy:1", 1)
	d.Labels = map[string]string{v1alpha1.LabelWork: v1alpha1.WorkLabelValue(work), v1alpha1.LabelFleet: testFleet, v1alpha1.LabelCluster: testCluster}
	d.Annotations = map[string]string{v1alpha1.AnnotationWork: work}
	return f.createUnowned(d)
}

// TestAppliedSetIsRecordedAndSurvivesARestart shows that Apply records each
// Work's objects with their UIDs in a labelled ConfigMap, that applied
// objects carry the fleet and cluster labels, that re-applying an
// unchanged Work does not write the record, and that a new Applier (an
// agent restart) loads the records and deletes and prunes by them.
func TestAppliedSetIsRecordedAndSurvivesARestart(t *testing.T) {
	f := newFixture(t)
	other := uniqueNamespace()
	f.createNamespace(other)
	a := f.recordingApplier(Options{})
	web := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1), deployment(other, "web", "web:1", 1))
	api := newWork(t, f.work("api"), 1, deployment(f.ns, "api", "api:1", 1))
	f.apply(a, web)
	f.apply(a, api)

	d := f.getDeployment(f.ns, "web")
	if d.Labels[v1alpha1.LabelFleet] != testFleet || d.Labels[v1alpha1.LabelCluster] != testCluster {
		t.Errorf("applied Deployment labels = %v, want %s=%s and %s=%s", d.Labels, v1alpha1.LabelFleet, testFleet, v1alpha1.LabelCluster, testCluster)
	}
	cm := f.recordOf(web.Name)
	if cm == nil {
		t.Fatalf("no record ConfigMap %s/%s", f.ns, RecordName(DefaultFieldOwner, web.Name))
	}
	wantLabels := map[string]string{v1alpha1.LabelAppliedSet: DefaultFieldOwner, v1alpha1.LabelFleet: testFleet, v1alpha1.LabelCluster: testCluster}
	for k, v := range wantLabels {
		if cm.Labels[k] != v {
			t.Errorf("record label %s = %q, want %q", k, cm.Labels[k], v)
		}
	}
	if cm.Annotations[v1alpha1.AnnotationWork] != web.Name {
		t.Errorf("record annotation %s = %q, want %q", v1alpha1.AnnotationWork, cm.Annotations[v1alpha1.AnnotationWork], web.Name)
	}
	want := []AppliedObject{f.recorded(f.ns, "web"), f.recorded(other, "web")}
	sortObjects(want)
	if got := f.recordedObjects(web.Name); !slices.Equal(got, want) {
		t.Errorf("recorded objects = %+v, want %+v", got, want)
	}
	if got := a.AppliedSet(web.Name); !slices.Equal(got, want) {
		t.Errorf("AppliedSet = %+v, want %+v", got, want)
	}

	f.apply(a, web)
	if rv := f.recordOf(web.Name).ResourceVersion; rv != cm.ResourceVersion {
		t.Errorf("re-applying an unchanged Work wrote its record (resourceVersion %s -> %s)", cm.ResourceVersion, rv)
	}

	restarted := f.recordingApplier(Options{})
	if err := restarted.Load(f.ctx); err != nil {
		t.Fatalf("loading the records: %v", err)
	}
	if got := restarted.AppliedSet(web.Name); !slices.Equal(got, want) {
		t.Errorf("after a restart AppliedSet = %+v, want %+v", got, want)
	}
	if got := restarted.HeldObjects(); got != 3 {
		t.Errorf("after a restart HeldObjects = %d, want 3", got)
	}
	deleted, err := restarted.Delete(f.ctx, web.Name)
	if err != nil {
		t.Fatalf("deleting after a restart: %v", err)
	}
	if len(deleted) != 2 {
		t.Errorf("deleted %+v, want both of web's Deployments", deleted)
	}
	f.gone(f.ns, "web")
	f.gone(other, "web")
	if f.recordOf(web.Name) != nil {
		t.Errorf("the deleted Work's record is still there")
	}

	// Another restart, without calling Load: Prune loads on first use.
	again := f.recordingApplier(Options{})
	deleted, err = again.Prune(f.ctx, sets.New[string](), false)
	if err != nil {
		t.Fatalf("pruning after a restart: %v", err)
	}
	if !slices.Equal(deleted, []v1alpha1.ResourceIdentifier{deploymentID(f.ns, "api")}) {
		t.Errorf("pruned %+v, want api's Deployment", deleted)
	}
	f.gone(f.ns, "api")
	if f.recordOf(api.Name) != nil {
		t.Errorf("the pruned Work's record is still there")
	}
}

// TestLabelledObjectOutsideTheSetIsNeverDeleted is the hub-restore and
// CRD-reinstall case at the apply layer: Deployments carrying every label
// Flotilla would set (Work, fleet, cluster) but not in the applied set are
// neither pruned, not even with an empty keep set and confirmation, nor
// deleted with their Work; an Applier with no records deletes nothing.
func TestLabelledObjectOutsideTheSetIsNeverDeleted(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	f.apply(a, newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1)))
	f.labelledCopy(f.ns, "copy-of-web", f.work("web"))
	f.labelledCopy(f.ns, "orphan", f.work("gone"))

	deleted, err := a.Prune(f.ctx, sets.New[string](), true)
	if err != nil {
		t.Fatalf("pruning: %v", err)
	}
	if !slices.Equal(deleted, []v1alpha1.ResourceIdentifier{deploymentID(f.ns, "web")}) {
		t.Errorf("pruned %+v, want only the recorded Deployment web", deleted)
	}
	if _, err := a.Delete(f.ctx, f.work("gone")); err != nil {
		t.Fatalf("deleting a Work with no record: %v", err)
	}
	empty := uniqueNamespace()
	f.createNamespace(empty)
	fresh := New(nil, f.writer(), Options{RecordNamespace: empty})
	fresh.SetIdentity(testFleet, testCluster)
	if deleted, err := fresh.Prune(f.ctx, sets.New[string](), true); err != nil || len(deleted) != 0 {
		t.Errorf("an Applier with no records pruned %+v (error %v), want nothing", deleted, err)
	}
	f.gone(f.ns, "web")
	for _, name := range []string{"copy-of-web", "orphan"} {
		if !f.exists(f.ns, name) {
			t.Errorf("Deployment %s, labelled but never applied, was deleted", name)
		}
	}
}

// TestStaleRecordDoesNotDeleteARecreatedObject shows that an object
// deleted and created again by someone else (same name and labels, new
// UID) is not deleted by the record of the old one, and that the stale
// entry is dropped.
func TestStaleRecordDoesNotDeleteARecreatedObject(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	work := f.work("web")
	f.apply(a, newWork(t, work, 1, deployment(f.ns, "web", "web:1", 1)))
	old := f.getDeployment(f.ns, "web")
	if err := f.c.Delete(f.ctx, old); err != nil {
		t.Fatal(err)
	}
	f.gone(f.ns, "web")
	recreated := f.labelledCopy(f.ns, "web", work)

	deleted, err := a.Delete(f.ctx, work)
	if err != nil || len(deleted) != 0 {
		t.Fatalf("Delete = %+v, %v; want nothing deleted and no error", deleted, err)
	}
	if d := f.getDeployment(f.ns, "web"); d.UID != recreated.UID || d.DeletionTimestamp != nil {
		t.Errorf("the recreated Deployment (UID %s) was deleted or replaced: %s", recreated.UID, d.UID)
	}
	if f.recordOf(work) != nil {
		t.Errorf("the stale record is still there")
	}
}

// TestRecordWithoutUIDMatchesByLabels covers a crash between recording an
// object and recording its UID: an entry without a UID deletes a live
// object only when it carries the Work's, the fleet's and the cluster's
// labels.
func TestRecordWithoutUIDMatchesByLabels(t *testing.T) {
	f := newFixture(t)
	work := f.work("web")
	f.labelledCopy(f.ns, "ours", work)
	theirs := deployment(f.ns, "other-fleet", "x:1", 1)
	theirs.Labels = map[string]string{v1alpha1.LabelWork: work, v1alpha1.LabelFleet: "another-fleet", v1alpha1.LabelCluster: testCluster}
	theirs.Annotations = map[string]string{v1alpha1.AnnotationWork: work}
	f.createUnowned(theirs)
	f.createUnowned(deployment(f.ns, "unlabelled", "x:1", 1))

	raw, err := json.Marshal([]AppliedObject{
		{ResourceIdentifier: deploymentID(f.ns, "ours")},
		{ResourceIdentifier: deploymentID(f.ns, "other-fleet")},
		{ResourceIdentifier: deploymentID(f.ns, "unlabelled")},
	})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: RecordName(DefaultFieldOwner, work),
			Labels:      map[string]string{v1alpha1.LabelAppliedSet: DefaultFieldOwner},
			Annotations: map[string]string{v1alpha1.AnnotationWork: work}},
		Data: map[string]string{"objects": string(raw)},
	}
	if err := f.c.Create(f.ctx, cm); err != nil {
		t.Fatal(err)
	}

	deleted, err := f.recordingApplier(Options{}).Delete(f.ctx, work)
	if err != nil {
		t.Fatalf("deleting: %v", err)
	}
	if !slices.Equal(deleted, []v1alpha1.ResourceIdentifier{deploymentID(f.ns, "ours")}) {
		t.Errorf("deleted %+v, want only the Deployment with this fleet's labels", deleted)
	}
	f.gone(f.ns, "ours")
	for _, name := range []string{"other-fleet", "unlabelled"} {
		if !f.exists(f.ns, name) {
			t.Errorf("Deployment %s was deleted", name)
		}
	}
}

// TestObjectDroppedFromAWorkIsDeleted shows the targetNamespace change: the
// Work's Deployment moves to another namespace, and the next Apply deletes
// the old one after the new one applied. While the new one cannot be
// applied (an unowned Deployment stands in its place) the old one stays.
func TestObjectDroppedFromAWorkIsDeleted(t *testing.T) {
	f := newFixture(t)
	moved, blocked := uniqueNamespace(), uniqueNamespace()
	f.createNamespace(moved)
	f.createNamespace(blocked)
	f.createUnowned(deployment(blocked, "web", "theirs:1", 1))
	a := f.recordingApplier(Options{})
	work := f.work("web")
	f.apply(a, newWork(t, work, 1, deployment(f.ns, "web", "web:1", 1)))

	if _, err := a.Apply(f.ctx, newWork(t, work, 2, deployment(blocked, "web", "web:1", 1))); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("applying into the namespace with an unowned Deployment: %v, want ErrNotOwned", err)
	}
	if !f.exists(f.ns, "web") {
		t.Fatalf("the old Deployment was deleted although its replacement was not applied")
	}
	if got := a.AppliedSet(work); len(got) != 1 || got[0].Namespace != f.ns {
		t.Errorf("AppliedSet after the failed move = %+v, want only the old Deployment", got)
	}

	f.apply(a, newWork(t, work, 3, deployment(moved, "web", "web:1", 1)))
	f.gone(f.ns, "web")
	want := []AppliedObject{f.recorded(moved, "web")}
	if got := f.recordedObjects(work); !slices.Equal(got, want) {
		t.Errorf("record after the move = %+v, want %+v", got, want)
	}
	// The record proves generation 3 applied: the old Deployment's removal
	// dropped the mark, and the end of the Apply wrote it again.
	if uid, gen := f.recordMark(work); uid != "uid-"+work || gen != "3" {
		t.Errorf("record mark after the move = %q/%q, want uid-%s/3", uid, gen, work)
	}
	if d := f.getDeployment(blocked, "web"); d.Spec.Template.Spec.Containers[0].Image != "theirs:1" {
		t.Errorf("the unowned Deployment was changed")
	}
}

// TestBrakeHoldsUntilConfirmed shows a snapshot that drops 3 of 4 Works of
// two Deployments each (6 of 8 objects: over half and over five) deleting
// nothing and saying so, and the confirmed prune deleting them.
func TestBrakeHoldsUntilConfirmed(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	var works []string
	for i := range 4 {
		app := fmt.Sprintf("app%d", i)
		works = append(works, f.work(app))
		f.apply(a, newWork(t, f.work(app), 1, deployment(f.ns, app+"-a", "x:1", 1), deployment(f.ns, app+"-b", "x:1", 1)))
	}
	keep := sets.New(works[0])

	deleted, err := a.Prune(f.ctx, keep, false)
	var blocked *PruneBlockedError
	if !errors.As(err, &blocked) {
		t.Fatalf("Prune error = %v, want a *PruneBlockedError", err)
	}
	if blocked.WouldDelete != 6 || blocked.Held != 8 || !slices.Equal(blocked.Works, works[1:]) {
		t.Errorf("blocked = %+v, want 6 of 8 objects of %v", blocked, works[1:])
	}
	if len(deleted) != 0 {
		t.Errorf("a blocked prune deleted %+v", deleted)
	}
	for i := range 4 {
		for _, s := range []string{"-a", "-b"} {
			if !f.exists(f.ns, fmt.Sprintf("app%d%s", i, s)) {
				t.Errorf("Deployment app%d%s was deleted by a blocked prune", i, s)
			}
		}
	}

	deleted, err = a.Prune(f.ctx, keep, true)
	if err != nil {
		t.Fatalf("confirmed prune: %v", err)
	}
	if len(deleted) != 6 {
		t.Errorf("confirmed prune deleted %d objects, want 6: %+v", len(deleted), deleted)
	}
	for i := 1; i < 4; i++ {
		f.gone(f.ns, fmt.Sprintf("app%d-a", i))
		f.gone(f.ns, fmt.Sprintf("app%d-b", i))
	}
	if !f.exists(f.ns, "app0-a") || !f.exists(f.ns, "app0-b") {
		t.Errorf("the kept Work's Deployments were deleted")
	}

	// One Work at a time is not braked.
	if _, err := a.Delete(f.ctx, works[0]); err != nil {
		t.Fatalf("deleting the last Work: %v", err)
	}
	f.gone(f.ns, "app0-a")
}

// TestFenceErrorDeletesNothing shows that when the fence fails, Prune,
// Delete and an Apply that drops an object delete nothing and return the
// fence's error; and that they delete once it passes.
func TestFenceErrorDeletesNothing(t *testing.T) {
	f := newFixture(t)
	lost := errors.New("the leader lease is held by another agent")
	var fenceErr error
	a := f.recordingApplier(Options{Fence: func(context.Context) error { return fenceErr }})
	f.apply(a, newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1)))
	f.apply(a, newWork(t, f.work("api"), 1, deployment(f.ns, "api", "api:1", 1)))
	f.apply(a, newWork(t, f.work("db"), 1, deployment(f.ns, "db", "db:1", 1)))
	fenceErr = lost

	if _, err := a.Prune(f.ctx, sets.New(f.work("web"), f.work("db")), true); !errors.Is(err, lost) {
		t.Errorf("Prune error = %v, want the fence's", err)
	}
	if _, err := a.Delete(f.ctx, f.work("web")); !errors.Is(err, lost) {
		t.Errorf("Delete error = %v, want the fence's", err)
	}
	if _, err := a.Apply(f.ctx, newWork(t, f.work("db"), 2, deployment(f.ns, "db2", "db:1", 1))); !errors.Is(err, lost) {
		t.Errorf("Apply that drops an object: error %v, want the fence's", err)
	}
	for _, name := range []string{"web", "api", "db", "db2"} {
		if !f.exists(f.ns, name) {
			t.Errorf("Deployment %s was deleted while the fence failed", name)
		}
	}

	fenceErr = nil
	if _, err := a.Prune(f.ctx, sets.New(f.work("web"), f.work("db")), false); err != nil {
		t.Fatalf("Prune once the fence passes: %v", err)
	}
	f.gone(f.ns, "api")
	f.apply(a, newWork(t, f.work("db"), 2, deployment(f.ns, "db2", "db:1", 1)))
	f.gone(f.ns, "db")
}

// TestNoIdentityRefusesToDelete shows that an Applier whose fleet id was
// never set applies (without identity labels) but refuses every deletion.
func TestNoIdentityRefusesToDelete(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{RecordNamespace: f.ns})
	work := f.work("web")
	f.apply(a, newWork(t, work, 1, deployment(f.ns, "web", "web:1", 1)))
	if _, ok := f.getDeployment(f.ns, "web").Labels[v1alpha1.LabelFleet]; ok {
		t.Errorf("an Applier without identity set %s", v1alpha1.LabelFleet)
	}
	if _, err := a.Prune(f.ctx, sets.New[string](), true); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("Prune error = %v, want ErrNoIdentity", err)
	}
	if _, err := a.Delete(f.ctx, work); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("Delete error = %v, want ErrNoIdentity", err)
	}
	if _, err := a.Apply(f.ctx, newWork(t, work, 2, deployment(f.ns, "web2", "web:1", 1))); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("Apply that drops an object: error %v, want ErrNoIdentity", err)
	}
	if !f.exists(f.ns, "web") {
		t.Errorf("the Deployment was deleted by an Applier without identity")
	}
	if got := a.AppliedSet(work); len(got) != 2 {
		t.Errorf("AppliedSet = %+v, want both Deployments still recorded", got)
	}
}

// TestRecordChangedByAnotherApplierIsMerged shows two Appliers writing one
// Work's record (an old agent leader and its successor): the second write
// finds the record changed, keeps the union instead of overwriting it, and
// so the object only the other Applier recorded is still tracked, and
// deleted by the next Apply that no longer names it.
func TestRecordChangedByAnotherApplierIsMerged(t *testing.T) {
	f := newFixture(t)
	work := f.work("web")
	old := f.recordingApplier(Options{})
	f.apply(old, newWork(t, work, 1, deployment(f.ns, "web", "web:1", 1)))

	successor := f.recordingApplier(Options{})
	f.apply(successor, newWork(t, work, 2, deployment(f.ns, "web", "web:1", 1), deployment(f.ns, "extra", "web:1", 1)))

	// The old Applier's copy of the record is stale: its write conflicts,
	// and it merges.
	f.apply(old, newWork(t, work, 3, deployment(f.ns, "web", "web:1", 1), deployment(f.ns, "extra2", "web:1", 1)))
	f.gone(f.ns, "extra")
	if !f.exists(f.ns, "web") || !f.exists(f.ns, "extra2") {
		t.Fatalf("the Work's current Deployments are missing")
	}
	want := []AppliedObject{f.recorded(f.ns, "extra2"), f.recorded(f.ns, "web")}
	if got := f.recordedObjects(work); !slices.Equal(got, want) {
		t.Errorf("record = %+v, want %+v", got, want)
	}

	// The successor's copy is stale now: deleting the Work finds the
	// record grew, keeps it and says so; the next Delete removes the rest.
	if _, err := successor.Delete(f.ctx, work); err == nil || !strings.Contains(err.Error(), "gained objects") {
		t.Errorf("Delete with a stale record: error %v, want one saying the record gained objects", err)
	}
	if _, err := successor.Delete(f.ctx, work); err != nil {
		t.Fatalf("deleting again: %v", err)
	}
	f.gone(f.ns, "web")
	f.gone(f.ns, "extra2")
	if f.recordOf(work) != nil {
		t.Errorf("the record is still there")
	}
}

// TestNeedsApplyAfterIdentityChange shows that an object applied before
// the Applier learnt its fleet id (or under another one) needs an apply,
// so that it gets the fleet label a later deletion checks.
func TestNeedsApplyAfterIdentityChange(t *testing.T) {
	a := trackedApplier()
	work := &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: "shop.web", UID: "w1", Generation: 1}}
	obj := &appsv1.Deployment{ObjectMeta: ownedMeta("d1", 3, "10")}
	a.tracker.record(work, []Result{{Reason: v1alpha1.ReasonApplied, Object: toUnstructured(t, obj)}})
	if a.NeedsApply(work, []kclient.Object{obj}) {
		t.Fatalf("NeedsApply = true for an unchanged object and no identity")
	}
	a.SetIdentity(testFleet, testCluster)
	if !a.NeedsApply(work, []kclient.Object{obj}) {
		t.Errorf("NeedsApply = false for an object without the fleet label the Applier now has")
	}
	obj.Labels[v1alpha1.LabelFleet] = testFleet
	if a.NeedsApply(work, []kclient.Object{obj}) {
		t.Errorf("NeedsApply = true for an object with the Applier's fleet label")
	}
}

func toUnstructured(t *testing.T, obj client.Object) *unstructured.Unstructured {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: content}
}

// TestConcurrentAppliesAndDeletesKeepTheRecords applies and deletes many
// Works at once through one Applier (the agent's stream and reconcilers
// do) and checks that afterwards the records, and a restarted Applier's
// view of them, hold exactly the Works not deleted.
func TestConcurrentAppliesAndDeletesKeepTheRecords(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	const works = 12
	errs := make(chan error, 2*works)
	var wg sync.WaitGroup
	for i := range works {
		wg.Go(func() {
			app := fmt.Sprintf("app%d", i)
			w := newWork(t, f.work(app), 1, deployment(f.ns, app, "x:1", 1))
			if _, err := a.Apply(f.ctx, w); err != nil {
				errs <- err
				return
			}
			if i%3 == 0 {
				if _, err := a.Delete(f.ctx, w.Name); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	restarted := f.recordingApplier(Options{})
	if err := restarted.Load(f.ctx); err != nil {
		t.Fatal(err)
	}
	for i := range works {
		app := fmt.Sprintf("app%d", i)
		want := 1
		if i%3 == 0 {
			want = 0
		}
		if got := len(restarted.AppliedSet(f.work(app))); got != want {
			t.Errorf("Work %s: %d recorded objects after a restart, want %d", app, got, want)
		}
		if got := len(a.AppliedSet(f.work(app))); got != want {
			t.Errorf("Work %s: %d recorded objects in memory, want %d", app, got, want)
		}
	}
	if got, want := restarted.HeldObjects(), works-works/3; got != want {
		t.Errorf("HeldObjects after a restart = %d, want %d", got, want)
	}
}

// TestNothingIsAppliedBeforeItIsRecorded shows the record-first rule: when
// the record cannot be written (here its namespace does not exist), Apply
// creates nothing, so no object exists that the Applier could not find
// again to delete.
func TestNothingIsAppliedBeforeItIsRecorded(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{RecordNamespace: uniqueNamespace()})
	a.SetIdentity(testFleet, testCluster)
	results, err := a.Apply(f.ctx, newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1)))
	if err == nil || !strings.Contains(err.Error(), "recording the object in the applied set before applying it") {
		t.Fatalf("Apply error = %v, want one saying the record could not be written", err)
	}
	if results[0].Reason != v1alpha1.ReasonApplyFailed {
		t.Errorf("result = %+v, want ApplyFailed", results[0])
	}
	if f.exists(f.ns, "web") {
		t.Errorf("the Deployment was created although its record could not be written")
	}
}
