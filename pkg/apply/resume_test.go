package apply

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
)

// TestRecordProvesDrift shows which records restore a drift record after a
// restart: only one with the Work's mark and, for every object, a UID and
// a version; and that the mark and versions survive the ConfigMap's
// encoding.
func TestRecordProvesDrift(t *testing.T) {
	web := AppliedObject{ResourceIdentifier: deploymentID("shop", "web"), UID: "d1", Generation: 3}
	cfg := AppliedObject{ResourceIdentifier: v1alpha1.ResourceIdentifier{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "cfg"}, UID: "c1", ResourceVersion: "10"}
	mark := appliedMark{uid: "w1", generation: 5}
	cases := []struct {
		name    string
		objects []AppliedObject
		mark    appliedMark
		want    bool
	}{
		{"mark and every object's UID and version", []AppliedObject{web, cfg}, mark, true},
		{"a Work at generation 0 (built in Go) is a mark too", []AppliedObject{web}, appliedMark{uid: "w1"}, true},
		{"no mark: written before an apply finished, or by an older Applier", []AppliedObject{web, cfg}, appliedMark{}, false},
		{"an object recorded before its apply returned (no UID)", []AppliedObject{web, {ResourceIdentifier: deploymentID("shop", "new")}}, mark, false},
		{"an object without a version (an older record's entry)", []AppliedObject{web, {ResourceIdentifier: deploymentID("shop", "old"), UID: "d2"}}, mark, false},
	}
	a := New(nil, fakeWriter{}, Options{RecordNamespace: "flotilla-system"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cm, err := a.encodeRecord(&record{work: "shop.web", objects: tc.objects, mark: tc.mark})
			if err != nil {
				t.Fatal(err)
			}
			r, err := decodeRecord(cm)
			if err != nil {
				t.Fatalf("decoding the record: %v", err)
			}
			want := slices.Clone(tc.objects)
			sortObjects(want)
			if r.mark != tc.mark || !slices.Equal(r.objects, want) {
				t.Errorf("decoded mark %+v and objects %+v, want %+v and %+v", r.mark, r.objects, tc.mark, want)
			}
			w, ok := r.drift()
			if ok != tc.want {
				t.Fatalf("drift() proves = %v, want %v", ok, tc.want)
			}
			if ok && (w.uid != tc.mark.uid || w.generation != tc.mark.generation || len(w.objects) != len(tc.objects)) {
				t.Errorf("drift() = %+v, want the mark %+v and %d objects", w, tc.mark, len(tc.objects))
			}
		})
	}

	t.Run("an unreadable mark is no mark, and the objects stay", func(t *testing.T) {
		cm, err := a.encodeRecord(&record{work: "shop.web", objects: []AppliedObject{web}, mark: mark})
		if err != nil {
			t.Fatal(err)
		}
		cm.Object["data"].(map[string]any)[recordWorkGenerationKey] = "five"
		r, err := decodeRecord(cm)
		if err != nil {
			t.Fatalf("decoding the record: %v", err)
		}
		if _, ok := r.drift(); ok || !slices.Equal(r.objects, []AppliedObject{web}) {
			t.Errorf("record with generation %q: drift proven %v, objects %+v; want not proven and the object kept", "five", ok, r.objects)
		}
	})
}

// fakeWriter is enough of a client for New: the pure tests never call it.
type fakeWriter struct{ kclient.Client }

// writeCounter counts the write requests (anything but GET) a client
// sends, and among them those to ConfigMaps (the records).
type writeCounter struct {
	writes, recordWrites atomic.Int32
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			c.writes.Add(1)
			if strings.Contains(req.URL.Path, "/configmaps") {
				c.recordWrites.Add(1)
			}
		}
		return rt.RoundTrip(req)
	})
}

