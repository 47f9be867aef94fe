package membercluster

import (
	"maps"
	"slices"
	"testing"
	"time"
)

func TestDecideEvictions(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	const grace = 14 * time.Second
	policy := evictionPolicy{grace: grace, brakeThreshold: 0.55, rateLimit: 1, rateInterval: 30 * time.Second}
	// silent returns a member last heard d ago; tainted adds a taint
	// added a ago.
	silent := func(name string, d time.Duration) memberSilence {
		return memberSilence{name: name, silentSince: t0.Add(-d)}
	}
	tainted := func(m memberSilence, a time.Duration) memberSilence {
		at := t0.Add(-a)
		m.taintedAt = &at
		return m
	}
	healthy := func(name string) memberSilence { return silent(name, time.Second) }
	lost := func(name string) memberSilence { return silent(name, grace+time.Second) }

	type want struct {
		taint   []string
		held    map[string]string
		brake   bool
		counted int
		recheck time.Duration
	}
	tests := []struct {
		name    string
		members []memberSilence
		policy  evictionPolicy
		want    want
	}{{
		name:    "all heartbeat: nothing tainted, look again when the first could fall silent",
		members: []memberSilence{healthy("m1"), healthy("m2"), healthy("m3")},
		want:    want{},
	}, {
		name:    "1 of 3 past the grace: tainted at once",
		members: []memberSilence{lost("m1"), healthy("m2"), healthy("m3")},
		want:    want{taint: []string{"m1"}, counted: 1},
	}, {
		name:    "1 of 2 past the grace (50%, not more than 55%): tainted",
		members: []memberSilence{lost("m1"), healthy("m2")},
		want:    want{taint: []string{"m1"}, counted: 1},
	}, {
		name:    "2 of 3 past the grace: the brake holds, nothing tainted",
		members: []memberSilence{lost("m1"), lost("m2"), healthy("m3")},
		want:    want{held: map[string]string{"m1": holdBrake, "m2": holdBrake}, brake: true, counted: 2},
	}, {
		name:    "the first of a partition to cross the grace finds the others silent past half of it: the brake holds before any taint",
		members: []memberSilence{silent("m1", grace+100*time.Millisecond), silent("m2", grace-time.Second), healthy("m3")},
		want:    want{held: map[string]string{"m1": holdBrake}, brake: true, counted: 2},
	}, {
		name: "the brake lifts a taint added within the grace period, keeps an older one",
		members: []memberSilence{
			tainted(silent("m1", grace+5*time.Second), 5*time.Second),
			tainted(silent("m2", time.Hour), 50*time.Minute),
			lost("m3"), lost("m4"), healthy("m5"),
		},
		// m2 was lost on its own long ago and does not count: 3 of 5.
		want: want{taint: []string{"m2"}, held: map[string]string{"m1": holdBrake, "m3": holdBrake, "m4": holdBrake}, brake: true, counted: 3,
			recheck: 9 * time.Second},
	}, {
		name:    "a member lost long ago does not count: one more lost of 3 is tainted",
		members: []memberSilence{tainted(silent("m1", time.Hour), 50*time.Minute), lost("m2"), healthy("m3")},
		want:    want{taint: []string{"m1", "m2"}, counted: 1},
	}, {
		name:    "members that never connected count for nothing",
		members: []memberSilence{lost("m1"), healthy("m2"), healthy("m3"), {name: "new1"}, {name: "new2"}},
		want:    want{taint: []string{"m1"}, counted: 1},
	}, {
		name:    "3 of 6 past the grace (50%): the longest silent is tainted, the others wait for the rate limit",
		members: []memberSilence{silent("m1", grace+3*time.Second), silent("m2", grace+time.Second), silent("m3", grace+2*time.Second), healthy("m4"), healthy("m5"), healthy("m6")},
		want:    want{taint: []string{"m1"}, held: map[string]string{"m2": holdRateLimit, "m3": holdRateLimit}, counted: 3, recheck: 30 * time.Second},
	}, {
		name: "3 of 6, one tainted 10s ago: the next waits until 30s after that taint",
		members: []memberSilence{tainted(silent("m1", grace+13*time.Second), 10*time.Second), silent("m2", grace+11*time.Second), silent("m3", grace+12*time.Second),
			silent("m4", 0), silent("m5", 0), silent("m6", 0)},
		want: want{taint: []string{"m1"}, held: map[string]string{"m2": holdRateLimit, "m3": holdRateLimit}, counted: 3, recheck: 20 * time.Second},
	}, {
		name: "3 of 6, one tainted 30s ago: the next in line (longest silent) is tainted now",
		members: []memberSilence{tainted(silent("m1", grace+33*time.Second), 30*time.Second), silent("m2", grace+31*time.Second), silent("m3", grace+32*time.Second),
			silent("m4", 0), silent("m5", 0), silent("m6", 0)},
		want: want{taint: []string{"m1", "m3"}, held: map[string]string{"m2": holdRateLimit}, counted: 2, recheck: 30 * time.Second},
	}, {
		name:    "without a rate limit every lost member is tainted",
		members: []memberSilence{lost("m1"), lost("m2"), healthy("m3"), healthy("m4"), healthy("m5")},
		policy:  evictionPolicy{grace: grace, brakeThreshold: 0.55},
		want:    want{taint: []string{"m1", "m2"}, counted: 2},
	}, {
		name:    "a brake threshold of 1 turns the brake off",
		members: []memberSilence{lost("m1"), lost("m2"), lost("m3")},
		policy:  evictionPolicy{grace: grace, brakeThreshold: 1},
		want:    want{taint: []string{"m1", "m2", "m3"}, counted: 3},
	}, {
		name:    "a member that heartbeats again loses its taint",
		members: []memberSilence{tainted(healthy("m1"), time.Minute), healthy("m2")},
		want:    want{},
	}, {
		name:    "a hub that just started: every member silent since its start, all cross the grace together: the brake holds",
		members: []memberSilence{silent("m1", grace+time.Millisecond), silent("m2", grace+time.Millisecond), silent("m3", grace+time.Millisecond)},
		want:    want{held: map[string]string{"m1": holdBrake, "m2": holdBrake, "m3": holdBrake}, brake: true, counted: 3},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.policy
			if p.grace == 0 {
				p = policy
			}
			got := decideEvictions(tt.members, t0, p)
			if taint := slices.Sorted(maps.Keys(got.taint)); !slices.Equal(taint, tt.want.taint) {
				t.Errorf("taint %v, want %v", taint, tt.want.taint)
			}
			if tt.want.held == nil {
				tt.want.held = map[string]string{}
			}
			if !maps.Equal(got.held, tt.want.held) {
				t.Errorf("held %v, want %v", got.held, tt.want.held)
			}
			if got.brake != tt.want.brake || got.counted != tt.want.counted {
				t.Errorf("brake %v with %d counted, want %v with %d", got.brake, got.counted, tt.want.brake, tt.want.counted)
			}
			if got.recheckAfter != tt.want.recheck {
				t.Errorf("recheck after %s, want %s", got.recheckAfter, tt.want.recheck)
			}
		})
	}
}

