package sync_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
)

// TestOtherFleetIsRefused points an agent that serves another fleet at the
// hub (a hub restored from a backup, or another hub altogether): it must
// refuse the hub, apply and delete nothing, say why to the hub, and keep
// trying with backoff, while another agent on the same hub keeps working.
func TestOtherFleetIsRefused(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east", "west"}, nil)
	hub.Works.Put("east", "e-0", 1)
	hub.Works.Put("west", "w-0", 1)
	west := synctest.StartAgent(t, p, "west", hub.Addr, nil)
	converged(t, hub, west, "west")

	east := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		c.Identity.(*synctest.Identity).Record("fleet-old", "east")
		// What it runs for the old fleet: a snapshot of the new hub
		// would delete both.
		c.Applier.(*synctest.Applier).Seed(synctest.NewWork("east", "old-0", 1))
		c.Applier.(*synctest.Applier).Seed(synctest.NewWork("east", "old-1", 1))
	})
	synctest.Eventually(t, wait, "the hub hearing the refusal", func() (bool, string) {
		r, ok := hub.Sink.Refusal("east")
		return ok && r.RecordedFleetID == "fleet-old" && r.RecordedCluster == "east", fmt.Sprintf("%+v, %v", r, ok)
	})
	synctest.Eventually(t, wait, "the agent trying again", func() (bool, string) {
		n := east.Client.State().Connects
		return n >= 2, fmt.Sprintf("%d streams", n)
	})
	if r, _ := hub.Sink.Refusal("east"); !strings.Contains(r.Reason, "serves fleet fleet-old") || !strings.Contains(r.Reason, "--accept-fleet-id="+synctest.FleetID) {
		t.Errorf("refusal reason %q does not say what differs and how to accept", r.Reason)
	}
	if st := east.Client.State(); st.Connected || st.Refusal == "" {
		t.Errorf("east state = %+v, want not connected, with a refusal", st)
	}
	if applies, deletes, snaps := east.Applier.Counts(); applies+deletes+snaps != 0 {
		t.Errorf("the refusing agent applied %d, deleted %d and pruned %d times; want nothing", applies, deletes, snaps)
	}
	if held := east.Applier.HeldGenerations(); len(held) != 2 {
		t.Errorf("the refusing agent holds %v, want old-0 and old-1 untouched", held)
	}
	if got := east.Identity.Recorded(); got == nil || got.FleetID != "fleet-old" {
		t.Errorf("the record changed to %+v", got)
	}
	if _, ok := hub.Sink.Connected("east"); ok {
		t.Error("the hub counts the refusing agent as connected")
	}
	if slices.Contains(hub.Sink.Events(), "connect east") {
		t.Errorf("events %q: a refusing agent must never be registered", hub.Sink.Events())
	}

	// The other agent is untouched.
	hub.Works.Put("west", "w-1", 1)
	converged(t, hub, west, "west")
	if n := west.Client.State().Connects; n != 1 {
		t.Errorf("west connected %d times; its stream should never have been touched", n)
	}
}

// TestAcceptFleetIDRepoints re-points an agent on purpose: with the new
// fleet id accepted, it serves the hub and replaces its record.
func TestAcceptFleetIDRepoints(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	hub.Works.Put("east", "e-0", 1)
	east := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		c.Identity.(*synctest.Identity).Record("fleet-old", "east")
		c.Identity.(*synctest.Identity).Accept(synctest.FleetID)
	})
	converged(t, hub, east, "east")
	if got := east.Identity.Recorded(); got == nil || *got != (client.FleetRecord{FleetID: synctest.FleetID, Cluster: "east"}) {
		t.Errorf("record = %+v, want the new fleet", got)
	}
	if st := east.Client.State(); st.Refusal != "" {
		t.Errorf("state = %+v, want no refusal", st)
	}
}

