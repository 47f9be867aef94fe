package sync_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
	"github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// quiet is how long the tests below watch for a WorkGone that must not
// come. It bounds a negative check only: a slow machine makes it weaker,
// never makes a test fail.
const quiet = 300 * time.Millisecond

// goneWatch checks, inside the DeletionSink's WorkGone, that the agent no
// longer holds the Work the hub hears is gone (and whatever also checks),
// and remembers every confirmation that came too early.
type goneWatch struct {
	applier atomic.Pointer[synctest.Applier]
	// also, when set (before watch), says why a WorkGone is too early, or
	// "" when it is not.
	also  func(cluster, name string) string
	mu    sync.Mutex
	early []string
}

// watch makes the sink check with w on every WorkGone for cluster.
func (w *goneWatch) watch(d *synctest.Deletions, cluster string) {
	d.OnGone(func(c, name string) {
		if c != cluster {
			return
		}
		if a := w.applier.Load(); a != nil {
			if _, held := a.HeldGenerations()[name]; held {
				w.add(fmt.Sprintf("%s/%s while the agent held it (log %q)", c, name, a.Log()))
			}
		}
		if w.also != nil {
			if why := w.also(c, name); why != "" {
				w.add(fmt.Sprintf("%s/%s %s", c, name, why))
			}
		}
	})
}

func (w *goneWatch) add(early string) {
	w.mu.Lock()
	w.early = append(w.early, early)
	w.mu.Unlock()
}

// check fails the test if a WorkGone reached the hub while the agent
// still held that Work.
func (w *goneWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.early) > 0 {
		t.Errorf("the hub heard WorkGone too early: %q", w.early)
	}
}

// goneContains waits until the sink heard every one of want.
func goneContains(t *testing.T, d *synctest.Deletions, what string, want ...string) {
	t.Helper()
	synctest.Eventually(t, wait, what, func() (bool, string) {
		calls := d.Calls()
		for _, w := range want {
			if !slices.Contains(calls, w) {
				return false, fmt.Sprintf("no WorkGone %s; the sink heard %q", w, calls)
			}
		}
		return true, ""
	})
}

// noGone checks, for quiet, that the sink hears nothing but allowed.
func noGone(t *testing.T, d *synctest.Deletions, what string, allowed ...string) {
	t.Helper()
	testutil.Consistently(t, what, quiet, func() error {
		for _, c := range d.Calls() {
			if !slices.Contains(allowed, c) {
				return fmt.Errorf("the sink heard %q", d.Calls())
			}
		}
		return nil
	}, testutil.Every(10*time.Millisecond))
}

// barrier changes Work name of cluster and waits until the agent applied
// it and its status reached the hub, so that what the agent sent before
// has had its way through the stream.
func barrier(t *testing.T, hub *synctest.Hub, agent *synctest.Agent, cluster, name string) {
	t.Helper()
	w := hub.Works.Put(cluster, name, 1)
	synctest.Eventually(t, wait, "the status of "+name+" reaching the hub", func() (bool, string) {
		st := hub.Sink.Status(cluster, name)
		return st != nil && st.ObservedGeneration == w.Generation, fmt.Sprintf("status %+v, want generation %d", st, w.Generation)
	})
}