// TestDecideEvictionsRateLimitOverTime replays 3 of 6 members falling
// silent together: one is tainted per 30s, in the order they fell silent,
// and none is tainted twice.
func TestDecideEvictionsRateLimitOverTime(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p := evictionPolicy{grace: 14 * time.Second, brakeThreshold: 0.55, rateLimit: 1, rateInterval: 30 * time.Second}
	members := []memberSilence{
		{name: "m1", silentSince: t0.Add(time.Second)}, {name: "m2", silentSince: t0}, {name: "m3", silentSince: t0.Add(2 * time.Second)},
	}
	var order []string
	taintedAt := map[string]time.Time{}
	now := t0
	for now.Before(t0.Add(2 * time.Minute)) {
		in := slices.Clone(members)
		for i := range in {
			if at, ok := taintedAt[in[i].name]; ok {
				in[i].taintedAt = &at
			}
		}
		// Three that keep heartbeating.
		for _, n := range []string{"m4", "m5", "m6"} {
			in = append(in, memberSilence{name: n, silentSince: now})
		}
		d := decideEvictions(in, now, p)
		for _, n := range slices.Sorted(maps.Keys(d.taint)) {
			if _, ok := taintedAt[n]; !ok {
				taintedAt[n] = now
				order = append(order, n)
			}
		}
		// Members are reconciled at their own deadlines and when woken;
		// evaluating every half second stands in for that.
		now = now.Add(500 * time.Millisecond)
	}
	if !slices.Equal(order, []string{"m2", "m1", "m3"}) {
		t.Fatalf("tainted in order %v, want [m2 m1 m3]", order)
	}
	if gap := taintedAt["m1"].Sub(taintedAt["m2"]); gap < 30*time.Second {
		t.Errorf("m1 tainted %s after m2, want at least 30s", gap)
	}
	if gap := taintedAt["m3"].Sub(taintedAt["m1"]); gap < 30*time.Second {
		t.Errorf("m3 tainted %s after m1, want at least 30s", gap)
	}
}
