package placement

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// scenario is a fuzz input decoded from bytes, with what the fuzz targets
// need to know about it worked out independently of the scheduler.
type scenario struct {
	in Input
	// allowed[group] is the set of clusters an affinity group selects;
	// "" is the group of a placement without clusterAffinities.
	allowed map[string]map[string]bool
	// evicts are clusters with a NoExecute taint that is not tolerated (any
	// more): they must run nothing.
	evicts map[string]bool
	// noNew are clusters that may keep replicas but take no new ones.
	noNew map[string]bool
	// prev is the replicas each cluster held in the previous decision.
	prev map[string]int32
	// wasEvicted are clusters with an eviction entry in the previous
	// decision; room is how many more replicas each cluster can take.
	wasEvicted map[string]bool
	room       map[string]int64
}

// bytesReader hands out bytes, then zeros.
type bytesReader struct {
	data []byte
	i    int
}

func (r *bytesReader) next() byte {
	if r.i >= len(r.data) {
		return 0
	}
	b := r.data[r.i]
	r.i++
	return b
}

// decodeScenario turns arbitrary bytes into a valid scheduling input: up to
// 10 clusters with regions, zones, providers, labels, readiness, taints,
// capacity, a previous decision and previous evictions, and a placement
// in any mode with any affinity form and a spread constraint.
func decodeScenario(data []byte) scenario {
	r := &bytesReader{data: data}
	n := int(r.next()%10) + 1
	modeB := r.next() % 5
	replicas := int32(r.next() % 50)
	affKind := r.next() % 6
	mask := r.next()
	spreadB := r.next()
	polB := r.next()
	window := int32(r.next() % 60)
	tolB := r.next()
	prevB := r.next()

	sc := scenario{
		allowed: map[string]map[string]bool{},
		evicts:  map[string]bool{}, noNew: map[string]bool{}, prev: map[string]int32{},
		wasEvicted: map[string]bool{}, room: map[string]int64{},
	}
	in := &sc.in
	in.Now, in.Replicas = t0, replicas
	tolSecs := int32(polB % 20)
	in.Failover = &v1alpha1.FailoverPolicy{
		ClusterUnreachable: &v1alpha1.ClusterFailover{TolerationSeconds: &tolSecs},
		Failback:           &v1alpha1.FailbackPolicy{Enabled: ptr(polB&0x20 == 0), StabilizationWindowSeconds: &window},
	}
	tolerateDedicated := tolB&1 != 0
	maintenanceTol := tolB&2 != 0
	maintenanceSecs := int64(tolB>>2) % 40
	if tolerateDedicated {
		in.Placement.ClusterTolerations = append(in.Placement.ClusterTolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	if maintenanceTol {
		in.Placement.ClusterTolerations = append(in.Placement.ClusterTolerations, corev1.Toleration{Key: "maintenance", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &maintenanceSecs})
	}
	if prevB%4 != 0 {
		in.Previous = &v1alpha1.PlacementDecision{}
	}

	values := []string{"", "r1", "r2", "r3"}
	var weights []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("m%d", i)
		b1, b2, b3, b4, b5, b6 := r.next(), r.next(), r.next(), r.next(), r.next(), r.next()
		var opts []clusterOpt
		opts = append(opts, region(values[b1%4]), zone(values[(b1>>2)%4]), provider(values[(b1>>4)%4]))
		if b1&0x40 != 0 {
			opts = append(opts, label("env", "prod"))
		}
		ready := b2%5 != 4
		if ready {
			opts = append(opts, readySince(t0.Add(-time.Duration(b2>>3)*4*time.Second)))
		} else {
			opts = append(opts, notReady())
			sc.noNew[name] = true
		}
		added := t0.Add(-time.Duration(b3>>3) * 2 * time.Second)
		switch b3 % 6 {
		case 2:
			opts = append(opts, taint("dedicated", "x", corev1.TaintEffectNoSchedule, nil))
			if !tolerateDedicated {
				sc.noNew[name] = true
			}
		case 3:
			opts = append(opts, taint(v1alpha1.TaintClusterUnreachable, "", corev1.TaintEffectNoExecute, &added))
			if tolSecs <= 0 || !t0.Before(added.Add(time.Duration(tolSecs)*time.Second)) {
				sc.evicts[name] = true
			} else {
				sc.noNew[name] = true
			}
		case 4:
			opts = append(opts, taint("maintenance", "", corev1.TaintEffectNoExecute, &added))
			if !maintenanceTol || maintenanceSecs <= 0 || !t0.Before(added.Add(time.Duration(maintenanceSecs)*time.Second)) {
				sc.evicts[name] = true
			} else {
				sc.noNew[name] = true
			}
		case 5:
			opts = append(opts, taint("soft", "", corev1.TaintEffectPreferNoSchedule, nil))
		}
		if b4 >= 224 {
			opts = append(opts, noResources())
		} else {
			opts = append(opts, room(int64(b4%64)))
			sc.room[name] = int64(b4 % 64)
		}
		in.Clusters = append(in.Clusters, member(name, opts...))
		if in.Previous != nil {
			if b5&0x10 != 0 {
				in.Previous.Clusters = append(in.Previous.Clusters, v1alpha1.TargetCluster{Name: name, Replicas: int32(b5 % 16)})
				sc.prev[name] = int32(b5 % 16)
			}
			if b5&0x20 != 0 {
				sc.wasEvicted[name] = true
				in.Previous.Evicted = append(in.Previous.Evicted, evictedAt(name, int32(b5%16), EvictionReasonClusterUnreachable, t0.Add(-time.Duration(b5>>6)*20*time.Second)))
			}
		}
		if w := b6 % 4; w > 0 {
			weights = append(weights, fmt.Sprintf("%s=%d", name, w))
		}
	}
	if prevB&0x10 != 0 && in.Previous != nil {
		// Decisions recorded by the hub are sorted; make sure unsorted ones
		// work too.
		slices.Reverse(in.Previous.Clusters)
	}

	switch modeB {
	case 1:
		if len(weights) > 0 {
			in.Placement.ReplicaScheduling = static(weights...)
		} else {
			in.Placement.ReplicaScheduling = divided(v1alpha1.ReplicaDivisionWeighted, nil)
		}
	case 2:
		in.Placement.ReplicaScheduling = dynamic()
	case 3:
		in.Placement.ReplicaScheduling = aggregate()
	case 4:
		in.Placement.ReplicaScheduling = divided(v1alpha1.ReplicaDivisionWeighted, nil)
	}

	// The affinity, in one of its forms, and the set it selects.
	sel := func(pred func(mc *v1alpha1.MemberCluster) bool) map[string]bool {
		m := map[string]bool{}
		for i := range in.Clusters {
			if pred(&in.Clusters[i]) {
				m[in.Clusters[i].Name] = true
			}
		}
		return m
	}
	inMask := func(mask byte) []string {
		var names []string
		for i := 0; i < n && i < 8; i++ {
			if mask&(1<<i) != 0 {
				names = append(names, fmt.Sprintf("m%d", i))
			}
		}
		return names
	}
	namesSet := func(names []string) map[string]bool {
		if len(names) == 0 {
			return sel(func(*v1alpha1.MemberCluster) bool { return true })
		}
		return sel(func(mc *v1alpha1.MemberCluster) bool { return slices.Contains(names, mc.Name) })
	}
	switch affKind {
	case 0:
		sc.allowed[""] = sel(func(*v1alpha1.MemberCluster) bool { return true })
	case 1:
		names := inMask(mask)
		in.Placement.ClusterAffinity = &v1alpha1.ClusterAffinity{ClusterNames: names}
		sc.allowed[""] = namesSet(names)
	case 2:
		in.Placement.ClusterAffinity = &v1alpha1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}
		sc.allowed[""] = sel(func(mc *v1alpha1.MemberCluster) bool { return mc.Labels["env"] == "prod" })
	case 3:
		in.Placement.ClusterAffinity = &v1alpha1.ClusterAffinity{FieldSelector: &v1alpha1.FieldSelector{MatchExpressions: []v1alpha1.FieldSelectorRequirement{
			{Key: v1alpha1.ClusterFieldRegion, Operator: corev1.NodeSelectorOpIn, Values: []string{"r1", "r2"}}}}}
		sc.allowed[""] = sel(func(mc *v1alpha1.MemberCluster) bool { return mc.Spec.Region == "r1" || mc.Spec.Region == "r2" })
	case 4:
		names := inMask(mask)
		in.Placement.ClusterAffinity = &v1alpha1.ClusterAffinity{ExcludeClusters: names}
		sc.allowed[""] = sel(func(mc *v1alpha1.MemberCluster) bool { return !slices.Contains(names, mc.Name) })
	case 5:
		first, second := inMask(mask), inMask(^mask)
		in.Placement.ClusterAffinities = []v1alpha1.ClusterAffinityTerm{
			{AffinityName: "g0", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: first}},
			{AffinityName: "g1", ClusterAffinity: v1alpha1.ClusterAffinity{ClusterNames: second}},
		}
		sc.allowed["g0"], sc.allowed["g1"] = namesSet(first), namesSet(second)
	}

	if spreadB%4 != 0 {
		fields := []v1alpha1.SpreadByField{v1alpha1.SpreadByFieldCluster, v1alpha1.SpreadByFieldRegion, v1alpha1.SpreadByFieldZone, v1alpha1.SpreadByFieldProvider}
		minG, maxG := int32(spreadB>>4)%3, int32(spreadB>>6)
		if maxG > 0 && minG > maxG {
			maxG = minG
		}
		in.Placement.SpreadConstraints = []v1alpha1.SpreadConstraint{spread(fields[(spreadB>>2)%4], minG, maxG)}
	}
	return sc
}