func (c *writeCounter) reset() { c.writes.Store(0); c.recordWrites.Store(0) }

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// restartedApplier is a new Applier on the test's cluster and records (a
// restarted agent, or a new hub leader), whose HTTP writes counter counts.
func (f *fixture) restartedApplier(counter *writeCounter) *Applier {
	f.t.Helper()
	cfg := rest.CopyConfig(startEnv(f.t))
	cfg.WrapTransport = counter.wrap
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		f.t.Fatalf("creating a counting client: %v", err)
	}
	a := New(nil, writerFor(f.t, cfg, c), Options{RecordNamespace: f.ns})
	a.SetIdentity(testFleet, testCluster)
	if err := a.Load(f.ctx); err != nil {
		f.t.Fatalf("loading the records: %v", err)
	}
	return a
}

// recordMark reads the Work's mark from its record ConfigMap.
func (f *fixture) recordMark(work string) (uid, generation string) {
	f.t.Helper()
	cm := f.recordOf(work)
	if cm == nil {
		f.t.Fatalf("Work %s has no record", work)
	}
	return cm.Data[recordWorkUIDKey], cm.Data[recordWorkGenerationKey]
}

// editReplicas changes Deployment ns/name's replicas by hand, which moves
// its generation.
func (f *fixture) editReplicas(ns, name string, replicas int32) {
	f.t.Helper()
	d := f.getDeployment(ns, name)
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = &replicas
	if err := f.c.Patch(f.ctx, d, patch, client.FieldOwner("kubectl-edit")); err != nil {
		f.t.Fatalf("editing Deployment %s/%s by hand: %v", ns, name, err)
	}
}

// TestRestartResumesWithoutApplying is a restart (a new agent process, a
// new hub leader in push mode): the new Applier loads the records and
// finds an unchanged Work needs no apply, with no write request; Applied
// lists it; and applying it anyway writes no record.
func TestRestartResumesWithoutApplying(t *testing.T) {
	f := newFixture(t)
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2))
	f.apply(f.recordingApplier(Options{}), work)
	if uid, gen := f.recordMark(work.Name); uid != string(work.UID) || gen != "1" {
		t.Fatalf("record mark after the first apply = %q/%q, want %s/1", uid, gen, work.UID)
	}

	var counter writeCounter
	restarted := f.restartedApplier(&counter)
	if restarted.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("after a restart NeedsApply = true for an unchanged Work and Deployment")
	}
	if n := counter.writes.Load(); n != 0 {
		t.Errorf("Load and NeedsApply sent %d write requests, want none", n)
	}
	want := []AppliedWork{{Name: work.Name, UID: work.UID, Generation: 1}}
	if got := restarted.Applied(); !slices.Equal(got, want) {
		t.Errorf("after a restart Applied() = %+v, want %+v", got, want)
	}

	// A caller that skips the apply (the push engine's Store.Sync) has no
	// results; Status reports what the record proves, not "waiting".
	st, _, err := restarted.Status(f.ctx, work, nil, time.Now())
	if err != nil {
		t.Fatalf("status after a restart: %v", err)
	}
	if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionApplied) || len(st.Manifests) != 1 || st.Manifests[0].ResourceIdentifier != deploymentID(f.ns, "web") {
		t.Errorf("status after a restart without results = %+v, want Applied True for Deployment %s/web", st, f.ns)
	}
	next := newWork(t, work.Name, 2, deployment(f.ns, "web", "web:2", 2))
	if st, _, _ := restarted.Status(f.ctx, next, nil, time.Now()); meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionApplied) {
		t.Errorf("status of a generation never applied, without results, says Applied: %+v", st.Conditions)
	}
	if n := counter.writes.Load(); n != 0 {
		t.Errorf("Status sent %d write requests, want none", n)
	}

	// A caller that applies anyway (the agent applies every Work of the
	// hub's snapshot) sends the apply, but writes no record.
	f.apply(restarted, work)
	if n := counter.recordWrites.Load(); n != 0 {
		t.Errorf("re-applying an unchanged Work after a restart sent %d record writes, want none", n)
	}
	if restarted.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("NeedsApply = true right after the apply")
	}
}