// TestFirstHubIsRecorded checks an agent with no record serves the first
// hub it reaches and records it.
func TestFirstHubIsRecorded(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	hub.Works.Put("east", "e-0", 1)
	east := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	converged(t, hub, east, "east")
	if got := east.Identity.Recorded(); got == nil || *got != (client.FleetRecord{FleetID: synctest.FleetID, Cluster: "east"}) {
		t.Errorf("record = %+v, want fleet %s, cluster east", got, synctest.FleetID)
	}
}

// TestPruneBlockedThenConfirmed makes a snapshot that would delete three
// of the four Works an agent holds: the brake holds the prune, the hub
// hears how much would go, nothing is deleted, and a confirmation for the
// snapshot's epoch prunes to what the hub wants at that time.
func TestPruneBlockedThenConfirmed(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	keep := hub.Works.Put("east", "a", 1)
	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		a := c.Applier.(*synctest.Applier)
		a.Brake(2)
		a.Seed(keep)
		for _, n := range []string{"b", "c", "d"} {
			a.Seed(synctest.NewWork("east", n, 1))
		}
	})
	synctest.Eventually(t, wait, "the hub hearing of the held prune", func() (bool, string) {
		b, ok := hub.Sink.PruneBlocked("east")
		return ok, fmt.Sprintf("%+v, %v", b, ok)
	})
	b, _ := hub.Sink.PruneBlocked("east")
	if b.WouldDelete != 3 || b.Held != 4 || !slices.Equal(b.Works, []string{"b", "c", "d"}) {
		t.Errorf("blocked = %+v, want 3 of 4, Works b, c, d", b)
	}
	if st := agent.Client.State(); !st.PruneBlocked || !st.SnapshotComplete {
		t.Errorf("state = %+v, want the snapshot complete and the prune blocked", st)
	}
	if held := agent.Applier.HeldGenerations(); len(held) != 4 {
		t.Fatalf("the agent holds %v; the brake should have kept all four", held)
	}

	// Changes still flow while the prune waits, and a Work created now
	// must survive the confirmed prune.
	hub.Works.Put("east", "e", 1)
	synctest.Eventually(t, wait, "e applied while the prune waits", func() (bool, string) {
		_, ok := agent.Applier.HeldGenerations()["e"]
		return ok, fmt.Sprintf("%v", agent.Applier.HeldGenerations())
	})
	if hub.Server.ConfirmPrune("east", b.Epoch+1) {
		t.Error("a confirmation for another epoch was accepted")
	}
	if !hub.Server.ConfirmPrune("east", b.Epoch) {
		t.Fatal("the confirmation for the held epoch was not sent")
	}
	converged(t, hub, agent, "east")
	synctest.Eventually(t, wait, "the hub hearing the confirmed prune", func() (bool, string) {
		_, blocked := hub.Sink.PruneBlocked("east")
		ev := hub.Sink.Events()
		return !blocked && slices.Contains(ev, "pruned east confirmed=true"), fmt.Sprintf("blocked %v, events %q", blocked, ev)
	})
	if st := agent.Client.State(); st.PruneBlocked {
		t.Errorf("state = %+v, want no prune blocked", st)
	}
	if n := agent.Client.State().Connects; n != 1 {
		t.Errorf("connected %d times; the confirmation should need no new stream", n)
	}
}

// TestPruneWithinBrakeIsReported checks that a snapshot whose prune the
// brake lets through is reported as pruned, which clears a held prune on
// the hub.
func TestPruneWithinBrakeIsReported(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	hub.Works.Put("east", "a", 1)
	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		a := c.Applier.(*synctest.Applier)
		a.Brake(2)
		a.Seed(synctest.NewWork("east", "gone", 1))
	})
	converged(t, hub, agent, "east")
	synctest.Eventually(t, wait, "the hub hearing the prune", func() (bool, string) {
		ev := hub.Sink.Events()
		return slices.Contains(ev, "pruned east confirmed=false"), fmt.Sprintf("%q", ev)
	})
}
