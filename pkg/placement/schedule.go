package placement

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// mode is how replicas are shared, from spec.placement.replicaScheduling.
type mode int

const (
	duplicated      mode = iota // every chosen cluster runs spec.replicas
	staticWeighted              // Divided, Weighted, static (or equal) weights
	dynamicWeighted             // Divided, Weighted, dynamicWeight AvailableReplicas
	aggregated                  // Divided, Aggregated
)

// scheduler holds one Schedule call's compiled input and what it learned.
type scheduler struct {
	in       *Input
	now      time.Time
	replicas int64
	mode     mode

	terms           []term
	tolerations     []corev1.Toleration
	spread          []constraint
	hasMax          bool
	weights         []staticWeight // nil: equal weights
	requests        []request
	clusterRequests map[string][]request
	failbackEnabled bool
	failbackWindow  time.Duration

	// clusters are the member clusters sorted by name.
	clusters []cluster
	// requeue is the result's RequeueAfter; anyExpiry says some cluster
	// has a NoExecute toleration that runs out.
	requeue   time.Duration
	anyExpiry bool
}

// Schedule decides how many replicas run in which member cluster. It tries
// the affinity groups in order and returns the first schedulable result.
//
// An app with 0 replicas is always schedulable, and scaling to zero moves
// nothing (see keepAtZero): Divided keeps the clusters of the previous
// decision, in its affinity group, at 0 replicas; Duplicated lists every
// selected cluster at 0, or, when none can be selected, keeps those of the
// previous decision. Every target then has Reason KeptAtZero.
//
// When no group is schedulable the error is a *ScheduleError (see
// ErrUnschedulable and ErrSpreadConstraintsNotMet); the Result then carries
// only Evicted and RequeueAfter, and the caller should keep its previous
// decision and look again after RequeueAfter (a cluster may be about to
// fail back) or when a MemberCluster changes. Any other error means the
// input is invalid (for example a malformed label selector).
func Schedule(in Input) (Result, error) {
	s, err := newScheduler(&in)
	if err != nil {
		return Result{}, err
	}
	res := Result{Evicted: s.evictions()}
	var attempts []Attempt
	for _, t := range s.zeroFirst() {
		o := s.attempt(t)
		if o.fail != nil {
			attempts = append(attempts, Attempt{AffinityName: t.name, Reason: o.fail.reason, Message: o.fail.message, Filtered: o.filtered})
			continue
		}
		return s.result(res, t, o), nil
	}
	if s.replicas == 0 {
		// Duplicated, and no cluster can be selected: nothing is placed,
		// so nothing fails; the app keeps its Works where they are.
		t := s.zeroFirst()[0]
		o, cands := s.candidates(t)
		s.keepAtZero(cands, &o)
		return s.result(res, t, o), nil
	}
	// The caller keeps its previous decision, so that decision's
	// tolerations are the ones that run out.
	if in.Previous != nil {
		s.requeueOnExpiry(in.Previous.Clusters)
	}
	res.RequeueAfter = s.requeue
	serr := &ScheduleError{Reason: v1alpha1.ReasonSpreadConstraintsNotMet, Attempts: attempts}
	for _, a := range attempts {
		if a.Reason != v1alpha1.ReasonSpreadConstraintsNotMet {
			serr.Reason = v1alpha1.ReasonUnschedulable
		}
	}
	return res, serr
}

// result completes res with the outcome o of trying group t.
func (s *scheduler) result(res Result, t term, o outcome) Result {
	res.Clusters, res.Filtered, res.AffinityName = o.clusters, o.filtered, t.name
	if s.replicas == 0 {
		for i := range res.Clusters {
			res.Clusters[i].Reason = v1alpha1.TargetReasonKeptAtZero
		}
	}
	s.requeueOnExpiry(res.Clusters)
	res.RequeueAfter = s.requeue
	if o.beyond > 0 {
		res.BeyondCapacity = int32(o.beyond)
		res.Warnings = append(res.Warnings, fmt.Sprintf("%d of %d replicas are placed beyond the spare capacity the clusters report", o.beyond, s.replicas))
	}
	return res
}

// zeroFirst returns the affinity groups in the order to try them. At 0
// replicas the group of the previous decision comes first, so that scaling
// to zero keeps the app where it runs instead of moving it back to a
// preferred group with nothing placed (it moves when it scales up again).
func (s *scheduler) zeroFirst() []term {
	if s.replicas != 0 || s.in.Previous == nil || len(s.terms) < 2 {
		return s.terms
	}
	for i, t := range s.terms {
		if t.name == s.in.Previous.AffinityName && i > 0 {
			out := make([]term, 0, len(s.terms))
			out = append(out, t)
			out = append(out, s.terms[:i]...)
			return append(out, s.terms[i+1:]...)
		}
	}
	return s.terms
}