// TestRestartSeesAHandEdit shows that a Deployment edited by hand while no
// Applier ran (its generation moved) needs an apply after a restart; the
// apply that repairs it records the new generation in one record write,
// and the next restart resumes from it.
func TestRestartSeesAHandEdit(t *testing.T) {
	f := newFixture(t)
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2))
	f.apply(f.recordingApplier(Options{}), work)
	f.editReplicas(f.ns, "web", 5)

	var counter writeCounter
	restarted := f.restartedApplier(&counter)
	if !restarted.NeedsApply(work, f.liveOf(work)) {
		t.Fatalf("after a restart NeedsApply = false for a Deployment edited by hand")
	}
	f.apply(restarted, work)
	if got := *f.getDeployment(f.ns, "web").Spec.Replicas; got != 2 {
		t.Errorf("replicas = %d after the repair, want the Work's 2", got)
	}
	if n := counter.recordWrites.Load(); n != 1 {
		t.Errorf("the repair sent %d record writes, want 1", n)
	}
	if got, want := f.recordedObjects(work.Name), []AppliedObject{f.recorded(f.ns, "web")}; !slices.Equal(got, want) {
		t.Errorf("record after the repair = %+v, want %+v", got, want)
	}
	if f.restartedApplier(&writeCounter{}).NeedsApply(work, f.liveOf(work)) {
		t.Errorf("after another restart NeedsApply = true, although the repair was recorded")
	}
}

// TestRestartSeesANewWorkGeneration shows that a Work changed while no
// Applier ran needs an apply after a restart; applying it writes the new
// generation in one record write, and the next restart resumes from it
// (and still knows the old generation is not what runs).
func TestRestartSeesANewWorkGeneration(t *testing.T) {
	f := newFixture(t)
	v1 := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2))
	f.apply(f.recordingApplier(Options{}), v1)
	v2 := newWork(t, v1.Name, 2, deployment(f.ns, "web", "web:2", 2))

	var counter writeCounter
	restarted := f.restartedApplier(&counter)
	if !restarted.NeedsApply(v2, f.liveOf(v2)) {
		t.Fatalf("after a restart NeedsApply = false for a new Work generation")
	}
	f.apply(restarted, v2)
	if n := counter.recordWrites.Load(); n != 1 {
		t.Errorf("applying the new generation sent %d record writes, want 1", n)
	}
	if uid, gen := f.recordMark(v2.Name); uid != string(v2.UID) || gen != "2" {
		t.Errorf("record mark = %q/%q, want %s/2", uid, gen, v2.UID)
	}

	again := f.restartedApplier(&writeCounter{})
	if again.NeedsApply(v2, f.liveOf(v2)) {
		t.Errorf("after another restart NeedsApply = true for the recorded generation")
	}
	if !again.NeedsApply(v1, f.liveOf(v1)) {
		t.Errorf("after another restart NeedsApply = false for the older generation")
	}
	recreated := v2.DeepCopy()
	recreated.UID = types.UID("another")
	if !again.NeedsApply(recreated, f.liveOf(v2)) {
		t.Errorf("after another restart NeedsApply = false for a Work of the same name and generation but another UID")
	}
}