// seeds are fuzz seed inputs that reach every mode, affinity form and
// health state.
var seeds = [][]byte{
	{},
	{2, 0, 3, 0, 0, 0, 0, 0, 0, 0},
	{5, 1, 12, 0, 0, 0, 0, 0, 0, 1, 0x41, 8, 0, 6, 0x15, 1, 0x42, 8, 0, 12, 0x15, 2, 0x43, 8, 0, 18, 0x15, 3},
	{3, 2, 12, 0, 0, 0, 0, 0, 0, 0, 1, 8, 0, 6, 0, 0, 2, 8, 0, 12, 0, 0, 3, 8, 0, 18, 0, 0},
	{3, 3, 20, 0, 0, 0, 0, 0, 0, 0, 1, 8, 0, 6, 0, 0, 2, 8, 0, 12, 0, 0, 3, 8, 0, 18, 0, 0},
	{4, 1, 12, 5, 0x0f, 0x05, 10, 30, 0, 1, 1, 8, 3 | 2<<3, 40, 0x14, 1, 2, 8, 0, 40, 0x14, 2, 3, 8, 0, 40, 0x14, 3},
	{6, 2, 30, 1, 0x3b, 0x96, 5, 0, 3, 1, 1, 0, 0, 10, 0x13, 1, 2, 8, 2, 20, 0x33, 2, 3, 8, 4, 30, 0x25, 3, 5, 9, 5, 250, 0x11, 1},
	{8, 3, 25, 3, 0xaa, 0x5a, 0x25, 10, 1, 2, 0x41, 16, 3 | 4<<3, 5, 0x17, 2, 0x42, 24, 0, 63, 0x18, 1, 0x45, 0, 2, 7, 0x19, 3},
	{10, 4, 49, 4, 0x81, 0xde, 0, 59, 3, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24},
	{7, 0, 3, 2, 0, 0x4d, 1, 0, 0, 1, 0x40, 8, 3, 1, 0x13, 0, 0x40, 8, 0, 1, 0x13, 0, 0, 8, 0, 1, 0, 0, 0x40, 8, 0, 1, 0, 0},
	{9, 2, 7, 0, 0, 0x19, 0, 0, 0, 2, 1, 8, 0, 1, 0x12, 1, 2, 8, 0, 2, 0x11, 1, 3, 8, 0, 3, 0x11, 1, 1, 0, 0, 4, 0x30, 1},
	{5, 3, 40, 0, 0, 0x65, 0, 0, 0, 1, 1, 8, 0, 10, 0x1f, 1, 2, 8, 0, 2, 0x12, 1, 3, 8, 2, 30, 0x10, 1, 1, 8, 0, 5, 0x14, 1},
	// Scaled to zero: static weights with a lost cluster, dynamic weights
	// with a cluster failing back, Duplicated that cannot meet minGroups.
	{3, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 8, 0, 6, 0x12, 1, 2, 8, 3 | 4<<3, 12, 0x12, 1, 3, 8, 0, 18, 0x12, 1},
	{4, 2, 0, 0, 0, 0, 0, 0, 0, 1, 1, 8, 0, 6, 0x13, 0, 2, 8, 0, 12, 0x10, 0, 3, 8, 0, 0, 0x23, 0, 1, 4, 0, 5, 0x11, 0},
	{3, 0, 0, 0, 0, 0x09, 0, 0, 0, 1, 1, 4, 0, 6, 0x13, 0, 2, 4, 0, 12, 0x13, 0, 3, 8, 3, 18, 0x13, 0},
}

