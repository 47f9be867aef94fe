package membercluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Defaults of the partition brake and the eviction rate limit.
const (
	// DefaultBrakeThreshold is the share of members that may be
	// unreachable at once before the hub assumes that it is the one cut
	// off and taints none of them.
	DefaultBrakeThreshold = 0.55
	// DefaultEvictionRateLimit clusters at most are tainted unreachable
	// per DefaultEvictionRateInterval.
	DefaultEvictionRateLimit    = 1
	DefaultEvictionRateInterval = 30 * time.Second
)

// evictionPolicy configures decideEvictions.
type evictionPolicy struct {
	// grace is the heartbeat grace period.
	grace time.Duration
	// brakeThreshold: the brake holds when more than this share of the
	// members (0..1) turned unreachable within one grace period. 1 or
	// more turns the brake off.
	brakeThreshold float64
	// rateLimit clusters at most are tainted per rateInterval; 0 turns the
	// limit off.
	rateLimit    int
	rateInterval time.Duration
}

// memberSilence is what decideEvictions knows of one member.
type memberSilence struct {
	name string
	// silentSince is when this hub last heard of the member (its last
	// heartbeat, or this hub's start when that is later and it heard
	// nothing since); zero for a member whose agent never connected,
	// which runs nothing and counts for nothing.
	silentSince time.Time
	// taintedAt is the TimeAdded of its unreachable taint; nil when it
	// has none.
	taintedAt *time.Time
}

// Why an unreachable member is not tainted.
const (
	holdBrake     = "brake"
	holdRateLimit = "rateLimit"
	// holdBrakeReleased: the brake held it and released less than a grace
	// period ago; its grace restarted then (decideTaint).
	holdBrakeReleased = "brakeReleased"
)

// evictionDecision is decideEvictions' answer.
type evictionDecision struct {
	// taint names the members that carry the unreachable taint after the
	// decision: those that keep theirs and those to taint now.
	taint map[string]bool
	// held names the unreachable members left untainted, with why
	// (holdBrake or holdRateLimit).
	held map[string]string
	// brake says the partition brake holds; counted members turned
	// unreachable (or fell silent) within one grace period, of population
	// members that ever connected.
	brake               bool
	counted, population int
	// nextSlot is when the rate limit lets the next member be tainted
	// (zero when nobody waits for it).
	nextSlot time.Time
	// recheckAfter is when the decision changes with time alone (0:
	// never); heartbeats and disconnects bring their own reconciles.
	recheckAfter time.Duration
}

// decideEvictions decides which members carry the unreachable taint, like
// the node lifecycle controller's zone handling: a member silent past the
// grace period is tainted, unless
//
//   - the partition brake holds: more than brakeThreshold of the members
//     fell silent within one grace period. A hub cut off from most of its
//     fleet cannot tell that from the fleet failing, and moving everything
//     onto the few members it still hears would be the worse mistake; so
//     it taints none of them, and lifts the taints it added within the last
//     grace period (they were likely the first of the same partition; with
//     a toleration longer than the time the others took to fall silent
//     nothing was evicted yet). Members count when they are past the grace
//     period and untainted or tainted within the last grace period, or
//     silent for more than half of it: the first member to cross the grace
//     period finds the others already counted, not a step behind.
//     Members tainted longer ago were lost on their own and do not count.
//   - the rate limit is spent: at most rateLimit members are tainted per
//     rateInterval (counted on the taints' TimeAdded, which the hub sets);
//     the others wait, longest silent first.
//
// A member that heartbeats again loses its taint at once. It is pure: no
// clock, no client.
func decideEvictions(members []memberSilence, now time.Time, p evictionPolicy) evictionDecision {
	d := evictionDecision{taint: map[string]bool{}, held: map[string]string{}}
	lost := d.count(members, now, p)
	d.brake = p.brakeThreshold < 1 && d.population > 0 &&
		float64(d.counted) > p.brakeThreshold*float64(d.population)

	// Time alone changes the decision only where a count or a slot runs
	// out: a member crossing its grace period is reconciled at its own
	// deadline (computeHealth), which decides again from the timestamps.
	var recheck time.Time
	if d.brake {
		recheck = d.holdForBrake(lost, now, p)
	} else {
		recheck = d.spendRateLimit(lost, now, p)
	}
	d.recheckAfter = after(recheck, now)
	return d
}

