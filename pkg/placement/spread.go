package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// constraint is a compiled spread constraint; 0 means unset.
type constraint struct {
	field    v1alpha1.SpreadByField
	min, max int
}

func compileSpread(list []v1alpha1.SpreadConstraint) ([]constraint, error) {
	out := make([]constraint, 0, len(list))
	for _, sc := range list {
		switch sc.SpreadByField {
		case v1alpha1.SpreadByFieldCluster, v1alpha1.SpreadByFieldRegion, v1alpha1.SpreadByFieldZone, v1alpha1.SpreadByFieldProvider:
		default:
			return nil, fmt.Errorf("spreadConstraints: unknown spreadByField %q", sc.SpreadByField)
		}
		c := constraint{field: sc.SpreadByField}
		if sc.MinGroups != nil {
			c.min = int(max(*sc.MinGroups, 0))
		}
		if sc.MaxGroups != nil {
			c.max = int(max(*sc.MaxGroups, 0))
			if c.max == 0 {
				return nil, fmt.Errorf("spreadConstraints: maxGroups of %s must be at least 1", sc.SpreadByField)
			}
		}
		if c.max > 0 && c.min > c.max {
			return nil, fmt.Errorf("spreadConstraints: minGroups %d of %s exceeds maxGroups %d", c.min, sc.SpreadByField, c.max)
		}
		out = append(out, c)
	}
	return out, nil
}

// groupOf is the group a cluster belongs to under field.
func groupOf(mc *v1alpha1.MemberCluster, f v1alpha1.SpreadByField) string {
	switch f {
	case v1alpha1.SpreadByFieldRegion:
		return mc.Spec.Region
	case v1alpha1.SpreadByFieldZone:
		return mc.Spec.Zone
	case v1alpha1.SpreadByFieldProvider:
		return mc.Spec.Provider
	}
	return mc.Name
}

// missingSpreadField returns the field a spread constraint groups by that
// the cluster leaves empty, or "". Such a cluster cannot be counted in any
// group, so it is filtered out (as Karmada's SpreadConstraint filter does).
func (s *scheduler) missingSpreadField(mc *v1alpha1.MemberCluster) v1alpha1.SpreadByField {
	for i := range s.spread {
		if s.spread[i].field != v1alpha1.SpreadByFieldCluster && groupOf(mc, s.spread[i].field) == "" {
			return s.spread[i].field
		}
	}
	return ""
}

// choose returns the candidates that run the app, in the order given, such
// that every spread constraint holds. order must be in preference order
// whenever it matters: when a constraint has maxGroups or when aggregate is
// set.
//
// It works greedily in two passes over order. The first takes, in order,
// each candidate that adds a group some constraint still needs for its
// minGroups without breaking any maxGroups; the second adds every other
// candidate that breaks no maxGroups. With aggregate set, the second pass
// stops as soon as the clusters taken hold the replicas (see
// divideAggregated), so Aggregated uses as few clusters as it may.
func (s *scheduler) choose(order []*candidate, aggregate bool) ([]*candidate, *failure) {
	k := len(s.spread)
	limited := aggregate
	for _, c := range s.spread {
		limited = limited || c.max > 0
	}
	if k == 0 && !limited {
		return order, nil
	}

	// Number each constraint's groups among the candidates.
	n := len(order)
	gids := make([]int32, n*k)
	ngroups := make([]int, k)
	var names [][]string
	for j, con := range s.spread {
		if con.field == v1alpha1.SpreadByFieldCluster {
			for i := range order {
				gids[i*k+j] = int32(i)
			}
			ngroups[j] = n
			continue
		}
		ids := map[string]int32{}
		for i, c := range order {
			g := groupOf(c.c.mc, con.field)
			id, ok := ids[g]
			if !ok {
				id = int32(len(ids))
				ids[g] = id
			}
			gids[i*k+j] = id
		}
		ngroups[j] = len(ids)
		if names == nil {
			names = make([][]string, k)
		}
		names[j] = make([]string, 0, len(ids))
		for g := range ids {
			names[j] = append(names[j], g)
		}
		slices.Sort(names[j])
	}
	for j, con := range s.spread {
		if ngroups[j] < con.min {
			msg := fmt.Sprintf("spread by %s needs at least %d groups but %d are eligible", con.field, con.min, ngroups[j])
			if names != nil && len(names[j]) > 0 {
				msg += " (" + strings.Join(names[j], ", ") + ")"
			}
			return nil, &failure{reason: v1alpha1.ReasonSpreadConstraintsNotMet, message: msg}
		}
	}
	if !limited {
		return order, nil
	}

	used := make([][]bool, k)
	count := make([]int, k)
	for j := range used {
		used[j] = make([]bool, ngroups[j])
	}
	chosen := make([]bool, n)
	var baseSum, capSum int64
	fits := func(i int) bool {
		for j, con := range s.spread {
			if con.max > 0 && !used[j][gids[i*k+j]] && count[j] >= con.max {
				return false
			}
		}
		return true
	}
	take := func(i int) {
		chosen[i] = true
		for j := range s.spread {
			if g := gids[i*k+j]; !used[j][g] {
				used[j][g] = true
				count[j]++
			}
		}
		baseSum += order[i].base
		capSum += order[i].cap
	}

	for i := range order {
		needed := false
		for j, con := range s.spread {
			if count[j] < con.min && !used[j][gids[i*k+j]] {
				needed = true
				break
			}
		}
		if needed && fits(i) {
			take(i)
		}
	}
	for j, con := range s.spread {
		if count[j] < con.min {
			return nil, &failure{
				reason:  v1alpha1.ReasonSpreadConstraintsNotMet,
				message: fmt.Sprintf("no choice of clusters meets every spread constraint: spread by %s reaches %d of the %d groups it needs", con.field, count[j], con.min),
			}
		}
	}
	for i, c := range order {
		if chosen[i] {
			continue
		}
		if aggregate && (baseSum >= s.replicas || (c.base == 0 && capSum >= s.replicas)) {
			break
		}
		if fits(i) {
			take(i)
		}
	}

	out := make([]*candidate, 0, n)
	for i, c := range order {
		if chosen[i] {
			out = append(out, c)
		}
	}
	return out, nil
}
