package client

import (
	"errors"
	"strings"
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

func TestDecideIdentity(t *testing.T) {
	a := FleetRecord{FleetID: "fleet-a", Cluster: "east"}
	tests := []struct {
		name      string
		recorded  *FleetRecord
		offered   FleetRecord
		accept    string
		wantWrite bool
		wantErr   string
	}{
		{name: "first hub is recorded", offered: a, wantWrite: true},
		{name: "same hub", recorded: &a, offered: a},
		{name: "same hub, stale accept", recorded: &a, offered: a, accept: "fleet-b"},
		{name: "another fleet is refused", recorded: &a, offered: FleetRecord{FleetID: "fleet-b", Cluster: "east"}, wantErr: "serves fleet fleet-a, not the hub's fleet fleet-b"},
		{name: "another fleet accepted on purpose", recorded: &a, offered: FleetRecord{FleetID: "fleet-b", Cluster: "east"}, accept: "fleet-b", wantWrite: true},
		{name: "accepting a third fleet does not accept this one", recorded: &a, offered: FleetRecord{FleetID: "fleet-b", Cluster: "east"}, accept: "fleet-c", wantErr: "--accept-fleet-id=fleet-b"},
		{name: "another cluster name is refused", recorded: &a, offered: FleetRecord{FleetID: "fleet-a", Cluster: "west"}, wantErr: `serves cluster "east" of fleet fleet-a, but the hub takes it for cluster "west"`},
		{name: "a rename accepted on purpose", recorded: &a, offered: FleetRecord{FleetID: "fleet-a", Cluster: "west"}, accept: "fleet-a", wantWrite: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write, err := DecideIdentity(tt.recorded, tt.offered, tt.accept)
			if write != tt.wantWrite {
				t.Errorf("write = %v, want %v", write, tt.wantWrite)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tt.wantErr != "":
				var m *FleetMismatchError
				if !errors.As(err, &m) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want a FleetMismatchError containing %q", err, tt.wantErr)
				}
			}
		})
	}
}
