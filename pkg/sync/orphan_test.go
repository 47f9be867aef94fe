package sync_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
)

// TestWorkVanishedWithoutIntentIsOrphaned checks deletion intent over real
// gRPC: a Work deleted with the deletion-intent mark reaches the agent as
// WorkDelete, one that vanishes without it as WorkOrphan, counted once and
// never sent again; and a held Work that vanished while the agent was away
// is orphaned in the snapshot, before the prune could reach it.
func TestWorkVanishedWithoutIntentIsOrphaned(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	for _, n := range []string{"intended", "lost", "kept", "lost-away"} {
		hub.Works.Put("east", n, 1)
	}
	agent := synctest.StartAgent(t, p, "east", hub.Addr, nil)
	synctest.Eventually(t, wait, "the agent holding every Work", func() (bool, string) {
		d := synctest.Diff(hub.Works.Desired("east"), agent.Applier.HeldGenerations())
		return d == "", d
	})

	hub.Works.Delete("east", "intended")
	hub.Works.Vanish("east", "lost")
	synctest.Eventually(t, wait, "both removals reaching the agent", func() (bool, string) {
		log := agent.Applier.Log()
		return slices.Contains(log, "delete intended") && slices.Contains(log, "orphan lost"), fmt.Sprintf("log %v", log)
	})
	log := agent.Applier.Log()
	if slices.Contains(log, "delete lost") || slices.Contains(log, "orphan intended") {
		t.Errorf("a Work was removed the wrong way: %v", log)
	}
	orphaned := func() float64 {
		return counterValue(t, hub, "flotilla_sync_works_orphaned_total", "cluster", "east")
	}
	if n := orphaned(); n != 1 {
		t.Errorf("flotilla_sync_works_orphaned_total{cluster=east} = %v, want 1", n)
	}

	// A second notification of the same vanished Work sends nothing more.
	hub.Server.WorkChanged("east", "lost")
	hub.Works.Put("east", "kept", 2) // something to wait for behind it
	synctest.Eventually(t, wait, "kept at generation 2", func() (bool, string) {
		g := agent.Applier.HeldGenerations()["kept"]
		return g == 2, fmt.Sprintf("kept at %d", g)
	})
	if n := agent.Applier.Orphans(); n != 1 {
		t.Errorf("%d Orphan calls, want 1: the hub must not send WorkOrphan twice", n)
	}

	// A Work that vanishes while the agent is away is orphaned by the next
	// snapshot, before SnapshotComplete, so the prune never sees it.
	agent.Stop()
	synctest.Eventually(t, wait, "the hub seeing the agent go", func() (bool, string) {
		_, ok := hub.Sink.Connected("east")
		return !ok, "still connected"
	})
	hub.Works.Vanish("east", "lost-away")
	again := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		a := c.Applier.(*synctest.Applier)
		for name := range agent.Applier.HeldGenerations() {
			a.Seed(synctest.NewWork("east", name, 1))
		}
	})
	synctest.Eventually(t, wait, "the reconnected agent's snapshot", func() (bool, string) {
		_, _, snaps := again.Applier.Counts()
		return snaps >= 1, fmt.Sprintf("log %v", again.Applier.Log())
	})
	log = again.Applier.Log()
	if i := slices.Index(log, "orphan lost-away"); i < 0 || i > slices.IndexFunc(log, func(s string) bool { return strings.HasPrefix(s, "snapshot") }) {
		t.Errorf("lost-away was not orphaned before the snapshot's prune: %v", log)
	}
	if _, held := again.Applier.HeldGenerations()["lost-away"]; held {
		t.Errorf("the agent still holds lost-away")
	}
	if n := orphaned(); n != 2 {
		t.Errorf("flotilla_sync_works_orphaned_total{cluster=east} = %v, want 2", n)
	}
}
