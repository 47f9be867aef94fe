//go:build !e2e

package e2e

import (
	"maps"
	"regexp"
	"strings"
	"testing"
)

// The spec sets are checked without clusters: these run in make test's
// plain stage (the package's other tests need the e2e build tag).

func TestSpecsPatternMatchesExactlyTheNamedSpecs(t *testing.T) {
	re := regexp.MustCompile(specsPattern(testbedSpecs()))
	for _, name := range testbedSpecs() {
		if !re.MatchString(name) {
			t.Errorf("pattern %s does not match %s", re, name)
		}
	}
	for _, name := range []string{"TestFailoverX", "XTestFailover", "TestScaleToZeroFailover", "TestHubRestart", "TestDuplicatedSomething"} {
		if re.MatchString(name) {
			t.Errorf("pattern %s matches %s, which is not in the testbed set", re, name)
		}
	}
}

func TestCheckSpecSets(t *testing.T) {
	// What a clean kind run records: every kindSkips spec skipped, the
	// others ran.
	clean := map[string]bool{"TestDuplicated": false, "TestHubRestart": false}
	for name := range kindSkips {
		clean[name] = true
	}
	if p := checkSpecSets("kind", "all", clean); len(p) != 0 {
		t.Errorf("a clean kind run: want no problem, got %q", p)
	}

	// A spec that starts skipping on kind without being listed would run
	// nowhere in CI.
	skipsUnlisted := maps.Clone(clean)
	skipsUnlisted["TestHubRestart"] = true
	wantOne(t, checkSpecSets("kind", "all", skipsUnlisted), "TestHubRestart skipped on kind but is not in kindSkips")

	// A listed spec that now runs on kind would run twice.
	runsListed := maps.Clone(clean)
	runsListed["TestJoin"] = false
	wantOne(t, checkSpecSets("kind", "all", runsListed), "TestJoin ran on kind but is in kindSkips")

	// The testbed does not check kind's skips: TestPartition skips there.
	if p := checkSpecSets("testbed", "all", map[string]bool{"TestPartition": true}); len(p) != 0 {
		t.Errorf("testbed, -specs=all: want no problem, got %q", p)
	}

	// -specs=testbed: every named spec must have run.
	all := map[string]bool{}
	for _, name := range testbedSpecs() {
		all[name] = false
	}
	if p := checkSpecSets("testbed", "testbed", all); len(p) != 0 {
		t.Errorf("-specs=testbed with every named spec run: want no problem, got %q", p)
	}
	delete(all, "TestFailback")
	wantOne(t, checkSpecSets("testbed", "testbed", all), "-specs=testbed names TestFailback, which did not run")
}

func wantOne(t *testing.T, problems []string, prefix string) {
	t.Helper()
	if len(problems) != 1 || !strings.HasPrefix(problems[0], prefix) {
		t.Errorf("want one problem starting %q, got %q", prefix, problems)
	}
}
