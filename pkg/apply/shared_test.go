package apply

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// sharedDepCM is a ConfigMap manifest marked as a shared dependency
// (flotilla.dev/dependency=true) holding data, with
// flotilla.dev/source-version sourceVersion when that is not empty: what
// the hub copies from a MyApp's hub namespace into its Works.
func sharedDepCM(ns, name string, data map[string]string, sourceVersion string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{v1alpha1.LabelDependency: "true"}},
		Data: data,
	}
	if sourceVersion != "" {
		cm.Annotations = map[string]string{v1alpha1.AnnotationSourceVersion: sourceVersion}
	}
	return cm
}

// sharedDepWork is newWork with the Work's myapp-namespace label set to
// hubNS (the hub namespace its shared dependencies come from).
func sharedDepWork(t *testing.T, name string, gen int64, hubNS string, objs ...runtime.Object) *v1alpha1.Work {
	t.Helper()
	w := newWork(t, name, gen, objs...)
	w.Labels[v1alpha1.LabelMyAppNamespace] = hubNS
	return w
}

// sharedDepApplier is a recording Applier that manages every kind the hub
// renders into Works, ConfigMaps included.
func (f *fixture) sharedDepApplier(opts Options) *Applier {
	opts.Kinds = WorkKinds
	return f.recordingApplier(opts)
}

// configMapID names ConfigMap ns/name.
func configMapID(ns, name string) v1alpha1.ResourceIdentifier {
	return v1alpha1.ResourceIdentifier{Version: "v1", Kind: "ConfigMap", Namespace: ns, Name: name}
}

// getCM reads ConfigMap ns/name; nil when it does not exist or is being
// deleted.
func (f *fixture) getCM(ns, name string) *corev1.ConfigMap {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	err := f.c.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatalf("getting ConfigMap %s/%s: %v", ns, name, err)
	}
	if cm.DeletionTimestamp != nil {
		return nil
	}
	return cm
}

// mustCM reads ConfigMap ns/name and fails the test, saying why (what),
// when it does not exist.
func (f *fixture) mustCM(ns, name, what string) *corev1.ConfigMap {
	f.t.Helper()
	cm := f.getCM(ns, name)
	if cm == nil {
		f.t.Fatalf("ConfigMap %s/%s does not exist, but %s", ns, name, what)
	}
	return cm
}

