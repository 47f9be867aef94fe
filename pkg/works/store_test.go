package works

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
)

// reporter records the statuses the Store sends, as the sync client would
// receive them.
type reporter struct {
	mu      sync.Mutex
	reports map[string][]*flotillav1.WorkStatus
}

func (r *reporter) ReportStatus(name string, st *flotillav1.WorkStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reports == nil {
		r.reports = map[string][]*flotillav1.WorkStatus{}
	}
	r.reports[name] = append(r.reports[name], st)
}

// of returns the statuses reported for Work name so far.
func (r *reporter) of(name string) []*flotillav1.WorkStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reports[name])
}

// storeFixture is a Store applying to envtest with a recording reporter,
// and a direct client to look at and change the member.
type storeFixture struct {
	t        *testing.T
	c        client.Client
	ns       string
	store    *Store
	reporter *reporter
	// reconciler reads live objects the way the agent's Controller does,
	// here straight from the apiserver.
	reconciler *Controller
}

func newStoreFixture(t *testing.T, ns string) *storeFixture {
	t.Helper()
	c := newClient(t)
	createNamespace(t, c, ns)
	a := apply.New(nil, crclient.Client(c), apply.Options{RecordNamespace: ns})
	a.SetIdentity("fleet-test", "member-1")
	s := NewStore(a)
	rep := &reporter{}
	s.SetReporter(rep)
	return &storeFixture{t: t, c: c, ns: ns, store: s, reporter: rep, reconciler: &Controller{Reader: crclient.Reader(c), Store: s}}
}

// work is Work <ns>.<app> at generation gen carrying objs, as the hub
// sends it.
func (f *storeFixture) work(app string, gen int64, objs ...runtime.Object) *flotillav1.Work {
	f.t.Helper()
	name := flotillav1.WorkName(f.ns, app)
	w := &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: flotillav1.ClusterNamespace("member-1"), Generation: gen, UID: types.UID("uid-" + name),
		Labels: map[string]string{flotillav1.LabelMyAppNamespace: f.ns, flotillav1.LabelMyAppName: app},
	}}
	for _, o := range objs {
		raw, err := json.Marshal(o)
		if err != nil {
			f.t.Fatal(err)
		}
		w.Spec.Manifests = append(w.Spec.Manifests, flotillav1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	return w
}

func (f *storeFixture) deployment(app string, replicas int32) *appsv1.Deployment {
	return deployment(f.ns, app, replicas, nil)
}

func (f *storeFixture) apply(w *flotillav1.Work) {
	f.t.Helper()
	if err := f.store.Apply(f.t.Context(), w); err != nil {
		f.t.Fatalf("applying Work %s: %v", w.Name, err)
	}
}

func (f *storeFixture) reconcile(name string) {
	f.t.Helper()
	if err := f.reconciler.Reconcile(f.t.Context(), name); err != nil {
		f.t.Fatalf("reconciling Work %s: %v", name, err)
	}
}

func (f *storeFixture) get(name string) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	err := f.c.Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, d)
	return d, err
}

func (f *storeFixture) mustGet(name string) *appsv1.Deployment {
	f.t.Helper()
	d, err := f.get(name)
	if err != nil {
		f.t.Fatalf("getting Deployment %s: %v", name, err)
	}
	return d
}

func (f *storeFixture) held() []syncclient.HeldWork {
	f.t.Helper()
	h, err := f.store.Held(f.t.Context())
	if err != nil {
		f.t.Fatal(err)
	}
	return h
}

func (f *storeFixture) checkReports(name string, want int) []*flotillav1.WorkStatus {
	f.t.Helper()
	got := f.reporter.of(name)
	if len(got) != want {
		f.t.Fatalf("%d status reports for %s, want %d", len(got), name, want)
	}
	return got
}

