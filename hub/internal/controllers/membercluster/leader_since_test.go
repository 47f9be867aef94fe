package membercluster

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestGraceCountsFromTheFirstReconcile: a hub counts the grace period of
// members it has not heard from since it started reconciling, which the
// controller does only once it leads, not since its process started: a
// standby that waited for the Lease, or a new process waiting out a
// killed leader's Lease, would otherwise have spent the grace already.
func TestGraceCountsFromTheFirstReconcile(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	r := &Reconciler{Clock: clk}
	clk.SetTime(start.Add(time.Hour)) // waiting for the Lease
	if got := r.leaderSince(); !got.Equal(start.Add(time.Hour)) {
		t.Fatalf("leaderSince %s, want the first reconcile's time %s", got, start.Add(time.Hour))
	}
	clk.SetTime(start.Add(2 * time.Hour))
	if got := r.leaderSince(); !got.Equal(start.Add(time.Hour)) {
		t.Fatalf("leaderSince moved to %s", got)
	}
}