// cmGone waits until ConfigMap ns/name is deleted.
func (f *fixture) cmGone(ns, name string) {
	f.t.Helper()
	f.eventually("deletion of ConfigMap "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// assertSharedLabels fails unless cm carries a shared dependency's
// metadata: the dependency label, fleet, cluster and myapp-namespace
// (hubNS) labels, and no Work label, Work annotation or myapp-name label.
func (f *fixture) assertSharedLabels(cm *corev1.ConfigMap, hubNS string) {
	f.t.Helper()
	want := map[string]string{
		v1alpha1.LabelDependency:     "true",
		v1alpha1.LabelFleet:          testFleet,
		v1alpha1.LabelCluster:        testCluster,
		v1alpha1.LabelMyAppNamespace: hubNS,
	}
	for k, v := range want {
		if got, ok := cm.Labels[k]; !ok || got != v {
			f.t.Errorf("shared ConfigMap %s/%s: label %s = %q (present %v), want %q; labels %v", cm.Namespace, cm.Name, k, got, ok, v, cm.Labels)
		}
	}
	for _, k := range []string{v1alpha1.LabelWork, v1alpha1.LabelMyAppName} {
		if v, ok := cm.Labels[k]; ok {
			f.t.Errorf("shared ConfigMap %s/%s carries label %s=%q; a shared dependency must carry no Work's label", cm.Namespace, cm.Name, k, v)
		}
	}
	if v, ok := cm.Annotations[v1alpha1.AnnotationWork]; ok {
		f.t.Errorf("shared ConfigMap %s/%s carries annotation %s=%q; a shared dependency must carry no Work's annotation", cm.Namespace, cm.Name, v1alpha1.AnnotationWork, v)
	}
}

// sharedCMCount counts the ConfigMaps named name in ns that carry the
// dependency label (the namespace also holds the applied-set records).
func (f *fixture) sharedCMCount(ns, name string) int {
	f.t.Helper()
	var list corev1.ConfigMapList
	if err := f.c.List(f.ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelDependency: "true"}); err != nil {
		f.t.Fatalf("listing the shared ConfigMaps of %s: %v", ns, err)
	}
	n := 0
	for _, cm := range list.Items {
		if cm.Name == name {
			n++
		}
	}
	return n
}

// TestSharedDependencyIsKeptWhileAnotherWorkUsesIt: two Works of one hub
// namespace carry the same shared ConfigMap beside their own Deployments.
// The ConfigMap exists once, with no Work's label or annotation; deleting
// one Work deletes its Deployment and keeps the ConfigMap; deleting the
// other, through a restarted Applier that only knows the records, deletes
// it.
func TestSharedDependencyIsKeptWhileAnotherWorkUsesIt(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	data := map[string]string{"key": "value"}
	workA := sharedDepWork(t, f.work("a"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "a", "a:1", 1))
	workB := sharedDepWork(t, f.work("b"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "b", "b:1", 1))
	for _, w := range []*v1alpha1.Work{workA, workB} {
		for i, r := range f.apply(a, w) {
			if r.Reason != v1alpha1.ReasonApplied {
				t.Fatalf("Work %s manifest %d: reason %q (%s), want Applied", w.Name, i, r.Reason, r.Message)
			}
		}
	}

	if n := f.sharedCMCount(f.ns, "settings"); n != 1 {
		t.Fatalf("found %d shared ConfigMaps %s/settings after both Works applied, want exactly 1", n, f.ns)
	}
	cm := f.mustCM(f.ns, "settings", "both Works applied it")
	f.assertSharedLabels(cm, "team-a")
	if !maps.Equal(cm.Data, data) {
		t.Errorf("shared ConfigMap data = %v, want %v", cm.Data, data)
	}
	uid := cm.UID
	id := configMapID(f.ns, "settings")
	if got, want := a.Holders(id), []string{workA.Name, workB.Name}; !slices.Equal(got, want) {
		t.Errorf("Holders(%s) = %v, want %v", describe(id), got, want)
	}

	deleted, err := a.Delete(f.ctx, workA.Name)
	if err != nil {
		t.Fatalf("deleting Work %s: %v", workA.Name, err)
	}
	if slices.Contains(deleted, id) {
		t.Errorf("Delete of Work %s reported the shared ConfigMap deleted (%v) although Work %s still uses it", workA.Name, deleted, workB.Name)
	}
	f.gone(f.ns, "a")
	cm = f.mustCM(f.ns, "settings", "Work "+workB.Name+" still uses it after Work "+workA.Name+" was deleted")
	if cm.UID != uid {
		t.Errorf("the shared ConfigMap was replaced by deleting Work %s: UID %s, want %s", workA.Name, cm.UID, uid)
	}
	if !f.exists(f.ns, "b") {
		t.Errorf("Deployment b of Work %s was deleted with Work %s", workB.Name, workA.Name)
	}
	if got, want := a.Holders(id), []string{workB.Name}; !slices.Equal(got, want) {
		t.Errorf("after deleting Work %s, Holders(%s) = %v, want %v", workA.Name, describe(id), got, want)
	}

	restarted := f.sharedDepApplier(Options{})
	if err := restarted.Load(f.ctx); err != nil {
		t.Fatalf("loading the records in a restarted Applier: %v", err)
	}
	if got, want := restarted.Holders(id), []string{workB.Name}; !slices.Equal(got, want) {
		t.Errorf("after a restart Holders(%s) = %v, want %v", describe(id), got, want)
	}
	deleted, err = restarted.Delete(f.ctx, workB.Name)
	if err != nil {
		t.Fatalf("deleting Work %s after a restart: %v", workB.Name, err)
	}
	if !slices.Contains(deleted, id) {
		t.Errorf("Delete of Work %s, the last user, reported %v; want it to include the shared ConfigMap", workB.Name, deleted)
	}
	f.cmGone(f.ns, "settings")
	f.gone(f.ns, "b")
	if f.recordOf(workB.Name) != nil {
		t.Errorf("the record of the deleted Work %s is still there", workB.Name)
	}
}

// TestPruneDeletesASharedDependencyOnlyWithItsLastUser: a prune that keeps
// one of two Works sharing a ConfigMap leaves it; a prune that keeps
// neither deletes it.
func TestPruneDeletesASharedDependencyOnlyWithItsLastUser(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	data := map[string]string{"key": "value"}
	workA := sharedDepWork(t, f.work("a"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "a", "a:1", 1))
	workB := sharedDepWork(t, f.work("b"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "b", "b:1", 1))
	f.apply(a, workA)
	f.apply(a, workB)
	uid := f.mustCM(f.ns, "settings", "both Works applied it").UID
	id := configMapID(f.ns, "settings")

	deleted, err := a.Prune(f.ctx, sets.New(workB.Name), true)
	if err != nil {
		t.Fatalf("pruning all but Work %s: %v", workB.Name, err)
	}
	if slices.Contains(deleted, id) {
		t.Errorf("the prune keeping Work %s reported the shared ConfigMap deleted: %v", workB.Name, deleted)
	}
	f.gone(f.ns, "a")
	if cm := f.mustCM(f.ns, "settings", "the kept Work "+workB.Name+" still uses it"); cm.UID != uid {
		t.Errorf("the shared ConfigMap was replaced by the prune: UID %s, want %s", cm.UID, uid)
	}
	if !f.exists(f.ns, "b") {
		t.Errorf("Deployment b of the kept Work %s was pruned", workB.Name)
	}

	deleted, err = a.Prune(f.ctx, sets.New[string](), true)
	if err != nil {
		t.Fatalf("pruning every Work: %v", err)
	}
	if !slices.Contains(deleted, id) {
		t.Errorf("the prune of the last user reported %v; want it to include the shared ConfigMap", deleted)
	}
	f.cmGone(f.ns, "settings")
	f.gone(f.ns, "b")
}

// TestSharedDependencyOfAnotherHubNamespaceIsNotTaken: a Work of hub
// namespace team-b may not take the shared ConfigMap of team-a, and no
// shared manifest takes over an unlabelled ConfigMap made by hand; Delete
// of those Works leaves both alone.
func TestSharedDependencyOfAnotherHubNamespaceIsNotTaken(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	teamA := sharedDepWork(t, f.work("a"), 1, "team-a", sharedDepCM(f.ns, "settings", map[string]string{"owner": "team-a"}, "10"))
	f.apply(a, teamA)
	before := f.mustCM(f.ns, "settings", "Work "+teamA.Name+" applied it")

	teamB := sharedDepWork(t, f.work("b"), 1, "team-b", sharedDepCM(f.ns, "settings", map[string]string{"owner": "team-b"}, "20"))
	results, err := a.Apply(f.ctx, teamB)
	if !errors.Is(err, ErrNotOwned) {
		t.Errorf("applying team-b's Work over team-a's shared ConfigMap: error %v, want one wrapping ErrNotOwned", err)
	}
	if len(results) != 1 || results[0].Reason != v1alpha1.ReasonNotOwned {
		t.Errorf("applying team-b's Work over team-a's shared ConfigMap: results %+v, want one with reason %s", results, v1alpha1.ReasonNotOwned)
	}
	after := f.mustCM(f.ns, "settings", "team-b's refused apply must leave it")
	if after.Data["owner"] != "team-a" || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("team-b's refused apply changed team-a's ConfigMap: data %v (resourceVersion %s -> %s), want data owner=team-a unchanged", after.Data, before.ResourceVersion, after.ResourceVersion)
	}
	if after.Labels[v1alpha1.LabelMyAppNamespace] != "team-a" || after.Annotations[v1alpha1.AnnotationSourceVersion] != "10" {
		t.Errorf("team-b's refused apply changed team-a's ConfigMap metadata: labels %v annotations %v", after.Labels, after.Annotations)
	}
	if got, want := a.Holders(configMapID(f.ns, "settings")), []string{teamA.Name}; !slices.Equal(got, want) {
		t.Errorf("Holders after team-b's refused apply = %v, want %v (a refused Work must not hold the object)", got, want)
	}
	if _, err := a.Delete(f.ctx, teamB.Name); err != nil {
		t.Fatalf("deleting team-b's Work: %v", err)
	}
	if cm := f.mustCM(f.ns, "settings", "deleting team-b's Work must not delete team-a's ConfigMap"); cm.UID != before.UID {
		t.Errorf("team-a's ConfigMap was replaced: UID %s, want %s", cm.UID, before.UID)
	}

	// A ConfigMap made by hand, without any of Flotilla's labels.
	byHand := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "by-hand"}, Data: map[string]string{"mine": "yes"}}
	if err := f.c.Create(f.ctx, byHand, client.FieldOwner("kubectl-create")); err != nil {
		t.Fatalf("creating ConfigMap %s/by-hand: %v", f.ns, err)
	}
	hand := sharedDepWork(t, f.work("hand"), 1, "team-a", sharedDepCM(f.ns, "by-hand", map[string]string{"mine": "no"}, "30"))
	results, err = a.Apply(f.ctx, hand)
	if !errors.Is(err, ErrNotOwned) {
		t.Errorf("applying a shared manifest over a hand-made ConfigMap: error %v, want one wrapping ErrNotOwned", err)
	}
	if len(results) != 1 || results[0].Reason != v1alpha1.ReasonNotOwned {
		t.Errorf("applying a shared manifest over a hand-made ConfigMap: results %+v, want one with reason %s", results, v1alpha1.ReasonNotOwned)
	}
	got := f.mustCM(f.ns, "by-hand", "a refused apply must leave it")
	if got.Data["mine"] != "yes" || got.ResourceVersion != byHand.ResourceVersion || len(got.Labels) != 0 || len(got.Annotations) != 0 {
		t.Errorf("the hand-made ConfigMap was changed by a refused apply: data %v labels %v annotations %v (resourceVersion %s -> %s)",
			got.Data, got.Labels, got.Annotations, byHand.ResourceVersion, got.ResourceVersion)
	}
	if _, err := a.Delete(f.ctx, hand.Name); err != nil {
		t.Fatalf("deleting Work %s: %v", hand.Name, err)
	}
	if got := f.mustCM(f.ns, "by-hand", "Delete of a Work that never owned it must leave it"); got.UID != byHand.UID {
		t.Errorf("the hand-made ConfigMap was replaced: UID %s, want %s", got.UID, byHand.UID)
	}
}

