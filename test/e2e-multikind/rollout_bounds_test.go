//go:build !e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

// at is a moment s seconds after a fixed start.
func at(s float64) time.Time {
	return time.Date(2026, 12, 5, 17, 24, 0, 0, time.UTC).Add(time.Duration(s * float64(time.Second)))
}

// TestRolloutBoundsProveOnlyWhatHappened checks the rollout-order spec's
// judgement: a violation counts only when the reads' bounds prove it, a
// slow read does not make a correct rollout look early, and a real
// overlap or early switch is still caught.
func TestRolloutBoundsProveOnlyWhatHappened(t *testing.T) {
	const gap = 2500 * time.Millisecond // minSuccessTime 3s less the slack
	// member-3 switched in (1, 1.1], was done in (20.0, 20.1]; the hub
	// switched member-1 3.5 s after, seen through a read that took 1.6 s.
	canary := &rolloutTrace{lastOld: at(1), firstNew: at(1.1), lastNotDone: at(20.0), firstDone: at(20.1)}
	slowRead := &rolloutTrace{lastOld: at(20.3), firstNew: at(23.6), lastNotDone: at(30), firstDone: at(30.1)}
	if v := switchViolation("member-3", canary, slowRead, gap); v != "" {
		t.Errorf("a correct switch seen through a slow read was judged %q", v)
	}
	if m1, m2, ok := rollingTogether([]string{"member-1", "member-3"}, map[string]*rolloutTrace{"member-1": slowRead, "member-3": canary}, gap); ok {
		t.Errorf("%s and %s judged rolling together in a correct rollout", m1, m2)
	}

	cases := []struct {
		name string
		cur  *rolloutTrace
		want string
	}{
		{"switched before the previous member", &rolloutTrace{lastOld: at(0.2), firstNew: at(0.5), lastNotDone: at(30)}, "before member-3"},
		{"switched before the previous member was done", &rolloutTrace{lastOld: at(10), firstNew: at(10.2), lastNotDone: at(30)}, "before member-3 was fully updated"},
		{"switched too soon after", &rolloutTrace{lastOld: at(20.5), firstNew: at(21), lastNotDone: at(30)}, "at most 1s after member-3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if v := switchViolation("member-3", canary, tc.cur, gap); !strings.HasPrefix(v, tc.want) {
				t.Errorf("judged %q, want it to start with %q", v, tc.want)
			}
			if _, _, ok := rollingTogether([]string{"member-1", "member-3"}, map[string]*rolloutTrace{"member-1": tc.cur, "member-3": canary}, gap); !ok {
				t.Error("the two members were not judged rolling together")
			}
		})
	}

	// A member that has not switched is never rolling.
	idle := &rolloutTrace{lastOld: at(25), lastNotDone: at(25)}
	if _, _, ok := rollingTogether([]string{"member-1", "member-3"}, map[string]*rolloutTrace{"member-1": idle, "member-3": canary}, gap); ok {
		t.Error("a member still on the old template was judged rolling")
	}
}