func TestStoreReportsStatusOnlyWhenItChanges(t *testing.T) {
	f := newStoreFixture(t, "store-report")
	w := f.work("web", 1, f.deployment("web", 2))

	f.apply(w)
	first := f.checkReports(w.Name, 1)[0]
	applied := meta.FindStatusCondition(first.Conditions, flotillav1.ConditionApplied)
	if first.ObservedGeneration != 1 || applied == nil || applied.Status != metav1.ConditionTrue {
		t.Fatalf("first report = %+v", first)
	}

	// Nothing changed: applying the same Work again and reconciling it
	// send nothing.
	f.apply(w)
	f.reconcile(w.Name)
	f.checkReports(w.Name, 1)

	// The Deployment controller's status update changes the Work's status.
	d := f.mustGet("web")
	generation := d.Generation
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 2,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		}}
	if err := f.c.Status().Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	f.reconcile(w.Name)
	second := f.checkReports(w.Name, 2)[1]
	if len(second.Manifests) != 1 || second.Manifests[0].Workload == nil || second.Manifests[0].Workload.AvailableReplicas != 2 {
		t.Fatalf("second report's manifests = %+v, want 2 available replicas", second.Manifests)
	}
	if c := meta.FindStatusCondition(second.Conditions, flotillav1.ConditionAvailable); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("second report's Available = %+v", c)
	}
	// A condition that stayed as it was keeps its transition time.
	if c := meta.FindStatusCondition(second.Conditions, flotillav1.ConditionApplied); c == nil || !c.LastTransitionTime.Equal(&applied.LastTransitionTime) {
		t.Errorf("Applied moved its transition time from %s to %+v", applied.LastTransitionTime, c)
	}
	// A status update is not drift: nothing was applied again.
	if got := f.mustGet("web").Generation; got != generation {
		t.Errorf("Deployment generation moved from %d to %d on a status update", generation, got)
	}
	f.reconcile(w.Name)
	f.checkReports(w.Name, 2)

	// A new generation of the Work is reported at once.
	f.apply(f.work("web", 2, f.deployment("web", 3)))
	third := f.checkReports(w.Name, 3)[2]
	if third.ObservedGeneration != 2 {
		t.Errorf("third report's observedGeneration = %d, want 2", third.ObservedGeneration)
	}
	if got := *f.mustGet("web").Spec.Replicas; got != 3 {
		t.Errorf("Deployment replicas = %d, want 3", got)
	}
}

func TestStoreReconcileUndoesDrift(t *testing.T) {
	f := newStoreFixture(t, "store-drift")
	w := f.work("web", 1, f.deployment("web", 2))
	f.apply(w)

	d := f.mustGet("web")
	d.Spec.Replicas = new(int32(7))
	if err := f.c.Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	f.reconcile(w.Name)
	if got := *f.mustGet("web").Spec.Replicas; got != 2 {
		t.Errorf("replicas after reconcile = %d, want the Work's 2", got)
	}

	if err := f.c.Delete(t.Context(), f.mustGet("web")); err != nil {
		t.Fatal(err)
	}
	f.reconcile(w.Name)
	if _, err := f.get("web"); err != nil {
		t.Errorf("the Deployment deleted by hand was not created again: %v", err)
	}
}

func TestStoreReconcileOfAnUnknownWorkDoesNothing(t *testing.T) {
	f := newStoreFixture(t, "store-unknown")
	called := false
	err := f.store.Reconcile(t.Context(), "store-unknown.nothing", func(*flotillav1.Work) ([]kclient.Object, error) {
		called = true
		return nil, nil
	})
	if err != nil || called {
		t.Errorf("Reconcile of an unknown Work: error %v, read live objects %t", err, called)
	}
}