// TestWorkGoneAfterAgentIsDone checks both ways a Work leaves a member
// over real gRPC: a Work deleted with the deletion-intent mark reaches the
// agent as WorkDelete and its Applier's Delete, one vanished without it as
// WorkOrphan and Orphan; either way the hub's DeletionSink hears exactly
// one WorkGone for that Work of that cluster, and none while the
// applier's call has not returned.
func TestWorkGoneAfterAgentIsDone(t *testing.T) {
	for _, tt := range []struct {
		name   string
		remove func(*synctest.Works, string, string)
		call   string // what the applier must do
		not    string // what it must not
	}{
		{name: "marked deletion is deleted", remove: (*synctest.Works).Delete, call: "delete", not: "orphan"},
		{name: "unmarked vanishing is orphaned", remove: (*synctest.Works).Vanish, call: "orphan", not: "delete"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.CheckGoroutines(t)
			p := synctest.NewPKI(t)
			gone := synctest.NewDeletions()
			hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.Deletions = gone })
			hub.Works.Put("east", "doomed", 1)
			hub.Works.Put("east", "kept", 1)
			agent := synctest.StartAgent(t, p, "east", hub.Addr, nil)
			var w goneWatch
			w.applier.Store(agent.Applier)
			w.watch(gone, "east")
			converged(t, hub, agent, "east")
			if c := gone.Calls(); len(c) != 0 {
				t.Fatalf("the sink heard %q before anything was deleted", c)
			}

			// The applier's call waits at the gate: the member is not done.
			agent.Applier.Stall()
			tt.remove(hub.Works, "east", "doomed")
			synctest.Eventually(t, wait, "the agent's "+tt.call+" of doomed waiting at the gate", func() (bool, string) {
				n := agent.Applier.Stalled()
				return n == 1, fmt.Sprintf("%d calls stalled", n)
			})
			noGone(t, gone, "no WorkGone while the agent's "+tt.call+" of doomed has not returned")
			if _, held := agent.Applier.HeldGenerations()["doomed"]; !held {
				t.Fatal("the agent let doomed go while its call was stalled")
			}

			agent.Applier.Release()
			goneContains(t, gone, "WorkGone(east, doomed) reaching the DeletionSink after the "+tt.call, "east/doomed")
			log := agent.Applier.Log()
			if !slices.Contains(log, tt.call+" doomed") || slices.Contains(log, tt.not+" doomed") {
				t.Errorf("applier log %q: want %q and no %q", log, tt.call+" doomed", tt.not+" doomed")
			}

			// Nothing more comes for doomed, nor for a Work that stays.
			barrier(t, hub, agent, "east", "after")
			if c := gone.Calls(); !slices.Equal(c, []string{"east/doomed"}) {
				t.Errorf("the sink heard %q, want exactly [east/doomed]", c)
			}
			w.check(t)
			if n := agent.Client.State().Connects; n != 1 {
				t.Errorf("connected %d times; the confirmation should come on the same stream", n)
			}
		})
	}
}

// TestWorkGoneAfterDeleteRetrySucceeds makes the agent's Delete fail and
// be retried: the hub hears WorkGone only once a retry succeeded, on the
// same stream, and only once.
func TestWorkGoneAfterDeleteRetrySucceeds(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	gone := synctest.NewDeletions()
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.Deletions = gone })
	hub.Works.Put("east", "doomed", 1)
	hub.Works.Put("east", "kept", 1)
	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) { c.MaxApplyBackoff = 20 * time.Millisecond })
	var w goneWatch
	w.applier.Store(agent.Applier)
	w.watch(gone, "east")
	converged(t, hub, agent, "east")

	agent.Applier.FailDeletes(true)
	hub.Works.Delete("east", "doomed")
	synctest.Eventually(t, wait, "the first Delete of doomed and two retries failing", func() (bool, string) {
		n := agent.Applier.DeleteFailures()
		return n >= 3, fmt.Sprintf("%d failed Deletes", n)
	})
	noGone(t, gone, "no WorkGone while every Delete of doomed fails")
	if _, d, _ := agent.Applier.Counts(); d != 0 {
		t.Fatalf("%d Deletes went through while they were made to fail", d)
	}

	agent.Applier.FailDeletes(false)
	goneContains(t, gone, "WorkGone(east, doomed) after a retried Delete succeeded", "east/doomed")
	barrier(t, hub, agent, "east", "after")
	if c := gone.Calls(); !slices.Equal(c, []string{"east/doomed"}) {
		t.Errorf("the sink heard %q, want exactly [east/doomed]", c)
	}
	if _, d, _ := agent.Applier.Counts(); d != 1 {
		t.Errorf("%d Deletes went through, want 1", d)
	}
	w.check(t)
	if n := agent.Client.State().Connects; n != 1 {
		t.Errorf("connected %d times; the retry (and its WorkGone) should run on the same stream", n)
	}
}