// within says whether at is set and less than window before now.
func within(at *time.Time, now time.Time, window time.Duration) bool {
	return at != nil && now.Sub(*at) < window
}

// soonest moves *recheck to t when t is after now and earlier.
func soonest(recheck *time.Time, t, now time.Time) {
	if t.After(now) && (recheck.IsZero() || t.Before(*recheck)) {
		*recheck = t
	}
}

// count counts the population (members that ever connected) and the
// members that turned unreachable, or fell silent for more than half the
// grace, within one grace period; it returns the members past their grace.
func (d *evictionDecision) count(members []memberSilence, now time.Time, p evictionPolicy) []memberSilence {
	var lost []memberSilence
	for _, m := range members {
		if m.silentSince.IsZero() {
			continue
		}
		d.population++
		deadline := m.silentSince.Add(p.grace)
		silent := now.Sub(m.silentSince)
		switch {
		case now.After(deadline):
			lost = append(lost, m)
			if m.taintedAt == nil || within(m.taintedAt, now, p.grace) {
				d.counted++
			}
		case silent > p.grace/2:
			d.counted++
		}
	}
	return lost
}

// holdForBrake holds every lost member but those tainted before the last
// grace period, and returns when a recent taint stops counting (which may
// release the brake).
func (d *evictionDecision) holdForBrake(lost []memberSilence, now time.Time, p evictionPolicy) time.Time {
	var recheck time.Time
	for _, m := range lost {
		if within(m.taintedAt, now, p.grace) {
			soonest(&recheck, m.taintedAt.Add(p.grace), now)
		}
	}
	for _, m := range lost {
		if m.taintedAt != nil && !within(m.taintedAt, now, p.grace) {
			d.taint[m.name] = true
			continue
		}
		d.held[m.name] = holdBrake
	}
	return recheck
}

// spendRateLimit keeps the taints in place and taints the lost members,
// longest silent first, while the rate limit allows; the rest wait for
// the next slot, which it returns.
func (d *evictionDecision) spendRateLimit(lost []memberSilence, now time.Time, p evictionPolicy) time.Time {
	used := 0
	var oldestRecent *time.Time
	for _, m := range lost {
		if m.taintedAt == nil {
			continue
		}
		d.taint[m.name] = true
		if p.rateLimit > 0 && within(m.taintedAt, now, p.rateInterval) {
			used++
			if oldestRecent == nil || m.taintedAt.Before(*oldestRecent) {
				oldestRecent = m.taintedAt
			}
		}
	}
	waiting := slices.DeleteFunc(slices.Clone(lost), func(m memberSilence) bool { return m.taintedAt != nil })
	slices.SortFunc(waiting, func(a, b memberSilence) int {
		if c := a.silentSince.Compare(b.silentSince); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, m := range waiting {
		if p.rateLimit > 0 && used >= p.rateLimit {
			d.held[m.name] = holdRateLimit
			continue
		}
		d.taint[m.name] = true
		used++
		if p.rateLimit > 0 && oldestRecent == nil {
			t := now
			oldestRecent = &t
		}
	}
	var recheck time.Time
	if len(d.held) > 0 && oldestRecent != nil {
		d.nextSlot = oldestRecent.Add(p.rateInterval)
		soonest(&recheck, d.nextSlot, now)
	}
	return recheck
}

// after is t - now, or 0 for a zero t.
func after(t, now time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(now)
}

// heldMessage says why an unreachable member is not tainted.
func heldMessage(why string, d evictionDecision, p evictionPolicy) string {
	switch why {
	case holdBrake:
		return fmt.Sprintf("not tainted unreachable: the partition brake holds (%d of %d members fell silent within one grace period, more than %.0f%%), so this hub assumes it is the one cut off and evicts nothing; see ConfigMap %s",
			d.counted, d.population, p.brakeThreshold*100, flotillav1.HubStatusConfigMapName)
	case holdBrakeReleased:
		return fmt.Sprintf("not tainted unreachable yet: the partition brake held it and released; its grace period (%s) restarted then, while the partition heals", p.grace)
	case holdRateLimit:
		return fmt.Sprintf("not tainted unreachable yet: waiting for the eviction rate limit (at most %d cluster(s) per %s; next at %s)",
			p.rateLimit, p.rateInterval, d.nextSlot.UTC().Format(time.RFC3339))
	}
	return ""
}
