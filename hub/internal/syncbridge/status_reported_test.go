package syncbridge

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// notified collects the Works the writer tells Notify of.
type notified chan string

func (n notified) notify(work *flotillav1.Work) {
	select {
	case n <- work.Name:
	default:
	}
}

// expect waits for Notify to be told of work.
func (n notified) expect(t *testing.T, work, why string) {
	t.Helper()
	select {
	case got := <-n:
		if got != work {
			t.Fatalf("Notify was told of %s, want %s (%s)", got, work, why)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Notify was not told of %s within 10s (%s)", work, why)
	}
}

// none checks Notify is told of nothing for a while.
func (n notified) none(t *testing.T, why string) {
	t.Helper()
	select {
	case got := <-n:
		t.Fatalf("Notify was told of %s (%s)", got, why)
	case <-time.After(100 * time.Millisecond):
	}
}

// get is work as r (the fixture's api or cache) holds it.
func (f *trustFixture) get(r client.Reader, work string) *flotillav1.Work {
	f.t.Helper()
	got := &flotillav1.Work{}
	if err := r.Get(context.Background(), client.ObjectKey{Namespace: flotillav1.ClusterNamespace(trustCluster), Name: work}, got); err != nil {
		f.t.Fatal(err)
	}
	return got
}

// cachedWork is work as the fixture's cache holds it.
func (f *trustFixture) cachedWork(work string) *flotillav1.Work { return f.get(f.cached, work) }

// live is work as the apiserver holds it: the cache once it caught up.
func (f *trustFixture) live(work string) *flotillav1.Work { return f.get(f.api, work) }

// reportedMessage is the message of the first condition Reported gives
// for work, "" for none.
func (f *trustFixture) reportedMessage(work string) string {
	return f.reportedFor(f.cachedWork(work))
}

// reportedFor is reportedMessage for the cache holding w.
func (f *trustFixture) reportedFor(w *flotillav1.Work) string {
	st := f.w.Reported(w)
	if st == nil {
		return ""
	}
	return st.Conditions[0].Message
}

// TestStatusWriterReportedRunsAheadOfTheWrite: what Reported gives is the
// status the writer is about to write, from the report's arrival until
// the cache shows the write, and never a report the apiserver refused;
// Notify is told of each report that changes a Work's status, and of a
// refused one again once it is dropped.
func TestStatusWriterReportedRunsAheadOfTheWrite(t *testing.T) {
	f := newTrustFixture(t, "old", "e", "other")
	f.inf.deliver("100")
	n := notified(make(chan string, 16))
	f.w.Notify = n.notify
	api := f.api.(*failingPatches)

	if got := f.reportedMessage("e"); got != "" {
		t.Fatalf("Reported gives %q for a Work with no report", got)
	}

	// A changed report, its write held: Reported gives it at once.
	release := api.Hold()
	f.w.WorkStatus(context.Background(), trustCluster, "e", reportOf("new"))
	n.expect(t, "e", "a report that changes the status")
	select {
	case <-api.Held():
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not start the status write of e within 10s")
	}
	if got := f.reportedMessage("e"); got != "new" {
		t.Fatalf("Reported gives %q while the write of the report %q is in flight", got, "new")
	}
	if got := f.stored("e").Conditions[0].Message; got != "old" {
		t.Fatalf("the apiserver holds %q before the held write", got)
	}
	if got := f.reportedMessage("other"); got != "" {
		t.Errorf("Reported gives %q for another Work", got)
	}

	// Written, but the cache has not seen it: still the report.
	release()
	f.poll("the writer idle after the released write", f.w.Idle)
	if got := f.stored("e").Conditions[0].Message; got != "new" {
		t.Fatalf("the apiserver holds %q after the write", got)
	}
	if got := f.reportedMessage("e"); got != "new" {
		t.Fatalf("Reported gives %q after the write, with the cache behind it", got)
	}
	// The cache caught up: nothing ahead of it.
	if got := f.reportedFor(f.live("e")); got != "" {
		t.Fatalf("Reported gives %q once the cache holds the write", got)
	}

	// The same report again changes nothing: Notify is not told.
	f.report("e", reportOf("new"))
	n.none(t, "a report equal to the written status")

	// A report the apiserver refuses: shown while in flight, then dropped,
	// Notify told again, and the stored status is what Reported falls back
	// to (nil: the cache holds it).
	api.reject.Store(true)
	release = api.Hold()
	f.w.WorkStatus(context.Background(), trustCluster, "e", reportOf("refused"))
	n.expect(t, "e", "a report that changes the status")
	<-api.Held()
	if got := f.reportedMessage("e"); got != "refused" {
		t.Fatalf("Reported gives %q while the refused report is in flight", got)
	}
	release()
	n.expect(t, "e", "the refused report dropped")
	f.poll("the writer idle after the refused write", f.w.Idle)
	if got := f.reportedFor(f.live("e")); got != "" {
		t.Fatalf("Reported gives %q after the apiserver refused it", got)
	}
	if got := f.stored("e").Conditions[0].Message; got != "new" {
		t.Fatalf("the apiserver holds %q after a refused write", got)
	}
}