// newScheduler compiles the input and assesses every cluster's health,
// evictions and failback, none of which depends on the affinity group.
func newScheduler(in *Input) (*scheduler, error) {
	if in.Replicas < 0 {
		return nil, fmt.Errorf("replicas must not be negative, got %d", in.Replicas)
	}
	s := &scheduler{in: in, now: in.Now, replicas: int64(in.Replicas)}
	if err := s.compileMode(in.Placement.ReplicaScheduling); err != nil {
		return nil, err
	}
	var err error
	if s.terms, err = terms(&in.Placement); err != nil {
		return nil, err
	}
	if s.spread, err = compileSpread(in.Placement.SpreadConstraints); err != nil {
		return nil, err
	}
	for _, c := range s.spread {
		s.hasMax = s.hasMax || c.max > 0
	}
	s.tolerations = tolerations(in)
	s.failbackEnabled, s.failbackWindow = failoverPolicy(in.Failover)
	s.requests = compileRequests(in.Requests)
	for name, list := range in.ClusterRequests {
		if s.clusterRequests == nil {
			s.clusterRequests = map[string][]request{}
		}
		s.clusterRequests[name] = compileRequests(list)
	}
	s.assessClusters()
	return s, nil
}

// compileMode reads replicaScheduling; nil means Duplicated, and Divided
// without a preference means Weighted with equal weights, as the API says.
func (s *scheduler) compileMode(rs *v1alpha1.ReplicaSchedulingStrategy) error {
	if rs == nil {
		s.mode = duplicated
		return nil
	}
	switch rs.ReplicaSchedulingType {
	case "", v1alpha1.ReplicaSchedulingDuplicated:
		s.mode = duplicated
		return nil
	case v1alpha1.ReplicaSchedulingDivided:
	default:
		return fmt.Errorf("replicaScheduling: unknown replicaSchedulingType %q", rs.ReplicaSchedulingType)
	}
	switch rs.ReplicaDivisionPreference {
	case v1alpha1.ReplicaDivisionAggregated:
		s.mode = aggregated
		return nil
	case "", v1alpha1.ReplicaDivisionWeighted:
	default:
		return fmt.Errorf("replicaScheduling: unknown replicaDivisionPreference %q", rs.ReplicaDivisionPreference)
	}
	wp := rs.WeightPreference
	switch {
	case wp == nil || (len(wp.StaticWeightList) == 0 && wp.DynamicWeight == ""):
		s.mode = staticWeighted
	case len(wp.StaticWeightList) > 0 && wp.DynamicWeight != "":
		return fmt.Errorf("replicaScheduling: staticWeightList and dynamicWeight are mutually exclusive")
	case wp.DynamicWeight == v1alpha1.DynamicWeightAvailableReplicas:
		s.mode = dynamicWeighted
	case wp.DynamicWeight != "":
		return fmt.Errorf("replicaScheduling: unknown dynamicWeight %q", wp.DynamicWeight)
	default:
		s.mode = staticWeighted
		var err error
		if s.weights, err = compileStaticWeights(wp.StaticWeightList); err != nil {
			return fmt.Errorf("replicaScheduling: staticWeightList: %w", err)
		}
	}
	return nil
}

// assessClusters builds s.clusters, sorted by name (the first of clusters
// that share a name wins), and joins each with its entries in the previous
// decision.
func (s *scheduler) assessClusters() {
	in := s.in
	s.clusters = make([]cluster, len(in.Clusters))
	for i := range in.Clusters {
		s.clusters[i] = cluster{mc: &in.Clusters[i], name: in.Clusters[i].Name}
	}
	byName := func(a, b cluster) int { return strings.Compare(a.name, b.name) }
	if !slices.IsSortedFunc(s.clusters, byName) {
		slices.SortStableFunc(s.clusters, byName)
	}
	var prev []v1alpha1.TargetCluster
	var evicted []v1alpha1.EvictedCluster
	if in.Previous != nil {
		prev = sortedByName(in.Previous.Clusters, func(t v1alpha1.TargetCluster) string { return t.Name })
		evicted = sortedByName(in.Previous.Evicted, func(e v1alpha1.EvictedCluster) string { return e.Name })
	}

	pi, ei := 0, 0
	all := s.clusters
	s.clusters = all[:0]
	for i := range all {
		if i > 0 && all[i-1].name == all[i].name {
			continue
		}
		c := all[i]
		for pi < len(prev) && prev[pi].Name < c.name {
			pi++
		}
		if pi < len(prev) && prev[pi].Name == c.name {
			c.prev, c.inPrev = max(prev[pi].Replicas, 0), true
		}
		for ei < len(evicted) && evicted[ei].Name < c.name {
			ei++
		}
		s.assessHealth(&c)
		if ei < len(evicted) && evicted[ei].Name == c.name {
			s.failback(&c, &evicted[ei])
		}
		s.clusters = append(s.clusters, c)
	}
}