// TestNewerSourceVersionIsNotOverwritten: a Work carrying an older copy
// (a smaller flotilla.dev/source-version) of a shared ConfigMap does not
// overwrite the newer copy in place, and still counts as applied; a newer
// copy overwrites it.
func TestNewerSourceVersionIsNotOverwritten(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	workA := sharedDepWork(t, f.work("a"), 1, "team-a", sharedDepCM(f.ns, "settings", map[string]string{"v": "v2"}, "200"))
	f.apply(a, workA)

	older := sharedDepWork(t, f.work("b"), 1, "team-a", sharedDepCM(f.ns, "settings", map[string]string{"v": "v1"}, "100"))
	results := f.apply(a, older)
	if len(results) != 1 || results[0].Reason != v1alpha1.ReasonApplied {
		t.Errorf("applying the older copy: results %+v, want one with reason %s", results, v1alpha1.ReasonApplied)
	}
	cm := f.mustCM(f.ns, "settings", "both Works applied it")
	if cm.Data["v"] != "v2" || cm.Annotations[v1alpha1.AnnotationSourceVersion] != "200" {
		t.Errorf("the older copy (source-version 100) overwrote the newer one: data %v, source-version %q; want v=v2 at 200",
			cm.Data, cm.Annotations[v1alpha1.AnnotationSourceVersion])
	}
	if got, want := a.Holders(configMapID(f.ns, "settings")), []string{workA.Name, older.Name}; !slices.Equal(got, want) {
		t.Errorf("Holders = %v, want %v: the Work that kept the newer copy still uses it", got, want)
	}

	newer := sharedDepWork(t, older.Name, 2, "team-a", sharedDepCM(f.ns, "settings", map[string]string{"v": "v3"}, "300"))
	results = f.apply(a, newer)
	if len(results) != 1 || results[0].Reason != v1alpha1.ReasonApplied {
		t.Errorf("applying the newer copy: results %+v, want one with reason %s", results, v1alpha1.ReasonApplied)
	}
	cm = f.mustCM(f.ns, "settings", "the newer copy was applied")
	if cm.Data["v"] != "v3" || cm.Annotations[v1alpha1.AnnotationSourceVersion] != "300" {
		t.Errorf("the newer copy (source-version 300) did not overwrite: data %v, source-version %q; want v=v3 at 300",
			cm.Data, cm.Annotations[v1alpha1.AnnotationSourceVersion])
	}
	f.assertSharedLabels(cm, "team-a")
}

