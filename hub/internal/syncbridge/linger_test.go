package syncbridge

import (
	"context"
	"testing"
	"time"
)

// TestStatusWriterLingerCoalescesAWorksReports: reports of one Work that
// arrive within the linger cost one write, of the latest report, while
// Notify is told of the first at once; another Work's report is written
// on its own. With a negative linger a report is written at once: one
// arriving while that write is in flight is written after it.
func TestStatusWriterLingerCoalescesAWorksReports(t *testing.T) {
	t.Run("linger", func(t *testing.T) {
		// Long enough that three calls in a row fall within it on any
		// machine; the test waits for the write, never for the time.
		f := newTrustFixtureWith(t, func(w *StatusWriter) { w.Linger = 2 * time.Second }, "old", "e", "other")
		f.inf.deliver("100")
		n := notified(make(chan string, 16))
		f.w.Notify = n.notify
		api := f.api.(*failingPatches)

		for _, msg := range []string{"one", "two", "three"} {
			f.w.WorkStatus(context.Background(), trustCluster, "e", reportOf(msg))
		}
		n.expect(t, "e", "the first report, at once")
		f.w.WorkStatus(context.Background(), trustCluster, "other", reportOf("four"))
		f.poll("the writer idle after the reports", f.w.Idle)
		if got := f.stored("e").Conditions[0].Message; got != "three" {
			t.Errorf("Work e holds %q, want the latest report %q", got, "three")
		}
		if got := f.stored("other").Conditions[0].Message; got != "four" {
			t.Errorf("Work other holds %q, want %q", got, "four")
		}
		if got := api.written.Load(); got != 2 {
			t.Errorf("%d status writes for three reports of one Work and one of another, want 2", got)
		}
	})
	t.Run("negative writes at once", func(t *testing.T) {
		f := newTrustFixtureWith(t, func(w *StatusWriter) { w.Linger = -1 }, "old", "e")
		f.inf.deliver("100")
		api := f.api.(*failingPatches)

		release := api.Hold()
		f.w.WorkStatus(context.Background(), trustCluster, "e", reportOf("one"))
		select {
		case <-api.Held():
		case <-time.After(10 * time.Second):
			t.Fatal("the writer did not start the write of the first report within 10s")
		}
		f.w.WorkStatus(context.Background(), trustCluster, "e", reportOf("two"))
		release()
		f.poll("the writer idle after the reports", f.w.Idle)
		if got := f.stored("e").Conditions[0].Message; got != "two" {
			t.Errorf("Work e holds %q, want %q", got, "two")
		}
		if got := api.written.Load(); got != 2 {
			t.Errorf("%d status writes, want 2: the first at once, the second after it", got)
		}
	})
}