// TestHelloConfirmsTerminatingWorksNotHeld checks the confirmations that
// follow an agent's hello. Three Works of its cluster are being deleted
// (held by their finalizer): t1, which the agent does not hold, is
// confirmed at once, before the agent has applied or pruned anything; t2
// (marked) and t3 (unmarked), which it holds, only once the agent's prune
// and orphan are done.
func TestHelloConfirmsTerminatingWorksNotHeld(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	gone := synctest.NewDeletions()
	var term *synctest.Terminating
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) {
		term = synctest.NewTerminating(c.Works.(*synctest.Works))
		c.Works = term
		c.Deletions = gone
	})
	keep := hub.Works.Put("east", "keep", 1)
	held := map[string]*v1alpha1.Work{}
	for _, n := range []string{"t1", "t2", "t3"} {
		held[n] = hub.Works.Put("east", n, 1)
	}
	hub.Works.Delete("east", "t1")
	hub.Works.Delete("east", "t2")
	hub.Works.Vanish("east", "t3")
	term.SetTerminating("east", "t1", "t2", "t3")

	var w goneWatch
	w.watch(gone, "east")
	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		a := c.Applier.(*synctest.Applier)
		a.Seed(keep)
		a.Seed(held["t2"])
		a.Seed(held["t3"])
		// Every applier call waits until the test releases it.
		a.Stall()
		w.applier.Store(a)
	})

	goneContains(t, gone, "WorkGone(east, t1) right after the hello", "east/t1")
	synctest.Eventually(t, wait, "the agent's first call after the snapshot waiting at the gate", func() (bool, string) {
		n := agent.Applier.Stalled()
		return n == 1, fmt.Sprintf("%d calls stalled", n)
	})
	noGone(t, gone, "no WorkGone but t1's while the agent's applier is stalled", "east/t1")
	if h := agent.Applier.HeldGenerations(); len(h) != 3 {
		t.Fatalf("the agent holds %v while stalled, want keep, t2 and t3", h)
	}

	agent.Applier.Release()
	goneContains(t, gone, "WorkGone for t2 (pruned) and t3 (orphaned) once the agent is done", "east/t2", "east/t3")
	converged(t, hub, agent, "east")
	barrier(t, hub, agent, "east", "after")
	calls := gone.Calls()
	if calls[0] != "east/t1" {
		t.Errorf("the sink heard %q; t1 should come first, before the agent did anything", calls)
	}
	if slices.Sort(calls); !slices.Equal(calls, []string{"east/t1", "east/t2", "east/t3"}) {
		t.Errorf("the sink heard %q, want t1, t2 and t3 once each (and never keep)", calls)
	}
	log := agent.Applier.Log()
	if !slices.Contains(log, "orphan t3") || slices.Contains(log, "delete t3") {
		t.Errorf("applier log %q: t3 vanished without the mark and must be orphaned, not deleted", log)
	}
	w.check(t)
}

// TestSnapshotPruneConfirmsPrunedWorks checks the confirmations that
// follow a snapshot's prune: the agent holds Works the snapshot leaves
// out, and the hub hears WorkGone for those (never for one kept) once the
// agent reports SnapshotPruned; while the deletion brake holds the prune,
// nothing, until an admin confirms it.
func TestSnapshotPruneConfirmsPrunedWorks(t *testing.T) {
	t.Run("prune within the brake", func(t *testing.T) {
		synctest.CheckGoroutines(t)
		p := synctest.NewPKI(t)
		gone := synctest.NewDeletions()
		hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.Deletions = gone })
		a := hub.Works.Put("east", "a", 1)
		b := hub.Works.Put("east", "b", 1)
		hub.Works.Delete("east", "b") // while the agent is away
		w := goneWatch{also: prunedFirst(hub, "pruned east confirmed=false")}
		w.watch(gone, "east")
		agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
			ap := c.Applier.(*synctest.Applier)
			ap.Seed(a)
			ap.Seed(b)
			w.applier.Store(ap)
		})
		goneContains(t, gone, "WorkGone(east, b) after the snapshot's prune", "east/b")
		converged(t, hub, agent, "east")
		barrier(t, hub, agent, "east", "after")
		if c := gone.Calls(); !slices.Equal(c, []string{"east/b"}) {
			t.Errorf("the sink heard %q, want exactly [east/b]: a is kept", c)
		}
		w.check(t)
	})

	t.Run("prune held by the brake until confirmed", func(t *testing.T) {
		synctest.CheckGoroutines(t)
		p := synctest.NewPKI(t)
		gone := synctest.NewDeletions()
		hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.Deletions = gone })
		a := hub.Works.Put("east", "a", 1)
		var seeds []*v1alpha1.Work
		for _, n := range []string{"b", "c", "d"} {
			seeds = append(seeds, hub.Works.Put("east", n, 1))
			hub.Works.Delete("east", n)
		}
		w := goneWatch{also: prunedFirst(hub, "pruned east confirmed=true")}
		w.watch(gone, "east")
		agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
			ap := c.Applier.(*synctest.Applier)
			ap.Brake(2)
			ap.Seed(a)
			for _, s := range seeds {
				ap.Seed(s)
			}
			w.applier.Store(ap)
		})
		synctest.Eventually(t, wait, "the hub hearing of the held prune", func() (bool, string) {
			b, ok := hub.Sink.PruneBlocked("east")
			return ok, fmt.Sprintf("%+v, %v", b, ok)
		})
		// What the agent sent before a later status has reached the hub.
		barrier(t, hub, agent, "east", "e")
		noGone(t, gone, "no WorkGone while the brake holds the prune")
		if h := agent.Applier.HeldGenerations(); len(h) != 5 {
			t.Fatalf("the agent holds %v; the brake should have kept everything", h)
		}

		blocked, _ := hub.Sink.PruneBlocked("east")
		if !hub.Server.ConfirmPrune("east", blocked.Epoch) {
			t.Fatal("the confirmation for the held epoch was not sent")
		}
		goneContains(t, gone, "WorkGone for b, c and d after the confirmed prune", "east/b", "east/c", "east/d")
		converged(t, hub, agent, "east")
		barrier(t, hub, agent, "east", "after")
		calls := gone.Calls()
		if slices.Sort(calls); !slices.Equal(calls, []string{"east/b", "east/c", "east/d"}) {
			t.Errorf("the sink heard %q, want b, c and d once each (a and e are kept)", calls)
		}
		w.check(t)
	})
}