func addSeeds(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
}

// schedule runs Schedule on a copy of the scenario's input.
func (sc scenario) schedule() (Result, error) { return Schedule(sc.in) }

func sum(cs []v1alpha1.TargetCluster) int64 {
	var n int64
	for _, c := range cs {
		n += int64(c.Replicas)
	}
	return n
}

// FuzzScheduleReplicaSum: in Divided modes the replicas always sum to the
// request; in Duplicated every listed cluster runs the request. The result
// is sorted by name, names no cluster twice, and maxGroups hold. With
// dynamic weights and Aggregated no cluster gets more new replicas than its
// room unless the result says replicas went beyond capacity. At 0 replicas
// Schedule never fails, every target says it is kept at zero, and Divided
// keeps only clusters of the previous decision (or failing back).
func FuzzScheduleReplicaSum(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := decodeScenario(data)
		res, err := sc.schedule()
		if err != nil {
			var serr *ScheduleError
			if !errors.As(err, &serr) {
				t.Fatalf("invalid-input error for a valid input: %v", err)
			}
			if sc.in.Replicas == 0 {
				t.Fatalf("0 replicas failed to schedule: %v", err)
			}
			return
		}
		for _, c := range res.Clusters {
			if zero := sc.in.Replicas == 0; zero != (c.Reason == v1alpha1.TargetReasonKeptAtZero) {
				t.Fatalf("request %d: %s has reason %q", sc.in.Replicas, c.Name, c.Reason)
			}
		}
		if !slices.IsSortedFunc(res.Clusters, func(a, b v1alpha1.TargetCluster) int { return cmpString(a.Name, b.Name) }) {
			t.Fatalf("clusters not sorted: %s", targets(res.Clusters))
		}
		for i := 1; i < len(res.Clusters); i++ {
			if res.Clusters[i].Name == res.Clusters[i-1].Name {
				t.Fatalf("cluster listed twice: %s", targets(res.Clusters))
			}
		}
		if sc.in.Placement.ReplicaScheduling == nil {
			for _, c := range res.Clusters {
				if c.Replicas != sc.in.Replicas {
					t.Fatalf("Duplicated cluster %s runs %d, want %d", c.Name, c.Replicas, sc.in.Replicas)
				}
			}
		} else {
			if got := sum(res.Clusters); got != int64(sc.in.Replicas) {
				t.Fatalf("replicas sum to %d, want %d: %s", got, sc.in.Replicas, targets(res.Clusters))
			}
			for _, c := range res.Clusters {
				_, had := sc.prev[c.Name]
				if c.Replicas < 0 || (c.Replicas == 0 && (sc.in.Replicas != 0 || !(had || sc.wasEvicted[c.Name]))) {
					t.Fatalf("Divided lists %s with %d replicas (request %d, in the previous decision: %v)", c.Name, c.Replicas, sc.in.Replicas, had)
				}
			}
		}
		if rs := sc.in.Placement.ReplicaScheduling; rs != nil && res.BeyondCapacity == 0 &&
			(rs.ReplicaDivisionPreference == v1alpha1.ReplicaDivisionAggregated || (rs.WeightPreference != nil && rs.WeightPreference.DynamicWeight != "")) {
			// A cluster is never handed more than its room while the
			// others have some.
			for _, c := range res.Clusters {
				if added := int64(c.Replicas) - int64(sc.prev[c.Name]); !sc.wasEvicted[c.Name] && added > sc.room[c.Name] {
					t.Fatalf("%s got %d new replicas but has room for %d: %s", c.Name, added, sc.room[c.Name], targets(res.Clusters))
				}
			}
		}
		for _, con := range sc.in.Placement.SpreadConstraints {
			if con.MaxGroups == nil {
				continue
			}
			seen := map[string]bool{}
			for _, c := range res.Clusters {
				for i := range sc.in.Clusters {
					if sc.in.Clusters[i].Name == c.Name {
						seen[groupOf(&sc.in.Clusters[i], con.SpreadByField)] = true
					}
				}
			}
			if len(seen) > int(*con.MaxGroups) {
				t.Fatalf("spread by %s uses %d groups, max %d: %s", con.SpreadByField, len(seen), *con.MaxGroups, targets(res.Clusters))
			}
		}
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FuzzScheduleFilters: no replicas outside the affinity group used, none on
// a cluster whose NoExecute taint is not tolerated, and none new on a
// cluster that is not Ready or has an untolerated NoSchedule taint (or a
// NoExecute taint tolerated for a while): such a cluster keeps at most what
// it had. No cluster is both a target and evicted.
func FuzzScheduleFilters(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := decodeScenario(data)
		res, err := sc.schedule()
		if err != nil {
			return
		}
		allowed, ok := sc.allowed[res.AffinityName]
		if !ok {
			t.Fatalf("unknown affinity group %q", res.AffinityName)
		}
		divided := sc.in.Placement.ReplicaScheduling != nil
		for _, c := range res.Clusters {
			if !allowed[c.Name] {
				t.Fatalf("%s runs %d replicas outside affinity group %q", c.Name, c.Replicas, res.AffinityName)
			}
			// At 0 a cluster may keep the app's Work at 0 replicas
			// whatever its taints: nothing runs there.
			if sc.evicts[c.Name] && c.Replicas > 0 {
				t.Fatalf("%s runs %d replicas despite an untolerated NoExecute taint", c.Name, c.Replicas)
			}
			if sc.noNew[c.Name] {
				prev, had := sc.prev[c.Name]
				if !had || (divided && c.Replicas > prev) {
					t.Fatalf("%s (no new replicas allowed) got %d, had %d (listed: %v)", c.Name, c.Replicas, prev, had)
				}
			}
			for _, e := range res.Evicted {
				if e.Name == c.Name {
					t.Fatalf("%s is both a target and evicted", c.Name)
				}
			}
		}
		for _, e := range res.Evicted {
			if !e.EvictionTime.Time.Before(t0) && !e.EvictionTime.Time.Equal(t0) {
				t.Fatalf("eviction of %s in the future: %v", e.Name, e.EvictionTime)
			}
		}
	})
}

