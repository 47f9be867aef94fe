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
// A group counts towards minGroups only through a cluster that may take new
// replicas; every cluster taken counts towards maxGroups.
//
// It is greedy. First the candidates that run the app now (sticky ones) are
// taken: those that add a group some constraint still needs for its
// minGroups, then the others that break no maxGroups. Then, in order, each
// other candidate that adds a needed group without breaking a maxGroups,
// and last every other candidate that breaks no maxGroups. Taking the
// sticky ones first makes a decision survive re-running on itself: they are
// a subset of a set that met every constraint. When that leaves a minGroups
// unmet (say maxGroups was lowered), the choice is made again without
// favouring them. With aggregate set, candidates are taken only until they
// hold the replicas (see divideAggregated), so Aggregated uses as few
// clusters as it may.
func (s *scheduler) choose(order []*candidate, aggregate bool) ([]*candidate, *failure) {
	k := len(s.spread)
	limited := aggregate || s.hasMax
	if k == 0 && !limited {
		return order, nil
	}
	g := s.groupCandidates(order)
	if f := g.eligible(s.spread); f != nil {
		return nil, f
	}
	if !limited {
		return order, nil
	}
	p := &picker{s: s, g: g, order: order, aggregate: aggregate}
	if !p.pick(true) && !p.pick(false) {
		for j, con := range s.spread {
			if p.grownCount[j] < con.min {
				return nil, &failure{
					reason:  v1alpha1.ReasonSpreadConstraintsNotMet,
					message: fmt.Sprintf("no choice of clusters meets every spread constraint: spread by %s reaches %d of the %d groups it needs", con.field, p.grownCount[j], con.min),
				}
			}
		}
	}
	out := make([]*candidate, 0, len(order))
	for i, c := range order {
		if p.chosen[i] {
			out = append(out, c)
		}
	}
	return out, nil
}

// groups numbers, for each spread constraint, the group of each candidate.
type groups struct {
	k       int
	gids    []int32 // candidate i, constraint j: gids[i*k+j]
	ngroups []int
	// eligibleGroups counts, and names lists (sorted, not for the cluster
	// field), the groups with a cluster that may take new replicas.
	eligibleGroups []int
	names          [][]string
}

func (s *scheduler) groupCandidates(order []*candidate) *groups {
	k, n := len(s.spread), len(order)
	g := &groups{k: k, gids: make([]int32, n*k), ngroups: make([]int, k), names: make([][]string, k)}
	for j, con := range s.spread {
		if con.field == v1alpha1.SpreadByFieldCluster {
			for i := range order {
				g.gids[i*k+j] = int32(i)
			}
			g.ngroups[j] = n
			continue
		}
		ids := map[string]int32{}
		for i, c := range order {
			name := groupOf(c.c.mc, con.field)
			id, ok := ids[name]
			if !ok {
				id = int32(len(ids))
				ids[name] = id
			}
			g.gids[i*k+j] = id
		}
		g.ngroups[j] = len(ids)
	}
	// Only clusters that may take new replicas make a group eligible: a
	// cluster that merely keeps what it has (not Ready, NoSchedule) may
	// lose its replicas to a scale down, and whether it counted would then
	// depend on the previous decision.
	g.eligibleGroups = make([]int, k)
	for j, con := range s.spread {
		seen := make([]bool, g.ngroups[j])
		for i, c := range order {
			if id := g.gids[i*k+j]; c.grow && !seen[id] {
				seen[id] = true
				g.eligibleGroups[j]++
				if con.field != v1alpha1.SpreadByFieldCluster {
					g.names[j] = append(g.names[j], groupOf(c.c.mc, con.field))
				}
			}
		}
		slices.Sort(g.names[j])
	}
	return g
}

// eligible fails when a constraint has fewer groups than its minGroups.
func (g *groups) eligible(cons []constraint) *failure {
	for j, con := range cons {
		if g.eligibleGroups[j] < con.min {
			msg := fmt.Sprintf("spread by %s needs at least %d groups but %d are eligible", con.field, con.min, g.eligibleGroups[j])
			if len(g.names[j]) > 0 {
				msg += " (" + strings.Join(g.names[j], ", ") + ")"
			}
			return &failure{reason: v1alpha1.ReasonSpreadConstraintsNotMet, message: msg}
		}
	}
	return nil
}

// picker is the state of one greedy choice.
type picker struct {
	s         *scheduler
	g         *groups
	order     []*candidate
	aggregate bool

	chosen []bool
	// used and count track the groups taken, for maxGroups; grown and
	// grownCount those with a cluster that may take new replicas, for
	// minGroups.
	used, grown       [][]bool
	count, grownCount []int
	baseSum, capSum   int64
}

func (p *picker) reset() {
	n, k := len(p.order), p.g.k
	p.chosen = make([]bool, n)
	p.used, p.grown = make([][]bool, k), make([][]bool, k)
	for j := range p.used {
		p.used[j], p.grown[j] = make([]bool, p.g.ngroups[j]), make([]bool, p.g.ngroups[j])
	}
	p.count, p.grownCount = make([]int, k), make([]int, k)
	p.baseSum, p.capSum = 0, 0
}

func (p *picker) gid(i, j int) int32 { return p.g.gids[i*p.g.k+j] }

// fits says taking candidate i breaks no maxGroups.
func (p *picker) fits(i int) bool {
	for j, con := range p.s.spread {
		if con.max > 0 && !p.used[j][p.gid(i, j)] && p.count[j] >= con.max {
			return false
		}
	}
	return true
}

// needed says candidate i adds a group a minGroups still needs.
func (p *picker) needed(i int) bool {
	if !p.order[i].grow {
		return false
	}
	for j, con := range p.s.spread {
		if p.grownCount[j] < con.min && !p.grown[j][p.gid(i, j)] {
			return true
		}
	}
	return false
}

// minsMet says every minGroups is met.
func (p *picker) minsMet() bool {
	for j, con := range p.s.spread {
		if p.grownCount[j] < con.min {
			return false
		}
	}
	return true
}

func (p *picker) take(i int) {
	p.chosen[i] = true
	for j := range p.s.spread {
		g := p.gid(i, j)
		if !p.used[j][g] {
			p.used[j][g] = true
			p.count[j]++
		}
		if p.order[i].grow && !p.grown[j][g] {
			p.grown[j][g] = true
			p.grownCount[j]++
		}
	}
	p.baseSum += p.order[i].base
	p.capSum += p.order[i].cap
}

// enough says Aggregated needs no more clusters before candidate c: those
// taken hold the replicas already, or (once past the clusters that run the
// app) can hold them.
func (p *picker) enough(c *candidate) bool {
	r := p.s.replicas
	return p.aggregate && (p.baseSum >= r || (c.base == 0 && p.capSum >= r))
}

// pick makes one greedy choice and reports whether every minGroups is met.
func (p *picker) pick(stickyFirst bool) bool {
	p.reset()
	if stickyFirst {
		for i, c := range p.order {
			if c.sticky && p.needed(i) && p.fits(i) {
				p.take(i)
			}
		}
		for i, c := range p.order {
			if c.sticky && !p.chosen[i] && !p.enough(c) && p.fits(i) {
				p.take(i)
			}
		}
	}
	for i := range p.order {
		if !p.chosen[i] && p.needed(i) && p.fits(i) {
			p.take(i)
		}
	}
	if !p.minsMet() {
		return false
	}
	for i, c := range p.order {
		if p.chosen[i] {
			continue
		}
		if p.enough(c) {
			break
		}
		if p.fits(i) {
			p.take(i)
		}
	}
	return true
}
