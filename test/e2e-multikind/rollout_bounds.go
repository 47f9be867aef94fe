package e2e

// The bounds the rollout-order spec (ProgressiveOrderSpec) judges by, in a
// file without the e2e tag so that their unit test runs in make test's
// plain packages.

import (
	"fmt"
	"time"
)

// rolloutTrace is what the ordering spec saw of one member, as bounds on
// when things happened: lastOld and lastNotDone are when the last read
// that saw the old template (not yet done) was asked, so the switch (the
// rollout being done) came after them; firstNew and firstDone are when
// the first read that saw the new template (done) was answered, so the
// switch (done) came before them. Reads of a loaded apiserver can take
// seconds, so a check proves a violation only from the bounds that favour
// the hub: a member's switch as late as it may have been (firstNew), the
// previous member's done as early as it may have been (lastNotDone).
type rolloutTrace struct {
	lastOld, firstNew, lastNotDone, firstDone time.Time
}

// rollingTogether returns two members proven to have been rolling at one
// moment: each on the new template by then (switched before firstNew)
// and in its rollout or its minSuccessTime window (less the slack) still
// (done after lastNotDone, so the window lasts past lastNotDone + window).
func rollingTogether(members []string, traces map[string]*rolloutTrace, window time.Duration) (string, string, bool) {
	for i, m1 := range members {
		for _, m2 := range members[i+1:] {
			a, b := traces[m1], traces[m2]
			if a.firstNew.IsZero() || b.firstNew.IsZero() {
				continue
			}
			from := a.firstNew
			if b.firstNew.After(from) {
				from = b.firstNew
			}
			until := a.lastNotDone.Add(window)
			if u := b.lastNotDone.Add(window); u.Before(until) {
				until = u
			}
			if from.Before(until) {
				return m1, m2, true
			}
		}
	}
	return "", "", false
}

// switchViolation says how cur's switch to the new template is proven to
// break the order after member prevName, traced as prev ("" when it is
// not): before prev switched, before prev was done, or less than minGap
// after prev was done.
func switchViolation(prevName string, prev, cur *rolloutTrace, minGap time.Duration) string {
	switch {
	case cur.firstNew.Before(prev.lastOld):
		return "before " + prevName
	case cur.firstNew.Before(prev.lastNotDone):
		return fmt.Sprintf("before %s was fully updated and available", prevName)
	}
	if gap := cur.firstNew.Sub(prev.lastNotDone); gap < minGap {
		return fmt.Sprintf("at most %s after %s was fully updated and available", gap.Round(time.Millisecond), prevName)
	}
	return ""
}