// FuzzScheduleDeterminism: the same input gives the same output, whatever
// the order of the clusters.
func FuzzScheduleDeterminism(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := decodeScenario(data)
		res1, err1 := sc.schedule()
		res2, err2 := sc.schedule()
		rev := sc.in
		rev.Clusters = slices.Clone(sc.in.Clusters)
		slices.Reverse(rev.Clusters)
		res3, err3 := Schedule(rev)
		if fmt.Sprint(err1) != fmt.Sprint(err2) || fmt.Sprint(err1) != fmt.Sprint(err3) {
			t.Fatalf("errors differ: %v / %v / %v", err1, err2, err3)
		}
		if !reflect.DeepEqual(res1, res2) {
			t.Fatalf("same input, different results:\n%+v\n%+v", res1, res2)
		}
		if !reflect.DeepEqual(res1, res3) {
			t.Fatalf("cluster order changed the result:\n%+v\n%+v", res1, res3)
		}
	})
}

// FuzzScheduleStability: re-running on its own output changes nothing.
func FuzzScheduleStability(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		sc := decodeScenario(data)
		res1, err := sc.schedule()
		if err != nil {
			return
		}
		in := sc.in
		in.Previous = res1.Decision(sc.in.Previous, 1, sc.in.Now)
		res2, err := Schedule(in)
		if err != nil {
			t.Fatalf("re-running on its own decision failed: %v\nfirst: %s", err, targets(res1.Clusters))
		}
		if targets(res1.Clusters) != targets(res2.Clusters) || evictions(res1.Evicted) != evictions(res2.Evicted) ||
			res1.AffinityName != res2.AffinityName || res1.RequeueAfter != res2.RequeueAfter {
			t.Fatalf("re-running changed the decision:\n  %s | %s | %q | %v\n  %s | %s | %q | %v",
				targets(res1.Clusters), evictions(res1.Evicted), res1.AffinityName, res1.RequeueAfter,
				targets(res2.Clusters), evictions(res2.Evicted), res2.AffinityName, res2.RequeueAfter)
		}
		if !SameDecision(in.Previous, res2.Decision(in.Previous, 1, in.Now)) {
			t.Fatalf("decision not the same")
		}
	})
}