// TestWorkGoneInvalidNameEndsOnlyThatStream sends WorkGone with names that
// are not Work names: each ends that stream with INVALID_ARGUMENT and the
// sink hears nothing, while another cluster's agent goes on and its
// confirmation arrives. A valid WorkGone reaches the sink with the cluster
// the certificate names, whatever Work it names: an agent cannot confirm
// another cluster's Work.
func TestWorkGoneInvalidNameEndsOnlyThatStream(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	gone := synctest.NewDeletions()
	hub := synctest.StartHub(t, p, []string{"east", "west"}, func(c *server.Config) { c.Deletions = gone })
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("east", "e-1", 1)
	healthy := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, healthy, "east")

	workGone := func(name string) *syncv1.AgentMessage {
		return &syncv1.AgentMessage{Kind: &syncv1.AgentMessage_WorkGone{WorkGone: &syncv1.WorkGone{Name: name}}}
	}
	for _, tt := range []struct{ name, work string }{
		{"empty", ""},
		{"path", "../x"},
		{"slash", "a/b"},
		{"upper case", "Not_A_Name"},
		{"too long", strings.Repeat("a", 254)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stream := synctest.OpenStream(t, synctest.Dial(t, hub.Addr, p.ClientTLS(t, "west")))
			if err := stream.Send(synctest.Hello()); err != nil {
				t.Fatal(err)
			}
			recvSnapshot(t, stream)
			if err := stream.Send(workGone(tt.work)); err != nil {
				t.Fatal(err)
			}
			wantCode(t, synctest.RecvUntilError(t, stream, wait), codes.InvalidArgument, "work_gone")
		})
	}
	if c := gone.Calls(); len(c) != 0 {
		t.Fatalf("the sink heard %q from invalid names", c)
	}

	// West's certificate confirming a Work that is east's: the sink hears
	// west, never east.
	t.Run("another cluster's Work", func(t *testing.T) {
		stream := synctest.OpenStream(t, synctest.Dial(t, hub.Addr, p.ClientTLS(t, "west")))
		if err := stream.Send(synctest.Hello()); err != nil {
			t.Fatal(err)
		}
		recvSnapshot(t, stream)
		if err := stream.Send(workGone("e-0")); err != nil {
			t.Fatal(err)
		}
		goneContains(t, gone, "west's WorkGone reaching the sink", "west/e-0")
	})

	hub.Works.Delete("east", "e-1")
	goneContains(t, gone, "the healthy agent's WorkGone(east, e-1)", "east/e-1")
	if c := gone.Calls(); !slices.Equal(c, []string{"west/e-0", "east/e-1"}) {
		t.Errorf("the sink heard %q, want [west/e-0 east/e-1]: no invalid name, and west cannot confirm east's e-0", c)
	}
	if _, held := healthy.Applier.HeldGenerations()["e-0"]; !held {
		t.Error("east's e-0 is gone from the agent")
	}
	if n := healthy.Client.State().Connects; n != 1 {
		t.Errorf("the healthy agent connected %d times; its stream should never have been touched", n)
	}
}

