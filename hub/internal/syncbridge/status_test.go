package syncbridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

func sized(msg string) *flotillav1.WorkStatus {
	return &flotillav1.WorkStatus{Conditions: []metav1.Condition{{Type: "Applied", Status: "True", Reason: "Applied", Message: msg}}}
}

// TestStatusWriterPendingBound: the latest report per Work replaces the
// pending one; a new Work beyond a cluster's byte bound is dropped; one
// cluster's full buffer does not refuse another cluster's reports.
func TestStatusWriterPendingBound(t *testing.T) {
	one := statusSize(sized(strings.Repeat("x", 100)))
	w := &StatusWriter{MaxPendingBytes: 3 * one}
	ctx := context.Background()
	for i := range 5 {
		w.WorkStatus(ctx, "noisy", fmt.Sprintf("work-%d", i), sized(strings.Repeat("x", 100)))
	}
	// Latest wins for a Work that waits, within the bound.
	w.WorkStatus(ctx, "noisy", "work-0", sized(strings.Repeat("y", 100)))
	w.WorkStatus(ctx, "quiet", "work-0", sized("fine"))

	key := func(cluster, name string) client.ObjectKey {
		return client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}
	}
	for i := range 5 {
		_, ok := w.pending[key("noisy", fmt.Sprintf("work-%d", i))]
		if want := i < 3; ok != want {
			t.Errorf("noisy work-%d pending %v, want %v", i, ok, want)
		}
	}
	if got := w.pending[key("noisy", "work-0")].status.Conditions[0].Message; !strings.HasPrefix(got, "y") {
		t.Errorf("work-0's pending report is not the latest: %q", got)
	}
	if w.pendingBytes["noisy"] != 3*one {
		t.Errorf("noisy has %d pending bytes, want %d", w.pendingBytes["noisy"], 3*one)
	}
	if _, ok := w.pending[key("quiet", "work-0")]; !ok {
		t.Error("another cluster's report was refused")
	}
	// A replacement that would pass the bound is dropped; the older one
	// stays.
	w.WorkStatus(ctx, "noisy", "work-1", sized(strings.Repeat("z", 1000)))
	if got := w.pending[key("noisy", "work-1")].status.Conditions[0].Message; !strings.HasPrefix(got, "x") {
		t.Errorf("an oversized replacement was taken: %q", got[:1])
	}
	// Taking a report frees its bytes.
	if p := w.takePending(key("noisy", "work-2")); p == nil {
		t.Fatal("work-2 not pending")
	}
	w.WorkStatus(ctx, "noisy", "work-4", sized(strings.Repeat("x", 100)))
	if _, ok := w.pending[key("noisy", "work-4")]; !ok {
		t.Error("a report was refused after room was made")
	}
}