// TestOrphanReleasesSharedDependencyOnlyWhenLastUser: Works with deletion
// policy Orphan sharing a ConfigMap: deleting the first leaves it a managed
// shared dependency, deleting the last releases it (it keeps running
// without Flotilla's labels).
func TestOrphanReleasesSharedDependencyOnlyWhenLastUser(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	data := map[string]string{"key": "value"}
	workA := sharedDepWork(t, f.work("a"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "a", "a:1", 1))
	workB := sharedDepWork(t, f.work("b"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "b", "b:1", 1))
	workA.Spec.DeletionPolicy = v1alpha1.DeletionPolicyOrphan
	workB.Spec.DeletionPolicy = v1alpha1.DeletionPolicyOrphan
	f.apply(a, workA)
	f.apply(a, workB)
	uid := f.mustCM(f.ns, "settings", "both Works applied it").UID
	aUID := f.getDeployment(f.ns, "a").UID

	if deleted, err := a.Delete(f.ctx, workA.Name); err != nil || len(deleted) != 0 {
		t.Fatalf("deleting Orphan Work %s: deleted %v, error %v; want nothing deleted, no error", workA.Name, deleted, err)
	}
	f.assertReleased(a, f.ns, "a", aUID)
	cm := f.mustCM(f.ns, "settings", "an Orphan Work never deletes")
	if cm.UID != uid {
		t.Errorf("the shared ConfigMap was replaced: UID %s, want %s", cm.UID, uid)
	}
	f.assertSharedLabels(cm, "team-a")
	if cm.Annotations[v1alpha1.AnnotationSourceVersion] != "10" {
		t.Errorf("the shared ConfigMap lost its source-version annotation while Work %s still uses it: %v", workB.Name, cm.Annotations)
	}

	if deleted, err := a.Delete(f.ctx, workB.Name); err != nil || len(deleted) != 0 {
		t.Fatalf("deleting Orphan Work %s: deleted %v, error %v; want nothing deleted, no error", workB.Name, deleted, err)
	}
	cm = f.mustCM(f.ns, "settings", "releasing must not delete it")
	if cm.UID != uid {
		t.Errorf("the released ConfigMap was replaced: UID %s, want %s", cm.UID, uid)
	}
	for _, k := range releasedLabels {
		if v, ok := cm.Labels[k]; ok {
			t.Errorf("the ConfigMap released by its last user still carries label %s=%q", k, v)
		}
	}
	if v, ok := cm.Annotations[v1alpha1.AnnotationSourceVersion]; ok {
		t.Errorf("the released ConfigMap still carries annotation %s=%q", v1alpha1.AnnotationSourceVersion, v)
	}
	for _, e := range cm.ManagedFields {
		if e.Manager == a.FieldOwner() {
			t.Errorf("the released ConfigMap still has a managedFields entry of %s (%s)", e.Manager, e.Operation)
		}
	}
	if !maps.Equal(cm.Data, data) {
		t.Errorf("releasing changed the ConfigMap's data: %v, want %v", cm.Data, data)
	}
}

