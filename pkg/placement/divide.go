package placement

import (
	"fmt"
	"slices"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// candidate is a cluster that may run the app under the affinity group
// being tried.
type candidate struct {
	c *cluster
	// base is how many replicas it holds (see holds).
	base int64
	// weight is the static weight (static Weighted) or the room for more
	// replicas (everything else); it orders candidates and shares replicas.
	weight int64
	// cap is how many replicas it can hold in all (Aggregated only).
	cap int64
	// rank and idx (the position in name order) order candidates (see
	// preferred).
	rank uint64
	idx  int32
	// grow says it may take new replicas; a candidate that may not keeps
	// at most the replicas it holds.
	grow bool
	// holds says it runs the app now (or fails back to it in this call).
	holds bool
	// sticky says choosing prefers it because it runs the app: holds,
	// except with static weights, whose choice depends on the weights
	// alone so that it is the same whatever ran before.
	sticky bool
	// chosen and assigned are the outcome.
	chosen   bool
	assigned int64
}

// failure says why an affinity group could not be scheduled.
type failure struct {
	reason  string
	message string
}

func unschedulable(format string, args ...any) *failure {
	return &failure{reason: v1alpha1.ReasonUnschedulable, message: fmt.Sprintf(format, args...)}
}

// preferred orders candidates for choosing: sticky clusters first (those
// failing back first of all, as they get their place back; then the ones
// holding more replicas), then those that may take new replicas, then the
// higher weight or the more room, then the name. rankKey packs the first
// criteria into one integer and idx stands for the name, so that sorting
// thousands of candidates compares integers only.
func preferred(a, b *candidate) int {
	switch {
	case a.rank != b.rank:
		return boolFirst(a.rank > b.rank)
	case a.weight != b.weight:
		return boolFirst(a.weight > b.weight)
	}
	// Candidates are numbered in name order.
	return int(a.idx) - int(b.idx)
}

// rankKey sets c.rank: bit 34 sticky, bit 33 failing back (sticky only),
// bits 1-32 the replicas held (sticky only), bit 0 may take new ones.
func (c *candidate) rankKey() {
	var r uint64
	if c.sticky {
		r |= 1 << 34
		if c.c.returning {
			r |= 1 << 33
		}
		r |= uint64(min(max(c.base, 0), 1<<32-1)) << 1
	}
	if c.grow {
		r |= 1
	}
	c.rank = r
}

// boolFirst orders a before b when first holds, after it otherwise.
func boolFirst(first bool) int {
	if first {
		return -1
	}
	return 1
}

// apportion shares total among len(weights) parts by weight with the
// largest-remainder (Hamilton) rule and adds each part to out. Every part
// gets the whole part of its quota total*w/W; the replicas left over (fewer
// than the number of parts) go one each to the largest fractional parts.
// Ties go first to a part whose prev exceeds its whole quota (it held that
// replica already, so nothing moves), then to the lower index; callers pass
// the parts in a fixed order (by name, or by preference when spread
// constraints ordered them), so ties never depend on input order. prev may
// be nil. When every weight is 0 the parts are weighted equally.
//
// Because each part is below its quota plus one, a part never gets more
// than ceil(total*w/W); in particular a weight w that is a capacity with
// total <= W is never exceeded.
func apportion(total int64, weights, prev, out []int64) {
	if total <= 0 || len(weights) == 0 {
		return
	}
	var sum int64
	for _, w := range weights {
		sum += w
	}
	equal := sum == 0
	if equal {
		sum = int64(len(weights))
	}
	type rank struct {
		i   int
		rem int64
		had bool
	}
	var ranks []rank
	left := total
	for i, w := range weights {
		if equal {
			w = 1
		}
		if w <= 0 {
			continue
		}
		share, rem := total*w/sum, total*w%sum
		out[i] += share
		left -= share
		if rem > 0 {
			ranks = append(ranks, rank{i: i, rem: rem, had: prev != nil && prev[i] > share})
		}
	}
	if left <= 0 {
		return
	}
	slices.SortFunc(ranks, func(a, b rank) int {
		switch {
		case a.rem != b.rem:
			if a.rem > b.rem {
				return -1
			}
			return 1
		case a.had != b.had:
			if a.had {
				return -1
			}
			return 1
		}
		return a.i - b.i
	})
	for j := 0; j < int(left) && j < len(ranks); j++ {
		out[ranks[j].i]++
	}
}

// divideDuplicated runs the full replica count on every chosen cluster.
func divideDuplicated(chosen []*candidate, replicas int64) *failure {
	if len(chosen) == 0 {
		return unschedulable("no cluster can run the app")
	}
	for _, c := range chosen {
		c.assigned = replicas
	}
	return nil
}

// divideStatic shares replicas by static weights, afresh on every call: the
// weights are the user's statement of the shape, so the result depends only
// on them, the replica count and the chosen clusters (ties aside). A new
// cluster that matches no weight entry changes nothing.
//
// A cluster that may take no new replicas keeps the lesser of what it holds
// and its share, and the others share the rest. Its share is computed with
// ties broken without the previous decision, so that re-running on the
// result changes nothing.
func divideStatic(chosen []*candidate, replicas int64) *failure {
	n := len(chosen)
	weights, prev, out := make([]int64, n), make([]int64, n), make([]int64, n)
	kept := false
	for i, c := range chosen {
		weights[i], prev[i] = c.weight, c.base
		kept = kept || !c.grow
	}
	if !kept {
		apportion(replicas, weights, prev, out)
		for i, c := range chosen {
			c.assigned = out[i]
		}
		return nil
	}
	apportion(replicas, weights, nil, out)
	left := replicas
	var growers []*candidate
	for i, c := range chosen {
		if c.grow {
			growers = append(growers, c)
			continue
		}
		c.assigned = min(c.base, out[i])
		left -= c.assigned
	}
	if left > 0 && len(growers) == 0 {
		return unschedulable("%d replicas need a cluster that may take new replicas", left)
	}
	weights, prev, out = weights[:0], prev[:0], out[:0]
	for _, c := range growers {
		weights, prev, out = append(weights, c.weight), append(prev, c.base), append(out, 0)
	}
	apportion(left, weights, prev, out)
	for i, c := range growers {
		c.assigned = out[i]
	}
	return nil
}

// divideDynamic shares replicas by spare capacity ("AvailableReplicas").
//
// Capacity changes all the time, not least because of the app's own
// replicas, so a fresh division on every call would move replicas back and
// forth. The division is therefore incremental, as Karmada's is: clusters
// keep what they hold; on scale up (or when replicas were lost with an
// evicted or deselected cluster) only the missing replicas are shared, by
// the clusters' room, never giving a cluster more than its room while the
// others have some; on scale down every cluster gives up replicas in
// proportion to what it holds, which keeps the shape. A cluster failing back
// gets back what it ran when it was evicted, taken from the others.
//
// It returns how many replicas were placed beyond the clusters' room.
func (s *scheduler) divideDynamic(chosen []*candidate, replicas int64) (int64, *failure) {
	var total, returning int64
	for _, c := range chosen {
		c.assigned = 0
		total += c.base
		if c.c.returning {
			returning += c.base
		}
	}
	switch {
	case total > replicas:
		// Scale down the clusters that stay, sparing those failing back
		// unless even they hold too many.
		others := total - returning
		if drop := total - replicas; others >= drop {
			shrink(chosen, func(c *candidate) bool { return !c.c.returning }, others-drop)
			for _, c := range chosen {
				if c.c.returning {
					c.assigned = c.base
				}
			}
		} else {
			shrink(chosen, func(c *candidate) bool { return c.c.returning }, replicas)
		}
		return 0, nil
	case total == replicas:
		for _, c := range chosen {
			c.assigned = c.base
		}
		return 0, nil
	}
	for _, c := range chosen {
		c.assigned = c.base
	}
	return grow(chosen, replicas-total)
}

// shrink sets the assigned replicas of the candidates that pick selects to
// a total of keep, in proportion to what they hold.
func shrink(chosen []*candidate, pick func(*candidate) bool, keep int64) {
	var sel []*candidate
	for _, c := range chosen {
		if pick(c) {
			sel = append(sel, c)
		}
	}
	weights, out := make([]int64, len(sel)), make([]int64, len(sel))
	for i, c := range sel {
		weights[i] = c.base
	}
	apportion(keep, weights, nil, out)
	for i, c := range sel {
		c.assigned = out[i]
	}
}

// grow adds more replicas to the candidates that may take new ones, by
// room: while the room suffices every cluster gets at most its room; when
// it does not, each is filled to its room and the rest is shared by room
// (equally when no cluster has any). It returns how many replicas went
// beyond the room.
func grow(chosen []*candidate, more int64) (int64, *failure) {
	var growers []*candidate
	var room int64
	for _, c := range chosen {
		if c.grow {
			growers = append(growers, c)
			room += c.weight
		}
	}
	if len(growers) == 0 {
		return 0, unschedulable("%d replicas need a cluster that may take new replicas", more)
	}
	weights, out := make([]int64, len(growers)), make([]int64, len(growers))
	for i, c := range growers {
		weights[i] = c.weight
	}
	beyond := int64(0)
	if more > room {
		for _, c := range growers {
			c.assigned += c.weight
		}
		beyond = more - room
		more = beyond
	}
	apportion(more, weights, nil, out)
	for i, c := range growers {
		c.assigned += out[i]
	}
	return beyond, nil
}

// divideAggregated packs replicas into as few clusters as it may, the
// roomiest first, keeping the clusters that run the app while they still
// hold it. choose has already picked the clusters: those failing back, then
// those that run the app (the biggest first, stopping once they hold all
// replicas, so a scale down drops the smallest), then new ones by room until
// the replicas fit. Here every chosen cluster that holds replicas or has
// room first gets one (so every group a spread constraint asked for is
// used), then each keeps what it holds, and the rest fills the clusters'
// room in order.
//
// A cluster's cap is its room plus the replicas it runs, which the room
// does not count as free; a cluster failing back has only its room.
func (s *scheduler) divideAggregated(chosen []*candidate, replicas int64) (int64, *failure) {
	left := replicas
	for _, c := range chosen {
		c.assigned = 0
		if left > 0 && (c.base > 0 || (c.grow && c.cap > 0)) {
			c.assigned, left = 1, left-1
		}
	}
	for _, c := range chosen {
		if add := min(c.base-c.assigned, left); add > 0 {
			c.assigned, left = c.assigned+add, left-add
		}
	}
	for _, c := range chosen {
		if left > 0 && c.grow && c.cap > c.assigned {
			add := min(c.cap-c.assigned, left)
			c.assigned, left = c.assigned+add, left-add
		}
	}
	if left > 0 {
		// Everything chosen is full. Share the rest by the clusters' cap,
		// or put it all on the first when none has any, to keep the
		// clusters few.
		var growers []*candidate
		for _, c := range chosen {
			if c.grow {
				growers = append(growers, c)
			}
		}
		if len(growers) == 0 {
			return 0, unschedulable("%d replicas need a cluster that may take new replicas", left)
		}
		weights, out := make([]int64, len(growers)), make([]int64, len(growers))
		var sum int64
		for i, c := range growers {
			weights[i] = c.cap
			sum += c.cap
		}
		if sum == 0 {
			weights[0] = 1
		}
		apportion(left, weights, nil, out)
		for i, c := range growers {
			c.assigned += out[i]
		}
	}
	var beyond int64
	for _, c := range chosen {
		if c.grow && c.assigned > c.cap {
			beyond += c.assigned - c.cap
		}
	}
	return beyond, nil
}