func TestRejected(t *testing.T) {
	gr := schema.GroupResource{Group: "flotilla.dev", Resource: "works"}
	tests := []struct {
		err  error
		want bool
	}{
		{apierrors.NewInvalid(schema.GroupKind{Group: "flotilla.dev", Kind: "Work"}, "w", nil), true},
		{apierrors.NewBadRequest("no"), true},
		{apierrors.NewForbidden(gr, "w", errors.New("no")), true},
		{apierrors.NewRequestEntityTooLargeError("too large"), true},
		{apierrors.NewConflict(gr, "w", errors.New("conflict")), false},
		{apierrors.NewTooManyRequests("slow down", 1), false},
		{apierrors.NewInternalError(errors.New("boom")), false},
		{apierrors.NewServiceUnavailable("later"), false},
		{errors.New("connection refused"), false},
		{fmt.Errorf("wrapped: %w", apierrors.NewBadRequest("no")), true},
	}
	for _, tt := range tests {
		if got := rejected(tt.err); got != tt.want {
			t.Errorf("rejected(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// trustFixture is a StatusWriter over a fake apiserver (api) and a fake
// cache (cached, which may lag behind api), with an informer whose events
// the test delivers.
type trustFixture struct {
	t           *testing.T
	api, cached client.Client
	inf         *fakeInformer
	w           *StatusWriter
	old         metav1.Time
}

// rvReader answers a list with the resourceVersion a consistent list
// returns, and every Get from r.
type rvReader struct {
	client.Reader
	rv string
}

func (r rvReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(metav1.ListInterface).SetResourceVersion(r.rv)
	return nil
}

// fakeInformer hands its one handler to the test.
type fakeInformer struct {
	cache.Informer
	mu      sync.Mutex
	handler toolscache.ResourceEventHandler
}

func (f *fakeInformer) GetInformer(context.Context, client.Object, ...cache.InformerGetOption) (cache.Informer, error) {
	return f, nil
}

func (f *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handler = h
	return nil, nil
}

func (f *fakeInformer) RemoveEventHandler(toolscache.ResourceEventHandlerRegistration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handler = nil
	return nil
}

// deliver sends an update of a Work at resourceVersion rv.
func (f *fakeInformer) deliver(rv string) {
	f.mu.Lock()
	h := f.handler
	f.mu.Unlock()
	w := &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{Name: "any", ResourceVersion: rv}}
	h.OnUpdate(w, w)
}

// failingPatches applies a status patch and then fails it, as a timeout
// after the apiserver wrote, while fail is set; refuses it as Invalid,
// as the apiserver refuses a status its schema does not allow, while
// reject is set; and holds it while its Gate is held.
type failingPatches struct {
	client.Client
	testutil.Gate
	fail   atomic.Bool
	reject atomic.Bool
	// written counts the status patches the apiserver took.
	written atomic.Int32
}

func (f *failingPatches) Status() client.SubResourceWriter {
	return failingStatus{f.Client.Status(), f}
}

type failingStatus struct {
	client.SubResourceWriter
	f *failingPatches
}

func (s failingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.f.Pass(ctx); err != nil {
		return err
	}
	if s.f.reject.Load() {
		return apierrors.NewInvalid(flotillav1.GroupVersion.WithKind("Work").GroupKind(), obj.GetName(),
			field.ErrorList{field.Invalid(field.NewPath("status", "conditions"), "", "refused by the test")})
	}
	if err := s.SubResourceWriter.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	s.f.written.Add(1)
	if s.f.fail.Load() {
		return apierrors.NewTimeoutError("the write may have happened", 1)
	}
	return nil
}

const trustCluster = "member-1"

func reportOf(msg string) *flotillav1.WorkStatus {
	return &flotillav1.WorkStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{{
		Type: flotillav1.ConditionApplied, Status: metav1.ConditionTrue, Reason: "Applied", Message: msg,
		LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}}
}

// newTrustFixture stores works, each with the status reportOf(msg) as a
// writer wrote it long ago, in both the fake apiserver and the fake cache,
// and starts a writer at resourceVersion 100.
func newTrustFixture(t *testing.T, msg string, works ...string) *trustFixture {
	t.Helper()
	return newTrustFixtureWith(t, nil, msg, works...)
}

// newTrustFixtureWith is newTrustFixture whose writer set changes before
// it starts.
func newTrustFixtureWith(t *testing.T, set func(*StatusWriter), msg string, works ...string) *trustFixture {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	f := &trustFixture{t: t, inf: &fakeInformer{}, old: metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))}
	objs := func() []client.Object {
		var out []client.Object
		for _, name := range works {
			st := reportOf(msg)
			st.LastReportTime = &f.old
			out = append(out, &flotillav1.Work{
				ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.ClusterNamespace(trustCluster), Name: name, UID: types.UID("uid-" + name)},
				Status:     *st})
		}
		return out
	}
	build := func() client.Client {
		return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs()...).WithStatusSubresource(&flotillav1.Work{}).Build()
	}
	f.api, f.cached = &failingPatches{Client: build()}, build()
	f.w = &StatusWriter{Client: f.api, Reader: f.cached, APIReader: rvReader{f.api, "100"}, Informers: f.inf, Workers: 1}
	if set != nil {
		set(f.w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.w.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	f.poll("the writer registered its Work handler", func() bool {
		f.inf.mu.Lock()
		defer f.inf.mu.Unlock()
		return f.inf.handler != nil
	})
	return f
}

func (f *trustFixture) poll(what string, ok func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			f.t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// report hands the writer a report for work and waits until it is done
// with it.
func (f *trustFixture) report(work string, st *flotillav1.WorkStatus) {
	f.t.Helper()
	f.w.WorkStatus(context.Background(), trustCluster, work, st)
	f.poll("the writer idle after a report for "+work, f.w.Idle)
}

// stored is work's status in the fake apiserver.
func (f *trustFixture) stored(work string) *flotillav1.WorkStatus {
	f.t.Helper()
	return &f.get(f.api, work).Status
}

func (f *trustFixture) rewritten(work string) bool {
	return !f.stored(work).LastReportTime.Equal(&f.old)
}

// TestStatusWriterSkipsUnchangedReportsOnlyOnceTheCacheIsPastItsStart: a
// writer that just started writes even a report equal to the cached
// status (the cache may not hold an earlier leader's last writes), until
// its Work informer shows a Work at or past the resourceVersion it started
// at; from then on an unchanged report is not written, and a changed one
// is.
func TestStatusWriterSkipsUnchangedReportsOnlyOnceTheCacheIsPastItsStart(t *testing.T) {
	f := newTrustFixture(t, "ok", "a", "b", "c")
	f.report("a", reportOf("ok"))
	if !f.rewritten("a") {
		t.Error("a report was skipped against a cache not known to be fresh")
	}
	f.inf.deliver("99")
	f.report("b", reportOf("ok"))
	if !f.rewritten("b") {
		t.Error("a report was skipped against a cache that showed only a resourceVersion before the writer's start")
	}
	if f.w.cacheTrusted.Load() {
		t.Fatal("the cache is trusted after an event before the writer's start")
	}
	f.inf.deliver("100")
	f.report("c", reportOf("ok"))
	if f.rewritten("c") {
		t.Errorf("an unchanged report was written once the cache was fresh: %+v", f.stored("c"))
	}
	f.report("c", reportOf("changed"))
	if got := f.stored("c").Conditions[0].Message; got != "changed" || !f.rewritten("c") {
		t.Errorf("a changed report was not written: message %q", got)
	}
}

// TestStatusWriterAsksNoCacheAfterAWriteOfUnknownOutcome: a write that
// failed may have happened (a timeout); the cache, which may not show it
// yet, is then not asked: a later report equal to the cached (stale)
// status is written.
func TestStatusWriterAsksNoCacheAfterAWriteOfUnknownOutcome(t *testing.T) {
	f := newTrustFixture(t, "old", "d")
	f.inf.deliver("100")
	api := f.api.(*failingPatches)
	api.fail.Store(true)
	f.w.WorkStatus(context.Background(), trustCluster, "d", reportOf("new"))
	f.poll("the failed write of d applied", func() bool { return f.stored("d").Conditions[0].Message == "new" })
	api.fail.Store(false)
	// The cache still shows "old", and the agent now reports "old" again.
	f.report("d", reportOf("old"))
	if got := f.stored("d").Conditions[0].Message; got != "old" {
		t.Errorf("the report equal to the stale cache was not written: the apiserver keeps %q", got)
	}
}
