package e2e

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Spec sets, so that a machine running the suite on both fleets (the
// testbed and kind) can run each spec once: -specs=testbed runs on the
// testbed only what a kind run does not cover: the specs the kind provider
// skips (kindSkips), those that exercise the testbed's Push member, which
// the kind fleet does not have (pushOnTestbed), and those whose metrics
// the testbed's scrape check needs (scrapedOnTestbed). -specs=kind-covered
// runs the others; -specs=all (the default) runs everything. CI does not
// use them: it runs every spec on the testbed, then kind, so that a kind
// run its time budget stops loses no spec (docs/e2e-kind.md, In CI). The
// flag is in specsets_test.go, with the e2e build tag.

// kindSkips: the specs that skip on -provider=kind, and why. A kind run
// fails when a spec skips that is not named here, or when one named here
// runs: the two runs together would otherwise run a spec nowhere, or
// twice.
var kindSkips = map[string]string{
	"TestHealthShift":                       "a Prometheus per member scraping an exporter the test moves, and agents started with --prometheus-url",
	"TestSyncModeSwitch":                    "switches a member between Pull and Push",
	"TestAgentPausedLeader":                 "SIGSTOP of one agent process",
	"TestJoin":                              "a bare member to join (every kind member joins in up.sh)",
	"TestCertificateRotation":               "a fleet started with short-lived certificates",
	"TestEveryDocumentedMetricScraped":      "a Prometheus of the provider's own",
	"TestMetricsRefuseWithoutAuthorization": "a Prometheus of the provider's own and its scrape token",
}

// pushOnTestbed: specs kind runs too, but whose point on the testbed is
// also its Push member (member-3): the hub's push engine reverting a hand
// edit, and a Push member lost and back.
var pushOnTestbed = map[string]string{
	"TestDuplicated": "edits the Push member's Deployment by hand; the hub reverts it",
	"TestFailover":   "stops the Push member",
	"TestFailback":   "stops and starts the Push member",
}

// scrapedOnTestbed: specs kind runs too, whose metrics the testbed's
// TestEveryDocumentedMetricScraped (in kindSkips) needs to have been
// emitted on the testbed: the rollout series appear only while a
// progressive rollout runs, completes, fails, pauses or rolls back.
var scrapedOnTestbed = map[string]string{
	"TestProgressiveRolloutOrder":    "flotilla_rollout_active, _waves_total, rollouts started and completed",
	"TestProgressiveRolloutFailure":  "flotilla_rollouts_failed_total",
	"TestProgressiveRolloutRollback": "flotilla_rollouts_rolled_back_total",
	"TestProgressiveRolloutPaused":   "flotilla_rollout_paused, _last_progress_timestamp_seconds",
}

// testbedSpecs are the names -specs=testbed runs, sorted.
func testbedSpecs() []string {
	var out []string
	for _, set := range []map[string]string{kindSkips, pushOnTestbed, scrapedOnTestbed} {
		out = slices.AppendSeq(out, maps.Keys(set))
	}
	slices.Sort(out)
	return out
}

// specsPattern is the -test.run or -test.skip pattern matching exactly
// the top-level tests named.
func specsPattern(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// checkSpecSets says what is wrong with the spec sets after a run, given
// the provider's name and what ran: on kind, a spec that skipped but is
// not in kindSkips, or one in kindSkips that ran; with -specs=testbed, a
// named spec that did not run at all (renamed or removed).
func checkSpecSets(providerName, specs string, skipped map[string]bool) []string {
	var problems []string
	if providerName == "kind" {
		for name, s := range skipped {
			_, listed := kindSkips[name]
			switch {
			case s && !listed:
				problems = append(problems, fmt.Sprintf("%s skipped on kind but is not in kindSkips (test/e2e-multikind/specsets.go): no run would cover it", name))
			case !s && listed:
				problems = append(problems, fmt.Sprintf("%s ran on kind but is in kindSkips (test/e2e-multikind/specsets.go): take it out, -specs=testbed runs it too", name))
			}
		}
	}
	if specs == "testbed" {
		for _, name := range testbedSpecs() {
			if _, ok := skipped[name]; !ok {
				problems = append(problems, fmt.Sprintf("-specs=testbed names %s, which did not run: renamed or removed? (test/e2e-multikind/specsets.go)", name))
			}
		}
	}
	slices.Sort(problems)
	return problems
}
