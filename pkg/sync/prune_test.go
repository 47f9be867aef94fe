package sync_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/sync/internal/synctest"
)

// TestPruneRetryKeepsWorksAppliedMeanwhile is the regression test for the
// prune retry race: the prune after a snapshot fails, a new Work arrives
// and is applied while it keeps failing, and the retry that finally
// succeeds must keep that Work. Retrying with the keep list of the failed
// attempt deleted it.
func TestPruneRetryKeepsWorksAppliedMeanwhile(t *testing.T) {
	synctest.CheckGoroutines(t)
	p := synctest.NewPKI(t)
	hub := synctest.StartHub(t, p, []string{"east"}, nil)
	hub.Works.Put("east", "w-0", 1)

	agent := synctest.StartAgent(t, p, "east", hub.Addr, func(c *client.Config) {
		c.MaxApplyBackoff = 20 * time.Millisecond
		a := c.Applier.(*synctest.Applier)
		a.Seed(synctest.NewWork("east", "old", 1))
		a.FailPrunes(true)
	})
	synctest.Eventually(t, wait, "the first prune failing", func() (bool, string) {
		n := agent.Applier.PruneFailures()
		return n >= 1, fmt.Sprintf("%d failed prunes", n)
	})

	// A Work created while the prune keeps failing is applied at once.
	hub.Works.Put("east", "w-new", 1)
	synctest.Eventually(t, wait, "w-new applied", func() (bool, string) {
		_, ok := agent.Applier.HeldGenerations()["w-new"]
		return ok, fmt.Sprintf("holds %v", agent.Applier.HeldGenerations())
	})
	failed := agent.Applier.PruneFailures()
	synctest.Eventually(t, wait, "another prune retry failing after w-new", func() (bool, string) {
		n := agent.Applier.PruneFailures()
		return n > failed, fmt.Sprintf("%d failed prunes", n)
	})

	agent.Applier.FailPrunes(false)
	synctest.Eventually(t, wait, "the prune retry succeeding", func() (bool, string) {
		_, _, snaps := agent.Applier.Counts()
		return snaps >= 1, fmt.Sprintf("%d prunes", snaps)
	})
	if d := synctest.Diff(hub.Works.Desired("east"), agent.Applier.HeldGenerations()); d != "" {
		t.Fatalf("after the prune retry the agent does not hold what the hub wants: %s", d)
	}
	if n := agent.Client.State().Connects; n != 1 {
		t.Errorf("connected %d times; the retry should run on the same stream", n)
	}
}