// TestRestartFromAnOldRecord shows that a record written before the
// drift record was stored (no mark, no generations) still loads whole:
// the Work needs an apply, and nothing is lost; the apply upgrades the
// record in one write.
func TestRestartFromAnOldRecord(t *testing.T) {
	f := newFixture(t)
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2))
	f.apply(f.recordingApplier(Options{}), work)
	d := f.getDeployment(f.ns, "web")

	cm := f.recordOf(work.Name)
	cm.Data = map[string]string{recordObjectsKey: `[{"group":"apps","version":"v1","kind":"Deployment","namespace":"` + f.ns + `","name":"web","uid":"` + string(d.UID) + `"}]`}
	if err := f.c.Update(f.ctx, cm); err != nil {
		t.Fatalf("writing an old-format record: %v", err)
	}

	var counter writeCounter
	restarted := f.restartedApplier(&counter)
	if !restarted.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("after a restart from an old record NeedsApply = false, want true")
	}
	if got := restarted.Applied(); len(got) != 0 {
		t.Errorf("after a restart from an old record Applied() = %+v, want none", got)
	}
	old := []AppliedObject{{ResourceIdentifier: deploymentID(f.ns, "web"), UID: d.UID}}
	if got := restarted.AppliedSet(work.Name); !slices.Equal(got, old) {
		t.Errorf("AppliedSet from an old record = %+v, want %+v", got, old)
	}

	f.apply(restarted, work)
	if n := counter.recordWrites.Load(); n != 1 {
		t.Errorf("the first apply after the restart sent %d record writes, want 1 (the upgrade)", n)
	}
	if got, want := f.recordedObjects(work.Name), []AppliedObject{f.recorded(f.ns, "web")}; !slices.Equal(got, want) {
		t.Errorf("upgraded record = %+v, want %+v", got, want)
	}
	if f.restartedApplier(&writeCounter{}).NeedsApply(work, f.liveOf(work)) {
		t.Errorf("after a restart from the upgraded record NeedsApply = true")
	}
}

