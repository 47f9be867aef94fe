package client

import (
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestBackoff(t *testing.T) {
	initial, maxDelay := 100*time.Millisecond, 3*time.Second
	for attempt := range 12 {
		want := min(initial<<attempt, maxDelay)
		for range 50 {
			d := backoff(attempt, initial, maxDelay)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", attempt, d, want/2, want)
			}
		}
	}
	// Very many failures must not overflow into a negative wait.
	if d := backoff(1000, initial, maxDelay); d < maxDelay/2 || d > maxDelay {
		t.Errorf("backoff(1000) = %s", d)
	}
}

func TestStatusQueueCoalescesAndResends(t *testing.T) {
	q := newStatusQueue()
	q.report("a", &v1alpha1.WorkStatus{ObservedGeneration: 1})
	q.report("b", &v1alpha1.WorkStatus{ObservedGeneration: 1})
	q.report("a", &v1alpha1.WorkStatus{ObservedGeneration: 2})

	got := drain(q)
	if len(got) != 2 || got["a"] != 2 || got["b"] != 1 {
		t.Fatalf("sent %v, want a at 2 (latest wins) and b at 1, once each", got)
	}
	if got := drain(q); len(got) != 0 {
		t.Fatalf("sent %v again without a new stream", got)
	}

	q.resendAll()
	if got := drain(q); len(got) != 2 {
		t.Fatalf("after resendAll sent %v, want both again", got)
	}

	q.keepOnly([]string{"b"})
	q.forget("b")
	q.resendAll()
	if got := drain(q); len(got) != 0 {
		t.Fatalf("sent %v for forgotten Works", got)
	}
}

func drain(q *statusQueue) map[string]int64 {
	out := map[string]int64{}
	for {
		name, st, ok := q.pop()
		if !ok {
			return out
		}
		if _, dup := out[name]; dup {
			out[name] = -1 // Sent twice in one drain: coalescing failed.
			continue
		}
		out[name] = st.ObservedGeneration
	}
}

func TestRetriesKeepOnlyDropsApplies(t *testing.T) {
	r := newRetries(time.Millisecond, time.Second)
	r.add("keep", retry{work: &v1alpha1.Work{}})
	r.add("drop", retry{work: &v1alpha1.Work{}})
	r.add("gone", retry{delete: true})
	r.keepOnly([]string{"keep"})
	if _, ok := r.items["drop"]; ok {
		t.Error("an apply retry of a Work no longer wanted survived the snapshot")
	}
	if _, ok := r.items["keep"]; !ok {
		t.Error("an apply retry of a wanted Work was dropped")
	}
	if _, ok := r.items["gone"]; !ok {
		t.Error("a delete retry was dropped")
	}
	if tm := r.timer(); tm == nil {
		t.Error("no timer with retries pending")
	}
	r.stop()
}