// TestDroppedSharedDependencyStaysForOtherWork: a Work that stops naming a
// shared ConfigMap another Work uses leaves it; once the last Work drops
// it, it is deleted.
func TestDroppedSharedDependencyStaysForOtherWork(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	data := map[string]string{"key": "value"}
	workA := sharedDepWork(t, f.work("a"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "a", "a:1", 1))
	workB := sharedDepWork(t, f.work("b"), 1, "team-a", sharedDepCM(f.ns, "settings", data, "10"), deployment(f.ns, "b", "b:1", 1))
	f.apply(a, workA)
	f.apply(a, workB)
	uid := f.mustCM(f.ns, "settings", "both Works applied it").UID
	id := configMapID(f.ns, "settings")

	f.apply(a, sharedDepWork(t, workA.Name, 2, "team-a", deployment(f.ns, "a", "a:1", 1)))
	if cm := f.mustCM(f.ns, "settings", "Work "+workB.Name+" still uses it after Work "+workA.Name+" dropped it"); cm.UID != uid {
		t.Errorf("the shared ConfigMap was replaced: UID %s, want %s", cm.UID, uid)
	}
	if slices.ContainsFunc(a.AppliedSet(workA.Name), func(o AppliedObject) bool { return o.ResourceIdentifier == id }) {
		t.Errorf("Work %s's applied set still holds the ConfigMap it dropped: %+v", workA.Name, a.AppliedSet(workA.Name))
	}
	if got, want := a.Holders(id), []string{workB.Name}; !slices.Equal(got, want) {
		t.Errorf("Holders after Work %s dropped the ConfigMap = %v, want %v", workA.Name, got, want)
	}

	f.apply(a, sharedDepWork(t, workB.Name, 2, "team-a", deployment(f.ns, "b", "b:1", 1)))
	f.cmGone(f.ns, "settings")
	if got := a.Holders(id); len(got) != 0 {
		t.Errorf("Holders after both Works dropped the ConfigMap = %v, want none", got)
	}
	if !f.exists(f.ns, "a") || !f.exists(f.ns, "b") {
		t.Errorf("the Works' Deployments were deleted along with the dropped ConfigMap")
	}
}