// requeueOnExpiry lowers RequeueAfter to the earliest time a tolerated
// NoExecute taint runs out on a cluster of targets: its replicas leave then.
func (s *scheduler) requeueOnExpiry(targets []v1alpha1.TargetCluster) {
	if !s.anyExpiry {
		return
	}
	for _, t := range targets {
		i, ok := slices.BinarySearchFunc(s.clusters, t.Name, func(c cluster, name string) int { return strings.Compare(c.name, name) })
		if ok && !s.clusters[i].expiry().IsZero() {
			s.requeueAt(s.clusters[i].expiry())
		}
	}
}

// sortedByName returns list sorted by name, copying it only when needed.
func sortedByName[T any](list []T, name func(T) string) []T {
	cmp := func(a, b T) int { return strings.Compare(name(a), name(b)) }
	if slices.IsSortedFunc(list, cmp) {
		return list
	}
	list = slices.Clone(list)
	slices.SortStableFunc(list, cmp)
	return list
}

// outcome is what trying one affinity group gave.
type outcome struct {
	clusters []v1alpha1.TargetCluster
	filtered []ClusterReason
	beyond   int64
	fail     *failure
}

func (o *outcome) filter(c *cluster, filter, reason string) {
	o.filtered = append(o.filtered, ClusterReason{Name: c.name, Filter: filter, Reason: reason})
}

// attempt schedules the app within one affinity group: filter, score,
// choose (spread), divide.
func (s *scheduler) attempt(t term) outcome {
	o, cands := s.candidates(t)
	if s.mode != duplicated && s.replicas == 0 {
		// Nothing to place, so nothing can fail.
		s.keepAtZero(cands, &o)
		return o
	}
	return s.place(cands, o)
}

// candidates filters the clusters for group t: the candidates, and in the
// outcome every cluster that may take no new replicas, with the reason.
func (s *scheduler) candidates(t term) (outcome, []candidate) {
	var o outcome
	cands := make([]candidate, 0, len(s.clusters))
	for i := range s.clusters {
		c := &s.clusters[i]
		if ok, why := accepted(c.mc); !ok {
			o.filter(c, FilterAcceptance, why)
			continue
		}
		if ok, why := t.aff.match(c.mc); !ok {
			o.filter(c, FilterClusterAffinity, why)
			continue
		}
		if f := s.missingSpreadField(c.mc); f != "" {
			o.filter(c, FilterSpreadConstraint, "has no "+string(f)+", which spreadConstraints group by")
			continue
		}
		if c.evicted() != nil {
			o.filter(c, FilterFailback, c.x.failbackMsg)
			continue
		}
		if c.evict {
			o.filter(c, FilterTaintToleration, c.x.evictMsg)
			if s.replicas > 0 || !c.inPrev {
				continue
			}
			// At 0 replicas nothing runs, so nothing is evicted: the
			// cluster keeps the app's Work at 0 (see keepAtZero).
		}
		cand := candidate{c: c, grow: c.block() == "" && !c.evict}
		switch {
		case c.returning:
			cand.holds, cand.base = true, int64(c.returnReplicas)
		case s.mode == duplicated:
			cand.holds, cand.base = c.inPrev, int64(c.prev)
		default:
			// Divided lists a cluster with 0 replicas only when it kept
			// the app's Work at zero: scaling up prefers it (sticky), so
			// the kept Deployment is reused, when it may take replicas.
			cand.holds, cand.base = c.prev > 0 || (c.inPrev && cand.grow), int64(c.prev)
		}
		cand.sticky = cand.holds && s.mode != staticWeighted
		if s.mode == staticWeighted {
			if cand.weight = s.weightOf(c); cand.weight == 0 {
				o.filter(c, FilterStaticWeight, "matches no staticWeightList entry")
				continue
			}
		}
		if !cand.grow && !c.evict {
			// It keeps what it holds but takes nothing new.
			o.filter(c, c.x.blockFilter, c.x.block)
			if !cand.holds && !(s.replicas == 0 && c.inPrev) {
				continue
			}
		}
		cands = append(cands, cand)
	}
	return o, cands
}

