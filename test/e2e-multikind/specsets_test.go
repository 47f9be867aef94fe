//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
)

var specsFlag = flag.String("specs", "all", "which specs run: all; testbed (only those a kind run does not cover: the ones kind skips, the ones that exercise the testbed's Push member, the rollout specs the metric scrape check needs; specsets.go); kind-covered (all others)")

// applySpecsFlag turns -specs into -test.run (testbed) or -test.skip
// (kind-covered). It refuses to combine with a -run or -skip of the
// caller's, which would silently narrow the set.
func applySpecsFlag() error {
	switch *specsFlag {
	case "all":
		return nil
	case "testbed", "kind-covered":
	default:
		return fmt.Errorf("-specs=%q: want all, testbed or kind-covered", *specsFlag)
	}
	for _, f := range []string{"test.run", "test.skip"} {
		if v := flag.Lookup(f); v != nil && v.Value.String() != "" {
			return fmt.Errorf("-specs=%s picks the specs itself; drop -%s=%q (or use -specs=all)", *specsFlag, strings.TrimPrefix(f, "test."), v.Value.String())
		}
	}
	if *specsFlag == "testbed" {
		return flag.Set("test.run", specsPattern(testbedSpecs()))
	}
	return flag.Set("test.skip", specsPattern(testbedSpecs()))
}

// ran records, per top-level spec that ran, whether it skipped (track).
var ran = struct {
	sync.Mutex
	skipped map[string]bool
}{skipped: map[string]bool{}}

// track records at the end of t's top-level test whether it skipped.
// input calls it; specs that may skip before calling input call it first.
func track(t *testing.T) {
	name := t.Name()
	if strings.Contains(name, "/") {
		return
	}
	ran.Lock()
	_, seen := ran.skipped[name]
	if !seen {
		ran.skipped[name] = false
	}
	ran.Unlock()
	if seen {
		return
	}
	t.Cleanup(func() {
		ran.Lock()
		ran.skipped[name] = t.Skipped()
		ran.Unlock()
	})
}