// TestFailedDriftWriteDoesNotFailTheApply shows that the write at the end
// of an Apply, which only stores the drift record, never fails the Apply
// and never loses an object: when it fails the Apply succeeds, the Applier
// still knows in memory what it applied, the record keeps its objects and
// proves only the older generation (a restart applies again), and the next
// Apply writes it. When it finds the record grown by another Applier it
// keeps the union, which then proves nothing.
func TestFailedDriftWriteDoesNotFailTheApply(t *testing.T) {
	f := newFixture(t)
	var failing atomic.Bool
	wc, err := client.NewWithWatch(startEnv(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := interceptor.NewClient(wc, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if failing.Load() && obj.GetObjectKind().GroupVersionKind().Kind == "ConfigMap" {
				return apierrors.NewServiceUnavailable("the test refuses record updates")
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	a := New(nil, crclient.Client(c), Options{RecordNamespace: f.ns})
	a.SetIdentity(testFleet, testCluster)
	v1 := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2))
	f.apply(a, v1)
	before := f.recordedObjects(v1.Name)

	failing.Store(true)
	v2 := newWork(t, v1.Name, 2, deployment(f.ns, "web", "web:2", 2))
	if _, err := a.Apply(f.ctx, v2); err != nil {
		t.Fatalf("Apply failed because the drift record could not be written: %v", err)
	}
	if a.NeedsApply(v2, f.liveOf(v2)) {
		t.Errorf("NeedsApply = true in the process that applied, after the record write failed")
	}
	if got := f.recordedObjects(v2.Name); len(got) != 1 || got[0].UID != before[0].UID {
		t.Errorf("record after the failed write = %+v, want the Deployment still recorded with UID %s", got, before[0].UID)
	}
	if _, gen := f.recordMark(v2.Name); gen != "1" {
		t.Errorf("record mark generation after the failed write = %q, want the older 1", gen)
	}
	if !f.restartedApplier(&writeCounter{}).NeedsApply(v2, f.liveOf(v2)) {
		t.Errorf("after a restart NeedsApply = false, although the record does not prove generation 2")
	}

	failing.Store(false)
	f.apply(a, v2)
	if _, gen := f.recordMark(v2.Name); gen != "2" {
		t.Errorf("record mark generation after the next Apply = %q, want 2", gen)
	}

	// Another Applier (a successor) adds an object to the record behind
	// a's back; a's end-of-Apply write conflicts and keeps the union.
	v3 := newWork(t, v1.Name, 3, deployment(f.ns, "web", "web:2", 2), deployment(f.ns, "extra", "web:2", 1))
	f.apply(f.recordingApplier(Options{}), v3)
	v4 := newWork(t, v1.Name, 4, deployment(f.ns, "web", "web:3", 2))
	if _, err := a.Apply(f.ctx, v4); err != nil {
		t.Fatalf("applying with a stale record: %v", err)
	}
	got := f.recordedObjects(v4.Name)
	if !slices.ContainsFunc(got, func(o AppliedObject) bool { return o.Name == "extra" }) || !slices.ContainsFunc(got, func(o AppliedObject) bool { return o.Name == "web" }) {
		t.Errorf("record after a conflicting drift write = %+v, want both web and extra", got)
	}
	if uid, _ := f.recordMark(v4.Name); uid != "" {
		t.Errorf("the union of two records carries the mark of Work %q; it proves nothing", uid)
	}
	if !f.restartedApplier(&writeCounter{}).NeedsApply(v4, f.liveOf(v4)) {
		t.Errorf("after a restart from the union NeedsApply = false")
	}
	// Nor does it in memory: the next Apply removes what v4 no longer
	// names, and the record proves v4 again.
	if !a.NeedsApply(v4, f.liveOf(v4)) {
		t.Errorf("NeedsApply = false after the record grew behind the Applier's back")
	}
	f.apply(a, v4)
	f.gone(f.ns, "extra")
	if got, want := f.recordedObjects(v4.Name), []AppliedObject{f.recorded(f.ns, "web")}; !slices.Equal(got, want) {
		t.Errorf("record after the next Apply = %+v, want %+v", got, want)
	}
	if _, gen := f.recordMark(v4.Name); gen != "4" {
		t.Errorf("record mark generation after the next Apply = %q, want 4", gen)
	}
}

// TestDeleteAndPruneForgetRestoredWorks shows that the drift record a
// first load restores does not outlive a Delete, Prune or Forget that
// runs first: Applied never lists a Work whose record they removed.
func TestDeleteAndPruneForgetRestoredWorks(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	works := map[string]*v1alpha1.Work{}
	for _, app := range []string{"del", "pruned", "kept", "forgot"} {
		works[app] = newWork(t, f.work(app), 1, deployment(f.ns, app, "x:1", 1))
		f.apply(a, works[app])
	}

	// New Appliers that load lazily: the first call loads the records.
	deleter := f.recordingApplier(Options{})
	if _, err := deleter.Delete(f.ctx, works["del"].Name); err != nil {
		t.Fatalf("deleting: %v", err)
	}
	if slices.ContainsFunc(deleter.Applied(), func(w AppliedWork) bool { return w.Name == works["del"].Name }) {
		t.Errorf("Applied() after Delete lists the deleted Work: %+v", deleter.Applied())
	}

	forgetter := f.recordingApplier(Options{})
	if err := forgetter.Forget(f.ctx, works["forgot"].Name); err != nil {
		t.Fatalf("forgetting: %v", err)
	}
	if slices.ContainsFunc(forgetter.Applied(), func(w AppliedWork) bool { return w.Name == works["forgot"].Name }) {
		t.Errorf("Applied() after Forget lists the forgotten Work: %+v", forgetter.Applied())
	}

	pruner := f.recordingApplier(Options{})
	if _, err := pruner.Prune(f.ctx, sets.New(works["kept"].Name), true); err != nil {
		t.Fatalf("pruning: %v", err)
	}
	want := []AppliedWork{{Name: works["kept"].Name, UID: works["kept"].UID, Generation: 1}}
	if got := pruner.Applied(); !slices.Equal(got, want) {
		t.Errorf("Applied() after a first-use Prune = %+v, want only the kept Work %+v", got, want)
	}
	f.gone(f.ns, "pruned")
	f.gone(f.ns, "del")
}