// keepAtZero sets o's clusters to those of cands that the previous
// decision lists (or that fail back now), at 0 replicas: an app scaled to
// zero keeps its Works, and so its member Deployments, where it last ran,
// so that scaling back reuses them. A cluster's health does not matter
// here, as nothing runs there (it matters again when the app scales up);
// leaving the affinity group, or the MemberCluster being deleted, does.
// Only maxGroups is enforced, taking clusters by name: minGroups is about
// where replicas can run, and none are asked for.
func (s *scheduler) keepAtZero(cands []candidate, o *outcome) {
	var kept []*candidate
	for i := range cands {
		if c := &cands[i]; c.c.inPrev || c.c.returning {
			kept = append(kept, c)
		}
	}
	if s.hasMax && len(kept) > 0 {
		p := &picker{s: s, g: s.groupCandidates(kept), order: kept}
		p.reset()
		for i := range kept {
			if p.fits(i) {
				p.take(i)
			}
		}
		taken := kept[:0:0]
		for i, c := range kept {
			if p.chosen[i] {
				taken = append(taken, c)
			}
		}
		kept = taken
	}
	o.clusters = make([]v1alpha1.TargetCluster, 0, len(kept))
	for _, c := range kept {
		o.clusters = append(o.clusters, v1alpha1.TargetCluster{Name: c.c.name, Replicas: 0})
	}
}

// place scores the candidates, chooses among them (spread) and divides the
// replicas.
func (s *scheduler) place(cands []candidate, o outcome) outcome {
	if len(cands) == 0 {
		o.fail = unschedulable("no cluster can run the app")
		return o
	}

	// Score: static weights are set above; everything else that needs a
	// score uses the room for more replicas.
	ordered := s.mode == aggregated || s.hasMax
	if s.mode == dynamicWeighted || (s.mode != staticWeighted && ordered) {
		for i := range cands {
			cands[i].weight = s.room(cands[i].c)
		}
	}
	if s.mode == aggregated {
		for i := range cands {
			c := &cands[i]
			switch {
			case !c.grow:
				c.cap = c.base
			case c.c.returning:
				c.cap = c.weight
			default:
				c.cap = c.base + c.weight
			}
		}
	}

	chosen, f := s.chooseAndDivide(cands, ordered, &o)
	if f != nil && f.reason == v1alpha1.ReasonUnschedulable {
		// Clusters that may only keep what they hold can leave too little
		// room for the rest (say they took the only maxGroups slots). Then
		// do without them: their replicas move, which beats failing.
		growers := slices.DeleteFunc(slices.Clone(cands), func(c candidate) bool { return !c.grow })
		if len(growers) > 0 && len(growers) < len(cands) {
			cands = growers
			chosen, f = s.chooseAndDivide(cands, ordered, &o)
		}
	}
	if f != nil {
		o.fail = f
		return o
	}

	// cands is in name order, so the result is too. Duplicated lists every
	// chosen cluster, Divided only those with replicas.
	n := 0
	for _, c := range chosen {
		c.chosen = true
		if c.assigned > 0 || s.mode == duplicated {
			n++
		}
	}
	o.clusters = make([]v1alpha1.TargetCluster, 0, n)
	for i := range cands {
		if c := &cands[i]; c.chosen && (c.assigned > 0 || s.mode == duplicated) {
			o.clusters = append(o.clusters, v1alpha1.TargetCluster{Name: c.c.name, Replicas: int32(c.assigned)})
		}
	}
	return o
}

// chooseAndDivide chooses among cands (ordering them by preference when
// ordered) and divides the replicas among those chosen.
func (s *scheduler) chooseAndDivide(cands []candidate, ordered bool, o *outcome) ([]*candidate, *failure) {
	order := make([]*candidate, len(cands))
	for i := range cands {
		order[i] = &cands[i]
	}
	if ordered {
		for i, c := range order {
			c.rankKey()
			c.idx = int32(i)
		}
		slices.SortFunc(order, preferred)
	}
	chosen, f := s.choose(order, s.mode == aggregated)
	if f != nil {
		return nil, f
	}
	switch s.mode {
	case duplicated:
		f = divideDuplicated(chosen, s.replicas)
	case staticWeighted:
		f = divideStatic(chosen, s.replicas)
	case dynamicWeighted:
		o.beyond, f = s.divideDynamic(chosen, s.replicas)
	case aggregated:
		o.beyond, f = s.divideAggregated(chosen, s.replicas)
	}
	return chosen, f
}