// TestNeedsApplyWithSharedDependency: a Work with a shared ConfigMap,
// applied, needs no apply while the live objects are as applied, and needs
// one once the ConfigMap is edited by hand.
func TestNeedsApplyWithSharedDependency(t *testing.T) {
	f := newFixture(t)
	a := f.sharedDepApplier(Options{})
	work := sharedDepWork(t, f.work("web"), 1, "team-a", sharedDepCM(f.ns, "settings", map[string]string{"key": "value"}, "10"), deployment(f.ns, "web", "web:1", 1))
	f.apply(a, work)

	live := func() []kclient.Object {
		d := f.getDeployment(f.ns, "web")
		d.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}
		cm := f.mustCM(f.ns, "settings", "the Work applied it")
		cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
		return []kclient.Object{d, cm}
	}
	if a.NeedsApply(work, live()) {
		t.Errorf("NeedsApply = true right after the Work with a shared ConfigMap applied, with its live objects unchanged")
	}
	// Only the Deployment in view: the ConfigMap counts as missing.
	if !a.NeedsApply(work, live()[:1]) {
		t.Errorf("NeedsApply = false with the applied shared ConfigMap missing from the live objects")
	}

	cm := f.mustCM(f.ns, "settings", "the Work applied it")
	patch := client.MergeFrom(cm.DeepCopy())
	cm.Data["key"] = "edited by hand"
	if err := f.c.Patch(f.ctx, cm, patch, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatalf("editing ConfigMap %s/settings by hand: %v", f.ns, err)
	}
	if !a.NeedsApply(work, live()) {
		t.Errorf("NeedsApply = false after the shared ConfigMap's data was edited by hand (its resourceVersion moved)")
	}
	f.apply(a, work)
	if got := f.mustCM(f.ns, "settings", "the Work re-applied it"); got.Data["key"] != "value" {
		t.Errorf("re-applying did not repair the edited ConfigMap: data %v", got.Data)
	}
	if a.NeedsApply(work, live()) {
		t.Errorf("NeedsApply = true right after the repairing apply")
	}
}
