//go:build !e2e

package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDocumentedMetricComponents: every row of docs/metrics.md names
// components the e2e suite's scrape check knows, so that check fails on
// a missing series and not on the table (stop 43's CI failed on the
// latter, after 17 minutes of suite, for a row a plain test can read).
func TestDocumentedMetricComponents(t *testing.T) {
	ms, err := readDocumentedMetrics(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	both := 0
	for _, m := range ms {
		comps, err := m.components()
		if err != nil {
			t.Error(err)
			continue
		}
		if len(comps) == 2 {
			both++
		}
	}
	// flotilla_lost_lease_restarts_total is served by both.
	if both == 0 {
		t.Errorf("no metric of docs/metrics.md is listed for both the hub and the agent; flotilla_lost_lease_restarts_total should be")
	}
	for _, bad := range []string{"", "hub, agent", "Hub", "agent and hub"} {
		if _, err := (documentedMetric{name: "flotilla_x", component: bad}).components(); err == nil || !strings.Contains(err.Error(), "flotilla_x") {
			t.Errorf("component %q: err = %v, want an error naming the metric", bad, err)
		}
	}
}