func TestStoreSnapshotCompletePrunesOnlyWhatIsNotKept(t *testing.T) {
	f := newStoreFixture(t, "store-prune")
	a, b, c := f.work("a", 1, f.deployment("a", 1)), f.work("b", 1, f.deployment("b", 1)), f.work("c", 1, f.deployment("c", 1))
	for _, w := range []*flotillav1.Work{a, b, c} {
		f.apply(w)
	}
	manual := f.deployment("manual", 1)
	if err := f.c.Create(t.Context(), manual); err != nil {
		t.Fatal(err)
	}

	if err := f.store.SnapshotComplete(t.Context(), []string{a.Name, c.Name}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.get("b"); !apierrors.IsNotFound(err) {
		t.Errorf("b's Deployment after the snapshot: %v, want NotFound", err)
	}
	for _, name := range []string{"a", "c", "manual"} {
		if d, err := f.get(name); err != nil || d.DeletionTimestamp != nil {
			t.Errorf("Deployment %s was pruned: %v", name, err)
		}
	}
	names := f.store.Names()
	slices.Sort(names)
	if !slices.Equal(names, []string{a.Name, c.Name}) {
		t.Errorf("Names = %v, want %s and %s", names, a.Name, c.Name)
	}
	var held []string
	for _, h := range f.held() {
		held = append(held, h.Name)
	}
	if !slices.Equal(held, []string{a.Name, c.Name}) {
		t.Errorf("Held = %v, want %s and %s", held, a.Name, c.Name)
	}
	// The pruned Work is forgotten: a reconcile woken by its Deployment's
	// delete event brings nothing back.
	f.reconcile(b.Name)
	if _, err := f.get("b"); !apierrors.IsNotFound(err) {
		t.Errorf("b's Deployment came back: %v", err)
	}
}

func TestStoreHeldListsWhatTheMemberRuns(t *testing.T) {
	f := newStoreFixture(t, "store-held")
	a := f.work("a", 3, f.deployment("a", 1))
	f.apply(a)
	want := []syncclient.HeldWork{{Name: a.Name, UID: string(a.UID), Generation: 3}}
	if got := f.held(); !slices.Equal(got, want) {
		t.Fatalf("Held = %+v, want %+v", got, want)
	}

	// A Work that fails to apply is kept (and retried) but not held, so
	// that the hub sends it again after a reconnect.
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cfg"}}
	broken := f.work("broken", 1, cm)
	if err := f.store.Apply(t.Context(), broken); err == nil {
		t.Fatal("applying a ConfigMap, a kind the applier does not manage, succeeded")
	}
	if st := f.checkReports(broken.Name, 1)[0]; !meta.IsStatusConditionFalse(st.Conditions, flotillav1.ConditionApplied) {
		t.Errorf("the failed Work's report says Applied %+v", meta.FindStatusCondition(st.Conditions, flotillav1.ConditionApplied))
	}
	if !slices.Contains(f.store.Names(), broken.Name) {
		t.Error("the failed Work is not in the Store")
	}
	if got := f.held(); !slices.Equal(got, want) {
		t.Errorf("Held after a failed apply = %+v, want %+v", got, want)
	}

	// A Work applied outside the Store (a record the Store did not make,
	// as after a restart) is listed without a version: its objects run,
	// and the snapshot's prune would reach them.
	elsewhere := f.work("elsewhere", 1, f.deployment("elsewhere", 1))
	if _, err := f.store.applier.Apply(t.Context(), elsewhere); err != nil {
		t.Fatal(err)
	}
	want = append(want, syncclient.HeldWork{Name: elsewhere.Name})
	if got := f.held(); !slices.Equal(got, want) {
		t.Errorf("Held after an apply outside the Store = %+v, want %+v", got, want)
	}

	// A held Work whose next generation fails is no longer held as
	// applied, but its record stands: listed without a version, so the
	// hub sends it again.
	if err := f.store.Apply(t.Context(), f.work("a", 4, f.deployment("a", 1), cm)); err == nil {
		t.Fatal("applying a Work with a ConfigMap succeeded")
	}
	want[0] = syncclient.HeldWork{Name: a.Name}
	if got := f.held(); !slices.Equal(got, want) {
		t.Errorf("Held after the held Work's apply failed = %+v, want %+v", got, want)
	}

	// Deleted Works are neither held nor kept, and their objects go.
	f.apply(a)
	if err := f.store.Delete(t.Context(), a.Name); err != nil {
		t.Fatal(err)
	}
	if got := f.held(); !slices.Equal(got, want[1:]) {
		t.Errorf("Held after Delete = %+v, want %+v", got, want[1:])
	}
	if slices.Contains(f.store.Names(), a.Name) {
		t.Error("the deleted Work is still in the Store")
	}
	if _, err := f.get("a"); !apierrors.IsNotFound(err) {
		t.Errorf("a's Deployment after Delete: %v, want NotFound", err)
	}
}

// TestStoreHeldListsRecordedWorksAfterRestart: a Store started afresh on a
// member whose applied set records Works (the agent restarted) lists them
// in its hello with no UID and generation 0, so that the hub sends the
// ones it wants again and confirms the deletion of the others only once
// they are pruned, never because the hello left them out. A Work applied
// by the new Store is listed with what it applied.
func TestStoreHeldListsRecordedWorksAfterRestart(t *testing.T) {
	f := newStoreFixture(t, "store-restart")
	a := f.work("a", 3, f.deployment("a", 1))
	b := f.work("b", 5, f.deployment("b", 1))
	f.apply(a)
	f.apply(b)

	restarted := apply.New(nil, crclient.Client(f.c), apply.Options{RecordNamespace: f.ns})
	restarted.SetIdentity("fleet-test", "member-1")
	s := NewStore(restarted)
	got, err := s.Held(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []syncclient.HeldWork{{Name: a.Name}, {Name: b.Name}}
	if !slices.Equal(got, want) {
		t.Fatalf("Held after a restart = %+v, want %+v (recorded, applied version unknown)", got, want)
	}

	if err := s.Apply(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	got, err = s.Held(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want = []syncclient.HeldWork{{Name: a.Name, UID: string(a.UID), Generation: 3}, {Name: b.Name}}
	if !slices.Equal(got, want) {
		t.Fatalf("Held after a restart and an apply of a = %+v, want %+v", got, want)
	}

	// b is pruned: no record, so no longer listed, and its objects gone.
	if err := s.SnapshotComplete(t.Context(), []string{a.Name}, false); err != nil {
		t.Fatal(err)
	}
	got, err = s.Held(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want = want[:1]
	if !slices.Equal(got, want) {
		t.Errorf("Held after b was pruned = %+v, want %+v", got, want)
	}
	if _, err := f.get("b"); !apierrors.IsNotFound(err) {
		t.Errorf("b's Deployment after the prune: %v, want NotFound", err)
	}
	if d := f.mustGet("a"); d.DeletionTimestamp != nil {
		t.Error("a's Deployment is being deleted")
	}
}

func TestStoreWithoutReporterStillApplies(t *testing.T) {
	f := newStoreFixture(t, "store-noreporter")
	f.store.SetReporter(nil)
	f.apply(f.work("web", 1, f.deployment("web", 1)))
	f.mustGet("web")
}

// TestStoreSnapshotCompleteWaitsForConfirmation shows the deletion brake
// through the Store: a snapshot dropping 3 of 4 Works (6 of 8 Deployments)
// deletes nothing and returns the applier's *apply.PruneBlockedError; the
// dropped Works are no longer held, their Deployments keep running, and
// the confirmed snapshot deletes them. The error is also the sync
// client's *syncclient.PruneBlockedError, which the client reports.
func TestStoreSnapshotCompleteWaitsForConfirmation(t *testing.T) {
	f := newStoreFixture(t, "store-brake")
	var names []string
	for i := range 4 {
		app := fmt.Sprintf("app%d", i)
		w := f.work(app, 1, f.deployment(app+"-a", 1), f.deployment(app+"-b", 1))
		names = append(names, w.Name)
		f.apply(w)
	}

	err := f.store.SnapshotComplete(t.Context(), names[:1], false)
	var blocked *apply.PruneBlockedError
	if !errors.As(err, &blocked) || blocked.WouldDelete != 6 || blocked.Held != 8 || !slices.Equal(blocked.Works, names[1:]) {
		t.Fatalf("SnapshotComplete error = %v, want a *apply.PruneBlockedError for 6 of 8 objects of %v", err, names[1:])
	}
	var reported *syncclient.PruneBlockedError
	if !errors.As(err, &reported) || reported.WouldDelete != 6 || reported.Held != 8 || !slices.Equal(reported.Works, names[1:]) {
		t.Errorf("SnapshotComplete error = %v, want it to carry a *syncclient.PruneBlockedError for 6 of 8 objects of %v", err, names[1:])
	}
	for i := range 4 {
		for _, s := range []string{"-a", "-b"} {
			if d, err := f.get(fmt.Sprintf("app%d%s", i, s)); err != nil || d.DeletionTimestamp != nil {
				t.Errorf("Deployment app%d%s after a blocked prune: %v", i, s, err)
			}
		}
	}
	if got := f.store.Names(); !slices.Equal(got, names[:1]) {
		t.Errorf("Names after a blocked prune = %v, want %v", got, names[:1])
	}

	if err := f.store.SnapshotComplete(t.Context(), names[:1], true); err != nil {
		t.Fatalf("confirmed SnapshotComplete: %v", err)
	}
	for i := 1; i < 4; i++ {
		for _, s := range []string{"-a", "-b"} {
			if _, err := f.get(fmt.Sprintf("app%d%s", i, s)); !apierrors.IsNotFound(err) {
				t.Errorf("Deployment app%d%s after the confirmed prune: %v, want NotFound", i, s, err)
			}
		}
	}
	if _, err := f.get("app0-a"); err != nil {
		t.Errorf("the kept Work's Deployment: %v", err)
	}
}