// prunedFirst says why a WorkGone is too early when the hub has not yet
// heard the agent's prune report event (see synctest.Sink.Events).
func prunedFirst(hub *synctest.Hub, event string) func(cluster, name string) string {
	return func(_, _ string) string {
		if ev := hub.Sink.Events(); !slices.Contains(ev, event) {
			return fmt.Sprintf("before the hub heard %q (events %q)", event, ev)
		}
		return ""
	}
}

// TestRepeatedChangeDoesNotConfirmEarly notifies the server again of a
// Work whose WorkDelete the agent is still carrying out: the hub must not
// hear WorkGone before the agent says it is done. sync() takes "not in
// held" for "the agent holds nothing", but held forgets the Work as soon
// as WorkDelete is sent.
func TestRepeatedChangeDoesNotConfirmEarly(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	gone := synctest.NewDeletions()
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.Deletions = gone })
	hub.Works.Put("east", "doomed", 1)
	agent := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	var w goneWatch
	w.applier.Store(agent.Applier)
	w.watch(gone, "east")
	converged(t, hub, agent, "east")

	agent.Applier.Stall()
	hub.Works.Delete("east", "doomed")
	synctest.Eventually(t, wait, "the agent's Delete of doomed waiting at the gate", func() (bool, string) {
		n := agent.Applier.Stalled()
		return n == 1, fmt.Sprintf("%d calls stalled", n)
	})
	// The terminating Work changes again (another event of the informer,
	// a resync); the server's send loop handles it before the upsert of
	// other, so once that is sent, the change has been acted on.
	upserts := counterValue(t, hub, "flotilla_sync_messages_sent_total", "type", "upsert")
	hub.Server.WorkChanged("east", "doomed")
	hub.Works.Put("east", "other", 1)
	synctest.Eventually(t, wait, "the upsert of other sent after the repeated change", func() (bool, string) {
		n := counterValue(t, hub, "flotilla_sync_messages_sent_total", "type", "upsert")
		return n > upserts, fmt.Sprintf("%v upserts sent", n)
	})
	if c := gone.Calls(); len(c) != 0 {
		t.Errorf("the sink heard %q while the agent's Delete of doomed had not returned", c)
	}
	agent.Applier.Release()
	goneContains(t, gone, "WorkGone(east, doomed) once the Delete returned", "east/doomed")
	w.check(t)
}

// TestPrunedWorkRecreatedBeforePruneIsNotConfirmed re-creates a Work the
// snapshot left out while the deletion brake holds the prune: the agent
// applies it, and the confirmed prune (to what the hub wants then) keeps
// it. The hub must not hear WorkGone for it: the agent holds it.
func TestPrunedWorkRecreatedBeforePruneIsNotConfirmed(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	gone := synctest.NewDeletions()
	hub := synctest.StartHub(t, p, []string{"east"}, func(c *server.Config) { c.Deletions = gone })
	a := hub.Works.Put("east", "a", 1)
	var seeds []*v1alpha1.Work
	for _, n := range []string{"b", "c", "d"} {
		seeds = append(seeds, hub.Works.Put("east", n, 1))
		hub.Works.Delete("east", n)
	}
	var w goneWatch
	w.watch(gone, "east")
	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		ap := c.Applier.(*synctest.Applier)
		ap.Brake(2)
		ap.Seed(a)
		for _, s := range seeds {
			ap.Seed(s)
		}
		w.applier.Store(ap)
	})
	synctest.Eventually(t, wait, "the hub hearing of the held prune", func() (bool, string) {
		_, ok := hub.Sink.PruneBlocked("east")
		return ok, "not yet"
	})
	barrier(t, hub, agent, "east", "b") // b again, a new Work (new uid)

	blocked, _ := hub.Sink.PruneBlocked("east")
	if !hub.Server.ConfirmPrune("east", blocked.Epoch) {
		t.Fatal("the confirmation for the held epoch was not sent")
	}
	goneContains(t, gone, "WorkGone for c and d after the confirmed prune", "east/c", "east/d")
	converged(t, hub, agent, "east")
	barrier(t, hub, agent, "east", "after")
	calls := gone.Calls()
	if slices.Sort(calls); !slices.Equal(calls, []string{"east/c", "east/d"}) {
		t.Errorf("the sink heard %q, want c and d only: the agent holds the re-created b", calls)
	}
	w.check(t)
}