// FuzzApportion: the parts sum to the total, each is within one of its
// exact quota, and a weight that is a capacity is never exceeded while the
// total fits.
func FuzzApportion(f *testing.F) {
	f.Add(uint16(12), []byte{1, 2, 3})
	f.Add(uint16(13), []byte{6, 12, 18})
	f.Add(uint16(7), []byte{0, 0, 0})
	f.Add(uint16(1000), []byte{255, 1, 0, 7})
	f.Fuzz(func(t *testing.T, total uint16, ws []byte) {
		if len(ws) == 0 || len(ws) > 64 {
			return
		}
		weights := make([]int64, len(ws))
		prev := make([]int64, len(ws))
		var w int64
		for i, b := range ws {
			weights[i], prev[i] = int64(b), int64(b%7)
			w += int64(b)
		}
		out := make([]int64, len(ws))
		apportion(int64(total), weights, prev, out)
		var s int64
		for i, o := range out {
			s += o
			if w == 0 {
				continue
			}
			q := int64(total) * weights[i]
			if o*w > q+w || o*w < q-w {
				t.Fatalf("part %d = %d, more than one away from quota %d/%d", i, o, q, w)
			}
			if int64(total) <= w && o > weights[i] {
				t.Fatalf("part %d = %d exceeds its capacity weight %d", i, o, weights[i])
			}
		}
		if s != int64(total) {
			t.Fatalf("parts sum to %d, want %d", s, total)
		}
	})
}
