package setup

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/works"
)

// TestStreamWatchReportsAutonomy walks the leader's stream watch through
// the states the sync client reports and checks what it logs and what the
// hub-stream check answers: no stream since the start, then up, then down
// (autonomy, once, after the threshold), refused either way (unready, no
// autonomy claimed), and back.
func TestStreamWatchReportsAutonomy(t *testing.T) {
	var mu sync.Mutex
	st := syncclient.State{}
	set := func(s syncclient.State) { mu.Lock(); st = s; mu.Unlock() }
	logs := &testutil.LogBuffer{}
	rec := &standDownRecorder{Store: works.NewStore(nil)}
	w := newStreamWatch(func() syncclient.State { mu.Lock(); defer mu.Unlock(); return st }, rec, "hub.example:9443", logs.Logger())
	count := func(s string) int { return strings.Count(logs.String(), s) }
	ready := func(when string) {
		t.Helper()
		if err := w.check(); err != nil {
			t.Errorf("%s: hub-stream check failed: %v", when, err)
		}
	}

	t0 := time.Now()
	w.downSince = t0
	w.observe(t0.Add(w.after / 2))
	if count("autonomously") != 0 {
		t.Errorf("autonomy reported before the stream was down for %s:\n%s", w.after, logs)
	}
	ready("waiting for the first stream")
	w.observe(t0.Add(w.after))
	if count("no stream to the hub since this agent became leader: running autonomously") != 1 {
		t.Errorf("want one report of autonomy without a first stream:\n%s", logs)
	}
	ready("autonomous without a first stream")

	set(syncclient.State{Connected: true})
	t1 := t0.Add(2 * w.after)
	w.observe(t1)
	if count("autonomy ended") != 1 {
		t.Errorf("want autonomy reported ended once the stream is up:\n%s", logs)
	}
	ready("connected")

	set(syncclient.State{})
	for _, d := range []time.Duration{time.Second, w.after, w.after + time.Second, 2 * w.after} {
		w.observe(t1.Add(d))
	}
	if n := count("the hub is unreachable: running autonomously"); n != 1 {
		t.Errorf("want the hub's loss reported once, got %d:\n%s", n, logs)
	}
	ready("autonomous")

	// The agent refuses the hub: unready, naming the reason.
	set(syncclient.State{Refusal: "the hub serves fleet B; this agent serves fleet A"})
	if err := w.check(); err == nil || !strings.Contains(err.Error(), "refused the hub at hub.example:9443: the hub serves fleet B") {
		t.Errorf("hub-stream check of an agent that refused its hub: %v", err)
	}

	// The hub refuses the agent: it stands down, unready, and claims no
	// autonomy however long it lasts.
	set(syncclient.State{Connected: true})
	w.observe(t1.Add(3 * w.after))
	set(syncclient.State{})
	rec.StandDown(context.Background())
	before := count("autonomously")
	w.observe(t1.Add(4 * w.after))
	w.observe(t1.Add(6 * w.after))
	if count("autonomously") != before {
		t.Errorf("autonomy claimed by an agent the hub refused:\n%s", logs)
	}
	if err := w.check(); err == nil || !strings.Contains(err.Error(), "refused this agent") || !strings.Contains(err.Error(), "stood down") {
		t.Errorf("hub-stream check of an agent the hub refused: %v", err)
	}
	// Accepted again: ready.
	set(syncclient.State{Connected: true})
	w.observe(t1.Add(7 * w.after))
	set(syncclient.State{})
	ready("accepted again, then reconnecting")
}
