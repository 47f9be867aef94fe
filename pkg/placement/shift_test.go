package placement

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kptr "k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The health shift is driven through time: each step is one Shift call at
// t0+at with the clusters' reports, its Status fed back as the next call's
// Previous. runShift checks, at every step, the properties every decision
// must have (checkShiftInvariants) and, across the steps, the timing rules
// (anti-flap, recovery window, a cut needs a healthy uncut cluster).

// shPolicy is the issue's policy: one signal "latency" above 0.08,
// for 5s, degradedPercent 20, recoveryWindow 30s, one step.
func shPolicy(mods ...func(*v1alpha1.HealthShift)) *v1alpha1.HealthShift {
	p := &v1alpha1.HealthShift{
		Signals: []v1alpha1.HealthSignal{{
			Name: "latency", Type: v1alpha1.SignalPrometheus, Query: "latency_p99",
			Threshold: resource.MustParse("0.08"),
		}},
		For:             &metav1.Duration{Duration: 5 * time.Second},
		RecoveryWindow:  &metav1.Duration{Duration: 30 * time.Second},
		DegradedPercent: kptr.To[int32](20),
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func shDegraded(pct int32) func(*v1alpha1.HealthShift) {
	return func(p *v1alpha1.HealthShift) { p.DegradedPercent = kptr.To(pct) }
}

func shMinReplicas(n int32) func(*v1alpha1.HealthShift) {
	return func(p *v1alpha1.HealthShift) { p.MinReplicas = kptr.To(n) }
}

func shSteps(pct int32, every time.Duration) func(*v1alpha1.HealthShift) {
	return func(p *v1alpha1.HealthShift) {
		p.StepPercent = kptr.To(pct)
		p.StepInterval = &metav1.Duration{Duration: every}
	}
}

func shRecovery(d time.Duration) func(*v1alpha1.HealthShift) {
	return func(p *v1alpha1.HealthShift) { p.RecoveryWindow = &metav1.Duration{Duration: d} }
}

// shNormal parses "member-1=8 member-2=2".
func shNormal(s string) []v1alpha1.TargetCluster {
	var out []v1alpha1.TargetCluster
	for _, f := range strings.Fields(s) {
		name, n, _ := strings.Cut(f, "=")
		r, err := strconv.Atoi(n)
		if err != nil {
			panic(fmt.Sprintf("shNormal(%q): %v", s, err))
		}
		out = append(out, v1alpha1.TargetCluster{Name: name, Replicas: int32(r)})
	}
	return out
}

// shReport turns "Breaching 0.12", "OK 0.03", "Pending 0.09" or
// "Unknown <message>" into one report of the signal "latency".
func shReport(s string) ClusterSignals {
	state, rest, _ := strings.Cut(s, " ")
	st := v1alpha1.SignalStatus{Name: "latency", State: v1alpha1.SignalState(state)}
	if st.State == v1alpha1.SignalUnknown {
		st.Message = rest
	} else {
		st.Value = rest
	}
	return ClusterSignals{st}
}

// shiftStep is one call and what it must decide; an empty want is not
// checked, and shifts "-" means no shift.
type shiftStep struct {
	at     time.Duration     // since t0
	report map[string]string // by cluster, see shReport; absent: not reported
	raw    map[string]ClusterSignals
	normal string           // replaces the normal split from this step on
	room   map[string]int64 // replaces Room from this step on

	replicas string // "member-1=2 member-2=8"
	weights  string // "member-1=20 member-2=80"
	caps     string
	states   string
	shifts   string // "member-1 100->20 Degraded latency=0.12; ..."
	cond     string // "True Degraded"
	condMsg  []string
	requeue  string // "30s", "0s"
	check    func(t *testing.T, r ShiftResult)
}

// shiftRun is what stays the same across the steps.
type shiftRun struct {
	policy   *v1alpha1.HealthShift
	divided  bool
	normal   string
	room     map[string]int64
	previous *v1alpha1.TrafficStatus
}

// runShift runs the steps, feeding each Status back as Previous.
func runShift(t *testing.T, run shiftRun, steps []shiftStep) []ShiftResult {
	t.Helper()
	normal := shNormal(run.normal)
	room := run.room
	prev := run.previous
	tl := newShiftTimeline(run.policy)
	var out []ShiftResult
	for _, st := range steps {
		if st.normal != "" {
			normal = shNormal(st.normal)
		}
		if st.room != nil {
			room = st.room
		}
		signals := map[string]ClusterSignals{}
		for name, r := range st.report {
			signals[name] = shReport(r)
		}
		for name, r := range st.raw {
			signals[name] = r
		}
		in := ShiftInput{Policy: run.policy, Divided: run.divided, Normal: slices.Clone(normal),
			Signals: signals, Room: room, Previous: prev, Now: t0.Add(st.at)}
		res := callShift(t, in)
		at := fmt.Sprintf("at %v", st.at)
		checkShiftInvariants(t, at, in, res)
		tl.observe(t, at, in, res)
		wantShift(t, at, st, res)
		prev = res.Status
		out = append(out, res)
	}
	return out
}

// callShift calls Shift and checks it left its input alone.
func callShift(t *testing.T, in ShiftInput) ShiftResult {
	t.Helper()
	before := in.Previous.DeepCopy()
	policy := in.Policy.DeepCopy()
	normal := slices.Clone(in.Normal)
	res := Shift(in)
	if !equality.Semantic.DeepEqual(before, in.Previous) {
		t.Errorf("at %v: Shift changed its Previous:\nbefore %+v\nafter  %+v", in.Now.Sub(t0), before, in.Previous)
	}
	if !equality.Semantic.DeepEqual(policy, in.Policy) || !slices.Equal(normal, in.Normal) {
		t.Errorf("at %v: Shift changed its Policy or Normal", in.Now.Sub(t0))
	}
	return res
}

func wantShift(t *testing.T, at string, st shiftStep, res ShiftResult) {
	t.Helper()
	cmp := func(what, got, want string) {
		t.Helper()
		if want != "" && got != want {
			t.Errorf("%s: %s = %q, want %q", at, what, got, want)
		}
	}
	cmp("replicas", targets(res.Clusters), st.replicas)
	cmp("weights", shField(res.Status, func(c v1alpha1.ClusterTraffic) string { return strconv.Itoa(int(c.Weight)) }), st.weights)
	cmp("caps", shField(res.Status, func(c v1alpha1.ClusterTraffic) string { return strconv.Itoa(int(c.CapPercent)) }), st.caps)
	cmp("states", shField(res.Status, func(c v1alpha1.ClusterTraffic) string { return string(c.State) }), st.states)
	if st.shifts != "" {
		want := st.shifts
		if want == "-" {
			want = ""
		}
		cmp("shifts", shShifts(res.Shifts), want)
	}
	cmp("condition", string(res.Condition.Status)+" "+res.Condition.Reason, st.cond)
	for _, s := range st.condMsg {
		if !strings.Contains(res.Condition.Message, s) {
			t.Errorf("%s: condition message %q does not contain %q", at, res.Condition.Message, s)
		}
	}
	if st.requeue != "" && res.RequeueAfter.String() != st.requeue {
		t.Errorf("%s: requeueAfter = %v, want %s", at, res.RequeueAfter, st.requeue)
	}
	if st.check != nil {
		st.check(t, res)
	}
}

// shField formats one field of each cluster: "member-1=20 member-2=80".
func shField(st *v1alpha1.TrafficStatus, f func(v1alpha1.ClusterTraffic) string) string {
	if st == nil {
		return "<nil status>"
	}
	parts := make([]string, len(st.Clusters))
	for i, c := range st.Clusters {
		parts[i] = c.Name + "=" + f(c)
	}
	return strings.Join(parts, " ")
}

// shShifts formats shifts: "member-1 100->20 Degraded latency=0.12".
func shShifts(ss []v1alpha1.TrafficShift) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = fmt.Sprintf("%s %d->%d %s", s.Cluster, s.FromPercent, s.ToPercent, s.Reason)
		if s.Signal != "" || s.Value != "" {
			parts[i] += " " + s.Signal + "=" + s.Value
		}
	}
	return strings.Join(parts, "; ")
}

func shCluster(st *v1alpha1.TrafficStatus, name string) (v1alpha1.ClusterTraffic, bool) {
	for _, c := range st.Clusters {
		if c.Name == name {
			return c, true
		}
	}
	return v1alpha1.ClusterTraffic{}, false
}

// checkShiftInvariants checks what every decision must satisfy.
func checkShiftInvariants(t *testing.T, at string, in ShiftInput, res ShiftResult) {
	t.Helper()
	p := in.Policy
	if res.Status == nil {
		t.Fatalf("%s: Status is nil", at)
	}
	if len(res.Clusters) != len(in.Normal) || len(res.Status.Clusters) != len(in.Normal) {
		t.Fatalf("%s: %d clusters and %d in status for %d normal ones", at, len(res.Clusters), len(res.Status.Clusters), len(in.Normal))
	}
	var sumNormal, sumEff, sumWeight int64
	for i, n := range in.Normal {
		c, ct := res.Clusters[i], res.Status.Clusters[i]
		if c.Name != n.Name || ct.Name != n.Name {
			t.Errorf("%s: cluster %d is %q (status %q), want %q: the order of Normal", at, i, c.Name, ct.Name, n.Name)
		}
		sumNormal += int64(n.Replicas)
		sumEff += int64(c.Replicas)
		sumWeight += int64(ct.Weight)
		if ct.NormalReplicas != n.Replicas {
			t.Errorf("%s: %s normalReplicas = %d, want %d", at, n.Name, ct.NormalReplicas, n.Replicas)
		}
		if ct.Replicas != c.Replicas {
			t.Errorf("%s: %s status replicas = %d, result replicas %d", at, n.Name, ct.Replicas, c.Replicas)
		}
		if c.Reason != n.Reason {
			t.Errorf("%s: %s target reason = %q, want Normal's %q", at, n.Name, c.Reason, n.Reason)
		}
		if c.Replicas < 0 || ct.Weight < 0 || ct.Weight > 100 {
			t.Errorf("%s: %s replicas %d weight %d", at, n.Name, c.Replicas, ct.Weight)
		}
		if ct.CapPercent > 100 || ct.CapPercent < p.DegradedShare() {
			t.Errorf("%s: %s capPercent = %d, want within [%d, 100]", at, n.Name, ct.CapPercent, p.DegradedShare())
		}
		if (ct.CapPercent == 100) != (ct.State == v1alpha1.HealthStateHealthy) {
			t.Errorf("%s: %s capPercent %d with state %s", at, n.Name, ct.CapPercent, ct.State)
		}
		if !in.Divided {
			if c.Replicas != n.Replicas {
				t.Errorf("%s: duplicated %s replicas = %d, want its normal %d", at, n.Name, c.Replicas, n.Replicas)
			}
			continue
		}
		if ct.CapPercent < 100 {
			if c.Replicas > n.Replicas {
				t.Errorf("%s: cut %s runs %d, more than its normal %d", at, n.Name, c.Replicas, n.Replicas)
			}
			if c.Replicas < min(n.Replicas, p.Floor()) {
				t.Errorf("%s: cut %s runs %d, below the floor min(normal %d, minReplicas %d)", at, n.Name, c.Replicas, n.Replicas, p.Floor())
			}
		} else {
			if c.Replicas < n.Replicas {
				t.Errorf("%s: uncut %s runs %d, less than its normal %d", at, n.Name, c.Replicas, n.Replicas)
			}
			if r, ok := in.Room[n.Name]; ok && int64(c.Replicas) > max(r, int64(n.Replicas)) {
				t.Errorf("%s: %s runs %d, more than its room %d", at, n.Name, c.Replicas, r)
			}
		}
	}
	if in.Divided && sumEff != sumNormal {
		t.Errorf("%s: replicas sum to %d (%s), normal to %d", at, sumEff, targets(res.Clusters), sumNormal)
	}
	if sumEff > 0 && sumWeight != 100 {
		t.Errorf("%s: weights sum to %d (%s), want 100", at, sumWeight, shField(res.Status, func(c v1alpha1.ClusterTraffic) string { return strconv.Itoa(int(c.Weight)) }))
	}
	// Shifts: this call's, newest first, then the previous ones, at most 10.
	var prevShifts []v1alpha1.TrafficShift
	if in.Previous != nil {
		prevShifts = in.Previous.Shifts
	}
	want := slices.Clone(res.Shifts)
	slices.Reverse(want)
	want = append(want, prevShifts...)
	if len(want) > MaxTrafficShifts {
		want = want[:MaxTrafficShifts]
	}
	if !equality.Semantic.DeepEqual(res.Status.Shifts, want) {
		t.Errorf("%s: status shifts = %s, want %s", at, shShifts(res.Status.Shifts), shShifts(want))
	}
	for i := 1; i < len(res.Status.Shifts); i++ {
		if res.Status.Shifts[i].Time.After(res.Status.Shifts[i-1].Time.Time) {
			t.Errorf("%s: status shifts not newest first: %v before %v", at, res.Status.Shifts[i-1].Time, res.Status.Shifts[i].Time)
		}
	}
	for _, s := range res.Shifts {
		if !s.Time.Time.Equal(in.Now) {
			t.Errorf("%s: shift of %s at %v, want now %v", at, s.Cluster, s.Time, in.Now)
		}
		c, ok := shCluster(res.Status, s.Cluster)
		if !ok || c.CapPercent != s.ToPercent || c.LastShift == nil || !c.LastShift.Time.Equal(in.Now) {
			t.Errorf("%s: shift %s does not match status %+v", at, shShifts([]v1alpha1.TrafficShift{s}), c)
		}
		from := int32(100)
		if in.Previous != nil {
			if pc, ok := shCluster(in.Previous, s.Cluster); ok {
				from = pc.CapPercent
			}
		}
		if s.FromPercent != from {
			t.Errorf("%s: shift of %s from %d, the cap was %d", at, s.Cluster, s.FromPercent, from)
		}
		switch s.Reason {
		case v1alpha1.ReasonHealthDegraded:
			if s.ToPercent >= s.FromPercent || s.ToPercent < p.DegradedShare() || s.FromPercent-s.ToPercent > p.Step() {
				t.Errorf("%s: bad cut %s (step %d)", at, shShifts([]v1alpha1.TrafficShift{s}), p.Step())
			}
		case v1alpha1.ReasonHealthRecovered:
			if s.ToPercent <= s.FromPercent || s.ToPercent-s.FromPercent > p.Step() || s.Signal != "" || s.Value != "" {
				t.Errorf("%s: bad recovery %s (step %d)", at, shShifts([]v1alpha1.TrafficShift{s}), p.Step())
			}
		default:
			t.Errorf("%s: shift reason %q", at, s.Reason)
		}
	}
	if res.Condition.Type != v1alpha1.ConditionHealthShifted || res.Condition.Reason == "" || res.Condition.Message == "" {
		t.Errorf("%s: condition %+v", at, res.Condition)
	}
	if res.RequeueAfter < 0 {
		t.Errorf("%s: requeueAfter %v", at, res.RequeueAfter)
	}
}

// shiftTimeline checks the timing rules across calls, from the reports
// alone (not from what Shift keeps in its status).
type shiftTimeline struct {
	p         *v1alpha1.HealthShift
	okSince   map[string]time.Time // first OK report since the last other one
	lastShift map[string]v1alpha1.TrafficShift
	shifts    []v1alpha1.TrafficShift // all of them, oldest first
}

func newShiftTimeline(p *v1alpha1.HealthShift) *shiftTimeline {
	return &shiftTimeline{p: p, okSince: map[string]time.Time{}, lastShift: map[string]v1alpha1.TrafficShift{}}
}

// shObserved sums up a cluster's reports as the documented rules say:
// Breaching, else Unknown, else Pending, else OK.
func shObserved(p *v1alpha1.HealthShift, reported ClusterSignals) v1alpha1.SignalState {
	state := v1alpha1.SignalOK
	for _, sig := range p.Signals {
		i := slices.IndexFunc(reported, func(s v1alpha1.SignalStatus) bool { return s.Name == sig.Name })
		switch {
		case i >= 0 && reported[i].State == v1alpha1.SignalBreaching:
			return v1alpha1.SignalBreaching
		case i < 0 || reported[i].State == v1alpha1.SignalUnknown:
			state = v1alpha1.SignalUnknown
		case reported[i].State == v1alpha1.SignalPending && state == v1alpha1.SignalOK:
			state = v1alpha1.SignalPending
		}
	}
	return state
}

func (tl *shiftTimeline) observe(t *testing.T, at string, in ShiftInput, res ShiftResult) {
	t.Helper()
	obs := map[string]v1alpha1.SignalState{}
	for _, n := range in.Normal {
		o := shObserved(tl.p, in.Signals[n.Name])
		obs[n.Name] = o
		if o != v1alpha1.SignalOK {
			delete(tl.okSince, n.Name)
		} else if _, ok := tl.okSince[n.Name]; !ok {
			tl.okSince[n.Name] = in.Now
		}
	}
	for name := range tl.lastShift {
		if !slices.ContainsFunc(in.Normal, func(c v1alpha1.TargetCluster) bool { return c.Name == name }) {
			delete(tl.lastShift, name) // it left: it comes back afresh
		}
	}
	cut := false
	for _, s := range res.Shifts {
		down := s.Reason == v1alpha1.ReasonHealthDegraded
		if down {
			cut = true
			if obs[s.Cluster] != v1alpha1.SignalBreaching {
				t.Errorf("%s: %s cut while its signals are %s", at, s.Cluster, obs[s.Cluster])
			}
		} else {
			since, ok := tl.okSince[s.Cluster]
			if !ok || in.Now.Sub(since) < tl.p.RecoveryDuration() {
				t.Errorf("%s: %s recovered with signals OK only since %v (window %v)", at, s.Cluster, since.Sub(t0), tl.p.RecoveryDuration())
			}
		}
		if last, ok := tl.lastShift[s.Cluster]; ok {
			gap := in.Now.Sub(last.Time.Time)
			sameWay := (last.Reason == v1alpha1.ReasonHealthDegraded) == down
			if sameWay && gap < tl.p.StepDuration() {
				t.Errorf("%s: %s shifted %v after its last shift the same way, want at least stepInterval %v", at, s.Cluster, gap, tl.p.StepDuration())
			}
			if !sameWay && gap < tl.p.RecoveryDuration() {
				t.Errorf("%s: %s shifted %v after its last shift the other way, want at least recoveryWindow %v", at, s.Cluster, gap, tl.p.RecoveryDuration())
			}
		}
		tl.lastShift[s.Cluster] = s
		tl.shifts = append(tl.shifts, s)
	}
	if cut {
		// A cut needs another cluster that keeps its full share with OK signals.
		ok := false
		for _, c := range res.Status.Clusters {
			if c.CapPercent >= 100 && obs[c.Name] == v1alpha1.SignalOK {
				ok = true
			}
		}
		if !ok {
			t.Errorf("%s: a cluster was cut with no uncut OK cluster left: %s", at, shField(res.Status, func(c v1alpha1.ClusterTraffic) string { return strconv.Itoa(int(c.CapPercent)) }))
		}
	}
}

func ok2(r1, r2 string) map[string]string { return map[string]string{"member-1": r1, "member-2": r2} }

// TestShiftIssueStory is the issue's story: member-1 (8 of 10 replicas)
// breaches, its share drops to 20 %, and comes back once its signals have
// stayed OK for the recovery window.
func TestShiftIssueStory(t *testing.T) {
	run := shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}
	s := time.Second
	res := runShift(t, run, []shiftStep{
		{at: 0, report: ok2("OK 0.03", "OK 0.02"),
			replicas: "member-1=8 member-2=2", weights: "member-1=80 member-2=20", caps: "member-1=100 member-2=100",
			states: "member-1=Healthy member-2=Healthy", shifts: "-", cond: "False AllHealthy", requeue: "0s"},
		{at: 5 * s, report: ok2("Breaching 0.12", "OK 0.02"),
			replicas: "member-1=2 member-2=8", weights: "member-1=20 member-2=80", caps: "member-1=20 member-2=100",
			states: "member-1=Degraded member-2=Healthy", shifts: "member-1 100->20 Degraded latency=0.12",
			cond: "True Degraded", condMsg: []string{"member-1", "20%", "latency=0.12"}},
		{at: 10 * s, report: ok2("Breaching 0.13", "OK 0.02"),
			replicas: "member-1=2 member-2=8", shifts: "-", cond: "True Degraded", requeue: "0s"},
		{at: 15 * s, report: ok2("OK 0.05", "OK 0.02"), // HealthySince
			replicas: "member-1=2 member-2=8", caps: "member-1=20 member-2=100", states: "member-1=Degraded member-2=Healthy",
			shifts: "-", cond: "True Degraded", requeue: "30s"},
		{at: 30 * s, report: ok2("OK 0.05", "OK 0.02"), replicas: "member-1=2 member-2=8", shifts: "-", requeue: "15s"},
		{at: 44 * s, report: ok2("OK 0.05", "OK 0.02"), replicas: "member-1=2 member-2=8", shifts: "-", requeue: "1s"},
		{at: 45 * s, report: ok2("OK 0.05", "OK 0.02"), // exactly HealthySince + recoveryWindow
			replicas: "member-1=8 member-2=2", weights: "member-1=80 member-2=20", caps: "member-1=100 member-2=100",
			states: "member-1=Healthy member-2=Healthy", shifts: "member-1 20->100 Recovered",
			cond: "False AllHealthy", requeue: "0s"},
		{at: 50 * s, report: ok2("OK 0.05", "OK 0.02"), replicas: "member-1=8 member-2=2", shifts: "-", cond: "False AllHealthy"},
	})

	cut := res[1]
	if len(cut.Shifts) == 1 {
		sh := cut.Shifts[0]
		if sh.Signal != "latency" || sh.Value != "0.12" || sh.Reason != v1alpha1.ReasonHealthDegraded || !sh.Time.Time.Equal(t0.Add(5*s)) {
			t.Errorf("cut shift = %+v, want signal latency, value 0.12, reason Degraded at t0+5s", sh)
		}
	}
	m1, _ := shCluster(cut.Status, "member-1")
	if !strings.Contains(m1.Reason, "latency=0.12") || m1.Since == nil || !m1.Since.Time.Equal(t0.Add(5*s)) || m1.HealthySince != nil {
		t.Errorf("member-1 after the cut = %+v, want reason naming latency=0.12, since t0+5s, no healthySince", m1)
	}
	m1, _ = shCluster(res[3].Status, "member-1")
	if m1.HealthySince == nil || !m1.HealthySince.Time.Equal(t0.Add(15*s)) || !strings.Contains(m1.Reason, "signals OK since") {
		t.Errorf("member-1 once OK = %+v, want healthySince t0+15s and reason 'signals OK since'", m1)
	}
	if m1.Since == nil || !m1.Since.Time.Equal(t0.Add(5*s)) || m1.LastShift == nil || !m1.LastShift.Time.Equal(t0.Add(5*s)) {
		t.Errorf("member-1 once OK = %+v, want since and lastShift still t0+5s", m1)
	}
	rec := res[6]
	m1, _ = shCluster(rec.Status, "member-1")
	if m1.Reason != "" || m1.Since == nil || !m1.Since.Time.Equal(t0.Add(45*s)) {
		t.Errorf("member-1 recovered = %+v, want no reason, since t0+45s", m1)
	}
	if got := shShifts(rec.Status.Shifts); got != "member-1 20->100 Recovered; member-1 100->20 Degraded latency=0.12" {
		t.Errorf("status shifts = %q, want the recovery then the cut", got)
	}
	if rec.Condition.Message != "every cluster has its normal share" {
		t.Errorf("condition message = %q", rec.Condition.Message)
	}
}

// TestShiftRecoveryWindowDefaults checks the defaults: recoveryWindow 60s
// and degradedPercent 20 when unset.
func TestShiftRecoveryWindowDefaults(t *testing.T) {
	p := shPolicy(func(p *v1alpha1.HealthShift) { p.RecoveryWindow, p.DegradedPercent = nil, nil })
	s := time.Second
	runShift(t, shiftRun{policy: p, divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
		{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=2 member-2=8", caps: "member-1=20 member-2=100"},
		{at: 1 * s, report: ok2("OK 0.05", "OK 0.02"), requeue: "1m0s"},
		{at: 60 * s, report: ok2("OK 0.05", "OK 0.02"), replicas: "member-1=2 member-2=8", shifts: "-", requeue: "1s"},
		{at: 61 * s, report: ok2("OK 0.05", "OK 0.02"), replicas: "member-1=8 member-2=2", shifts: "member-1 20->100 Recovered"},
	})
}

// TestShiftRecoveryWindowRestarts: a breach or an Unknown report during
// the recovery window starts it again from the next OK report.
func TestShiftRecoveryWindowRestarts(t *testing.T) {
	s := time.Second
	runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
		{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), caps: "member-1=20 member-2=100"},
		{at: 10 * s, report: ok2("OK 0.05", "OK 0.02"), requeue: "30s"},
		{at: 35 * s, report: ok2("Breaching 0.1", "OK 0.02"), shifts: "-", requeue: "0s"},
		{at: 40 * s, report: ok2("OK 0.05", "OK 0.02"), shifts: "-", requeue: "30s"}, // window from 40s
		{at: 60 * s, report: ok2("Unknown bad_data: parse error", "OK 0.02"), shifts: "-", cond: "Unknown SignalUnknown"},
		{at: 65 * s, report: ok2("OK 0.05", "OK 0.02"), shifts: "-", requeue: "30s"}, // window from 65s
		{at: 90 * s, report: ok2("OK 0.05", "OK 0.02"), caps: "member-1=20 member-2=100", shifts: "-", requeue: "5s"},
		{at: 95 * s, report: ok2("OK 0.05", "OK 0.02"), caps: "member-1=100 member-2=100", shifts: "member-1 20->100 Recovered"},
	})
}

// TestShiftOscillation: a signal that flips every 4s moves its cluster at
// most once per recovery window.
func TestShiftOscillation(t *testing.T) {
	s := time.Second
	cases := []struct {
		name     string
		breach   func(at time.Duration) bool
		wantAt   []time.Duration // the shifts of member-1
		wantLast string          // member-1's cap at the end
	}{
		{
			name:     "breaching and OK every 4s: one cut, no recovery (OK never lasts the window)",
			breach:   func(at time.Duration) bool { return (at/(4*s))%2 == 0 },
			wantAt:   []time.Duration{0},
			wantLast: "20",
		},
		{
			name:   "breaching 4s in every 40s: a shift the other way waits the window after the last one",
			breach: func(at time.Duration) bool { return at%(40*s) == 0 },
			// cut at 0; OK from 4s, back at 36s; the breach at 40s is held
			// (36s+30s); the one at 80s cuts; OK from 84s, back at 116s.
			wantAt:   []time.Duration{0, 36 * s, 80 * s, 116 * s},
			wantLast: "100",
		},
		{
			name:     "OK 28s then breaching 4s: never OK for the window, one cut",
			breach:   func(at time.Duration) bool { return at%(32*s) == 0 },
			wantAt:   []time.Duration{0},
			wantLast: "20",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var steps []shiftStep
			for at := time.Duration(0); at <= 120*s; at += 4 * s {
				r := "OK 0.05"
				if tc.breach(at) {
					r = "Breaching 0.12"
				}
				steps = append(steps, shiftStep{at: at, report: ok2(r, "OK 0.02")})
			}
			res := runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, steps)
			var got []time.Duration
			var all []v1alpha1.TrafficShift
			for _, r := range res {
				for _, sh := range r.Shifts {
					if sh.Cluster == "member-1" {
						got = append(got, sh.Time.Sub(t0))
						all = append(all, sh)
					}
				}
			}
			if !slices.Equal(got, tc.wantAt) {
				t.Errorf("member-1 shifted at %v, want %v", got, tc.wantAt)
			}
			// At most one shift per window: opposite shifts are a window apart.
			for i := 1; i < len(all); i++ {
				if all[i].Reason != all[i-1].Reason && all[i].Time.Sub(all[i-1].Time.Time) < 30*s {
					t.Errorf("shifts %s at %v and %s at %v are less than 30s apart", all[i-1].Reason, all[i-1].Time.Sub(t0), all[i].Reason, all[i].Time.Sub(t0))
				}
			}
			for w := time.Duration(0); w+30*s <= 120*s; w += s {
				n := 0
				for _, at := range got {
					if at >= w && at < w+30*s {
						n++
					}
				}
				if n > 1 {
					t.Errorf("%d shifts in [%v, %v)", n, w, w+30*s)
				}
			}
			last := res[len(res)-1]
			if c, _ := shCluster(last.Status, "member-1"); strconv.Itoa(int(c.CapPercent)) != tc.wantLast {
				t.Errorf("member-1 ends at cap %d, want %s", c.CapPercent, tc.wantLast)
			}
		})
	}
}

// TestShiftGradual: stepPercent 20 every 10s cuts 100 -> 80 -> 60 -> 40 ->
// 20 and no further, then recovers in steps once the window has passed.
func TestShiftGradual(t *testing.T) {
	s := time.Second
	b, ok := ok2("Breaching 0.12", "OK 0.02"), ok2("OK 0.05", "OK 0.02")
	runShift(t, shiftRun{policy: shPolicy(shSteps(20, 10*s)), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
		{at: 0, report: b, caps: "member-1=80 member-2=100", replicas: "member-1=8 member-2=2", weights: "member-1=80 member-2=20",
			states: "member-1=Degraded member-2=Healthy", shifts: "member-1 100->80 Degraded latency=0.12", cond: "True Degraded"},
		{at: 5 * s, report: b, caps: "member-1=80 member-2=100", shifts: "-", requeue: "5s"},
		{at: 10 * s, report: b, caps: "member-1=60 member-2=100", replicas: "member-1=6 member-2=4", weights: "member-1=60 member-2=40",
			shifts: "member-1 80->60 Degraded latency=0.12"},
		{at: 19 * s, report: b, caps: "member-1=60 member-2=100", shifts: "-", requeue: "1s"},
		{at: 20 * s, report: b, caps: "member-1=40 member-2=100", replicas: "member-1=4 member-2=6", shifts: "member-1 60->40 Degraded latency=0.12"},
		{at: 30 * s, report: b, caps: "member-1=20 member-2=100", replicas: "member-1=2 member-2=8", weights: "member-1=20 member-2=80",
			states: "member-1=Degraded member-2=Healthy", shifts: "member-1 40->20 Degraded latency=0.12"},
		{at: 40 * s, report: b, caps: "member-1=20 member-2=100", replicas: "member-1=2 member-2=8", shifts: "-", requeue: "0s"},
		{at: 50 * s, report: b, caps: "member-1=20 member-2=100", shifts: "-"},
		// OK from 55s: the window runs to 85s.
		{at: 55 * s, report: ok, caps: "member-1=20 member-2=100", shifts: "-", requeue: "30s"},
		{at: 85 * s, report: ok, caps: "member-1=40 member-2=100", replicas: "member-1=4 member-2=6", weights: "member-1=40 member-2=60",
			states: "member-1=Recovering member-2=Healthy", shifts: "member-1 20->40 Recovered", cond: "True Degraded"},
		{at: 90 * s, report: ok, caps: "member-1=40 member-2=100", shifts: "-", requeue: "5s"},
		{at: 95 * s, report: ok, caps: "member-1=60 member-2=100", replicas: "member-1=6 member-2=4", states: "member-1=Recovering member-2=Healthy",
			shifts: "member-1 40->60 Recovered"},
		{at: 105 * s, report: ok, caps: "member-1=80 member-2=100", replicas: "member-1=8 member-2=2", shifts: "member-1 60->80 Recovered"},
		{at: 115 * s, report: ok, caps: "member-1=100 member-2=100", replicas: "member-1=8 member-2=2", weights: "member-1=80 member-2=20",
			states: "member-1=Healthy member-2=Healthy", shifts: "member-1 80->100 Recovered", cond: "False AllHealthy"},
		{at: 125 * s, report: ok, shifts: "-"},
	})
}

// TestShiftGradualReversal: a breach while recovering in steps waits the
// recovery window after the last step up; OK while stepping down waits it
// after the last step down.
func TestShiftGradualReversal(t *testing.T) {
	s := time.Second
	b, ok := ok2("Breaching 0.12", "OK 0.02"), ok2("OK 0.05", "OK 0.02")
	runShift(t, shiftRun{policy: shPolicy(shSteps(20, 10*s)), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
		{at: 0, report: b, caps: "member-1=80 member-2=100"},
		{at: 10 * s, report: b, caps: "member-1=60 member-2=100"},
		// OK from 12s; the window ends at 42s, 40s after the last cut.
		{at: 12 * s, report: ok, shifts: "-", requeue: "30s"},
		{at: 42 * s, report: ok, caps: "member-1=80 member-2=100", states: "member-1=Recovering member-2=Healthy", shifts: "member-1 60->80 Recovered"},
		// Breaching again 5s after the step up: held until 42s+30s.
		{at: 47 * s, report: b, caps: "member-1=80 member-2=100", shifts: "-", requeue: "25s"},
		{at: 71 * s, report: b, caps: "member-1=80 member-2=100", shifts: "-", requeue: "1s"},
		{at: 72 * s, report: b, caps: "member-1=60 member-2=100", states: "member-1=Degraded member-2=Healthy", shifts: "member-1 80->60 Degraded latency=0.12"},
		{at: 82 * s, report: b, caps: "member-1=40 member-2=100", shifts: "member-1 60->40 Degraded latency=0.12"},
	})
}

// TestShiftRequeueAfterStep: after a step of a gradual shift, the next
// step is held by time alone (the signals have not changed), so
// RequeueAfter should say when it is due.
func TestShiftRequeueAfterStep(t *testing.T) {
	s := time.Second
	res := runShift(t, shiftRun{policy: shPolicy(shSteps(20, 10*s)), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
		{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), caps: "member-1=80 member-2=100"},
	})
	if res[0].RequeueAfter != 10*s {
		t.Errorf("after the step 100->80 the next step is due in stepInterval (10s) if the signal stays, "+
			"but RequeueAfter = %v", res[0].RequeueAfter)
	}
}

// TestShiftAllSick: nothing moves away from every cluster at once, and at
// least one cluster always keeps its full share.
func TestShiftAllSick(t *testing.T) {
	s := time.Second
	t.Run("both breaching: nothing moves", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
			{at: 0, report: ok2("Breaching 0.12", "Breaching 0.2"), replicas: "member-1=8 member-2=2", weights: "member-1=80 member-2=20",
				caps: "member-1=100 member-2=100", states: "member-1=Healthy member-2=Healthy", shifts: "-",
				cond: "False AllClustersDegraded", condMsg: []string{"member-1 (latency=0.12", "member-2 (latency=0.2"}, requeue: "0s"},
			{at: 60 * s, report: ok2("Breaching 0.12", "Breaching 0.2"), replicas: "member-1=8 member-2=2", shifts: "-", cond: "False AllClustersDegraded"},
		})
	})
	t.Run("member-1 cut, then member-2 breaches: member-2 keeps its full share", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
			{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=2 member-2=8"},
			{at: 5 * s, report: ok2("Breaching 0.12", "Breaching 0.2"), replicas: "member-1=2 member-2=8", caps: "member-1=20 member-2=100",
				shifts: "-", cond: "True AllClustersDegraded", condMsg: []string{"member-2", "cut: member-1 at most 20%"}},
			// member-1 OK again but still cut: member-2 still may not be cut.
			{at: 10 * s, report: ok2("OK 0.05", "Breaching 0.2"), caps: "member-1=20 member-2=100", shifts: "-", cond: "True AllClustersDegraded"},
			// member-1 recovers; only then can member-2 be cut (in this call,
			// as member-1 comes first, or the next: see TestShiftRecoveryUnblocksCut).
			{at: 40 * s, report: ok2("OK 0.05", "Breaching 0.2"), check: func(t *testing.T, r ShiftResult) {
				if c, _ := shCluster(r.Status, "member-1"); c.CapPercent != 100 {
					t.Errorf("at 40s: member-1 cap %d, want 100: OK for the window", c.CapPercent)
				}
			}},
			{at: 45 * s, report: ok2("OK 0.05", "Breaching 0.2"), replicas: "member-1=8 member-2=2", caps: "member-1=100 member-2=20",
				cond: "True Degraded", condMsg: []string{"member-2 at most 20%"}},
		})
	})
	t.Run("three clusters: the second sick one is cut while a third is healthy", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=4 member-2=4 member-3=2"}, []shiftStep{
			{at: 0, report: map[string]string{"member-1": "Breaching 0.12", "member-2": "OK 0.02", "member-3": "OK 0.02"},
				replicas: "member-1=2 member-2=5 member-3=3", caps: "member-1=20 member-2=100 member-3=100"},
			{at: 5 * s, report: map[string]string{"member-1": "Breaching 0.12", "member-2": "Breaching 0.2", "member-3": "OK 0.02"},
				replicas: "member-1=2 member-2=2 member-3=6", caps: "member-1=20 member-2=20 member-3=100",
				shifts: "member-2 100->20 Degraded latency=0.2", cond: "True Degraded"},
			{at: 10 * s, report: map[string]string{"member-1": "Breaching 0.12", "member-2": "Breaching 0.2", "member-3": "Breaching 0.3"},
				replicas: "member-1=2 member-2=2 member-3=6", caps: "member-1=20 member-2=20 member-3=100",
				shifts: "-", cond: "True AllClustersDegraded", condMsg: []string{"member-3", "cut: member-1 at most 20%", "member-2 at most 20%"}},
		})
	})
	t.Run("two of three breach at once: both cut, the third takes all", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=4 member-2=4 member-3=2"}, []shiftStep{
			{at: 0, report: map[string]string{"member-1": "Breaching 0.12", "member-2": "Breaching 0.2", "member-3": "OK 0.02"},
				replicas: "member-1=2 member-2=2 member-3=6", shifts: "member-1 100->20 Degraded latency=0.12; member-2 100->20 Degraded latency=0.2"},
		})
	})
}

// TestShiftRecoveryUnblocksCut: one cluster is cut and recovering, the
// other breaches and is held (no uncut OK cluster to shift to). When the
// first recovers, the second may be cut; whichever comes first by name,
// the condition must not say every cluster is sick when one has just got
// its full share back ("AllClustersDegraded: every cluster is sick so
// nothing moves").
func TestShiftRecoveryUnblocksCut(t *testing.T) {
	s := time.Second
	for _, names := range [][2]string{{"a", "b"}, {"b", "a"}} {
		sick, well := names[0], names[1] // well is cut first, then sick breaches
		t.Run(fmt.Sprintf("breaching %s, recovering %s", sick, well), func(t *testing.T) {
			rep := func(s1, s2 string) map[string]string { return map[string]string{sick: s1, well: s2} }
			res := runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "a=5 b=5"}, []shiftStep{
				{at: 0, report: rep("OK 0", "Breaching 0.12")},
				{at: 5 * s, report: rep("Breaching 0.2", "Breaching 0.12"), cond: "True AllClustersDegraded"},
				{at: 10 * s, report: rep("Breaching 0.2", "OK 0.01"), cond: "True AllClustersDegraded"},
				{at: 40 * s, report: rep("Breaching 0.2", "OK 0.01")}, // well recovers
				{at: 45 * s, report: rep("Breaching 0.2", "OK 0.01"), cond: "True Degraded"},
			})
			r := res[3]
			if c, _ := shCluster(r.Status, well); c.CapPercent != 100 {
				t.Fatalf("at 40s: %s cap %d, want 100", well, c.CapPercent)
			}
			if r.Condition.Reason == v1alpha1.ReasonAllClustersDegraded {
				t.Errorf("at 40s %s is back at 100%% with OK signals, but the condition is %s %s %q: "+
					"%s must be cut in the same call, whatever the clusters' order", well, r.Condition.Status, r.Condition.Reason, r.Condition.Message, sick)
			}
		})
	}
}

// TestShiftUnknown: a signal that cannot be evaluated, or is not reported,
// changes nothing for its cluster.
func TestShiftUnknown(t *testing.T) {
	s := time.Second
	t.Run("unknown on a healthy cluster: nothing moves, condition Unknown names it", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
			{at: 0, report: ok2("Unknown bad_data: parse error", "OK 0.02"), replicas: "member-1=8 member-2=2",
				caps: "member-1=100 member-2=100", shifts: "-", cond: "Unknown SignalUnknown",
				condMsg: []string{"member-1: latency unknown: bad_data: parse error"},
				check: func(t *testing.T, r ShiftResult) {
					if c, _ := shCluster(r.Status, "member-1"); !strings.Contains(c.Reason, "bad_data: parse error") {
						t.Errorf("member-1 reason = %q, want the error", c.Reason)
					}
				}},
		})
	})
	t.Run("not reported at all", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
			{at: 0, report: map[string]string{"member-2": "OK 0.02"}, replicas: "member-1=8 member-2=2", shifts: "-",
				cond: "Unknown SignalUnknown", condMsg: []string{"member-1: latency not reported yet"}},
		})
	})
	t.Run("a cut cluster turning Unknown stays cut past the window", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
			{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=2 member-2=8"},
			{at: 5 * s, report: ok2("Unknown bad_data: parse error", "OK 0.02"), replicas: "member-1=2 member-2=8", shifts: "-",
				cond: "Unknown SignalUnknown", condMsg: []string{"member-1", "bad_data: parse error", "cut: member-1 at most 20%"}, requeue: "0s"},
			{at: 120 * s, report: ok2("Unknown bad_data: parse error", "OK 0.02"), replicas: "member-1=2 member-2=8", caps: "member-1=20 member-2=100", shifts: "-"},
		})
	})
	t.Run("the only other cluster is Unknown: a breach is not cut", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
			{at: 0, report: ok2("Breaching 0.12", "Unknown no Prometheus"), replicas: "member-1=8 member-2=2", shifts: "-",
				cond: "Unknown SignalUnknown", condMsg: []string{"member-2: latency unknown: no Prometheus"}},
		})
	})
	t.Run("an Unknown cluster keeps its cap while another one is cut", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=6 member-2=2 member-3=2"}, []shiftStep{
			{at: 0, report: map[string]string{"member-1": "Breaching 0.12", "member-2": "OK 0.02", "member-3": "Unknown bad_data: parse error"},
				caps: "member-1=20 member-2=100 member-3=100", shifts: "member-1 100->20 Degraded latency=0.12",
				cond: "Unknown SignalUnknown", condMsg: []string{"member-3: latency unknown: bad_data: parse error", "cut: member-1 at most 20%"}},
		})
	})
}

// TestShiftObserve sums several signals up: a breach wins, then Unknown
// (a missing report too), Pending counts as OK, unknown names are ignored.
func TestShiftObserve(t *testing.T) {
	p := shPolicy(func(p *v1alpha1.HealthShift) {
		p.Signals = append(p.Signals, v1alpha1.HealthSignal{Name: "errors", Type: v1alpha1.SignalUnavailableRatio, Threshold: resource.MustParse("0.5")})
	})
	sig := func(name string, state v1alpha1.SignalState, v string) v1alpha1.SignalStatus {
		return v1alpha1.SignalStatus{Name: name, State: state, Value: v, Message: "msg-" + name}
	}
	ok := ClusterSignals{sig("latency", v1alpha1.SignalOK, "0.01"), sig("errors", v1alpha1.SignalOK, "0")}
	cases := []struct {
		name    string
		member1 ClusterSignals
		caps    string
		shifts  string
		cond    string
		condMsg string
	}{
		{"all OK", ok, "member-1=100 member-2=100", "-", "False AllHealthy", "every cluster"},
		{"second signal breaching", ClusterSignals{sig("latency", v1alpha1.SignalOK, "0.01"), sig("errors", v1alpha1.SignalBreaching, "0.7")},
			"member-1=20 member-2=100", "member-1 100->20 Degraded errors=0.7", "True Degraded", "errors=0.7 above 0.5"},
		{"a breach wins over an earlier unknown", ClusterSignals{sig("latency", v1alpha1.SignalUnknown, ""), sig("errors", v1alpha1.SignalBreaching, "0.7")},
			"member-1=20 member-2=100", "member-1 100->20 Degraded errors=0.7", "True Degraded", "member-1 at most 20%"},
		{"the first breach in the policy's order is named", ClusterSignals{sig("errors", v1alpha1.SignalBreaching, "0.7"), sig("latency", v1alpha1.SignalBreaching, "0.2")},
			"member-1=20 member-2=100", "member-1 100->20 Degraded latency=0.2", "True Degraded", "latency=0.2 above"},
		{"one signal missing", ClusterSignals{sig("latency", v1alpha1.SignalOK, "0.01")},
			"member-1=100 member-2=100", "-", "Unknown SignalUnknown", "member-1: errors not reported yet"},
		{"one signal unknown", ClusterSignals{sig("latency", v1alpha1.SignalPending, "0.1"), sig("errors", v1alpha1.SignalUnknown, "")},
			"member-1=100 member-2=100", "-", "Unknown SignalUnknown", "member-1: errors unknown: msg-errors"},
		{"both pending", ClusterSignals{sig("latency", v1alpha1.SignalPending, "0.1"), sig("errors", v1alpha1.SignalPending, "0.6")},
			"member-1=100 member-2=100", "-", "False AllHealthy", "every cluster"},
		{"a signal the policy does not have is ignored", append(slices.Clone(ok), sig("other", v1alpha1.SignalBreaching, "9")),
			"member-1=100 member-2=100", "-", "False AllHealthy", "every cluster"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runShift(t, shiftRun{policy: p, divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
				{at: 0, raw: map[string]ClusterSignals{"member-1": tc.member1, "member-2": ok},
					caps: tc.caps, shifts: tc.shifts, cond: tc.cond, condMsg: []string{tc.condMsg}},
			})
		})
	}
}

// TestShiftFloor: a cut cluster keeps min(normal, max(minReplicas,
// total*cap/100)).
func TestShiftFloor(t *testing.T) {
	cases := []struct {
		name     string
		policy   *v1alpha1.HealthShift
		normal   string
		replicas string
		weights  string
	}{
		{"degradedPercent 0 keeps the default floor of 1", shPolicy(shDegraded(0)), "member-1=8 member-2=2", "member-1=1 member-2=9", "member-1=10 member-2=90"},
		{"degradedPercent 0 with minReplicas 0 empties the cluster", shPolicy(shDegraded(0), shMinReplicas(0)), "member-1=8 member-2=2", "member-1=0 member-2=10", "member-1=0 member-2=100"},
		{"the floor is above the degraded share", shPolicy(shMinReplicas(3)), "member-1=8 member-2=2", "member-1=3 member-2=7", "member-1=30 member-2=70"},
		{"the floor never gives more than the normal share", shPolicy(shDegraded(0), shMinReplicas(5)), "member-1=2 member-2=8", "member-1=2 member-2=8", "member-1=20 member-2=80"},
		{"a normal share below the degraded share is kept", shPolicy(), "member-1=2 member-2=8", "member-1=2 member-2=8", "member-1=20 member-2=80"},
		{"the degraded share is of the app, rounded down", shPolicy(shMinReplicas(0)), "member-1=5 member-2=2", "member-1=1 member-2=6", "member-1=14 member-2=86"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runShift(t, shiftRun{policy: tc.policy, divided: true, normal: tc.normal}, []shiftStep{
				{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), replicas: tc.replicas, weights: tc.weights, cond: "True Degraded",
					states: "member-1=Degraded member-2=Healthy"},
			})
		})
	}
}

// TestShiftRoom: a receiver takes no more than its room; the rest goes to
// the other receivers, else stays with the cut cluster.
func TestShiftRoom(t *testing.T) {
	cases := []struct {
		name     string
		normal   string
		room     map[string]int64
		report   map[string]string
		replicas string
		weights  string
	}{
		{"the receiver is filled to its room, the rest stays with the cut cluster", "member-1=8 member-2=2",
			map[string]int64{"member-2": 4}, ok2("Breaching 0.12", "OK 0.02"), "member-1=6 member-2=4", "member-1=60 member-2=40"},
		{"the rest goes to the other receiver", "member-1=6 member-2=2 member-3=2",
			map[string]int64{"member-2": 3}, map[string]string{"member-1": "Breaching 0.12", "member-2": "OK 0.02", "member-3": "OK 0.02"},
			"member-1=2 member-2=3 member-3=5", "member-1=20 member-2=30 member-3=50"},
		{"a room below the normal share keeps the normal share and takes nothing", "member-1=8 member-2=2",
			map[string]int64{"member-2": 1}, ok2("Breaching 0.12", "OK 0.02"), "member-1=8 member-2=2", "member-1=80 member-2=20"},
		{"a room exactly at the share", "member-1=8 member-2=2",
			map[string]int64{"member-2": 8}, ok2("Breaching 0.12", "OK 0.02"), "member-1=2 member-2=8", "member-1=20 member-2=80"},
		{"both receivers full: the rest goes back to the cut clusters in order", "member-1=5 member-2=3 member-3=2",
			map[string]int64{"member-3": 3}, map[string]string{"member-1": "Breaching 0.12", "member-2": "Breaching 0.2", "member-3": "OK 0.02"},
			"member-1=5 member-2=2 member-3=3", "member-1=50 member-2=20 member-3=30"},
		{"a receiver without normal replicas takes the rest", "member-1=8 member-2=2 member-3=0",
			map[string]int64{"member-2": 3}, map[string]string{"member-1": "Breaching 0.12", "member-2": "OK 0.02", "member-3": "OK 0.02"},
			"member-1=2 member-2=3 member-3=5", "member-1=20 member-2=30 member-3=50"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: tc.normal, room: tc.room}, []shiftStep{
				{at: 0, report: tc.report, replicas: tc.replicas, weights: tc.weights},
			})
		})
	}
}

// TestShiftDuplicated: each cluster runs all the replicas; only traffic
// shifts, from an even split.
func TestShiftDuplicated(t *testing.T) {
	s := time.Second
	three := func(r1, r2, r3 string) map[string]string {
		return map[string]string{"member-1": r1, "member-2": r2, "member-3": r3}
	}
	t.Run("two clusters 50/50 -> 20/80 and back", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), normal: "member-1=3 member-2=3"}, []shiftStep{
			{at: 0, report: ok2("OK 0.01", "OK 0.02"), replicas: "member-1=3 member-2=3", weights: "member-1=50 member-2=50", cond: "False AllHealthy"},
			{at: 5 * s, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=3 member-2=3", weights: "member-1=20 member-2=80",
				caps: "member-1=20 member-2=100", shifts: "member-1 100->20 Degraded latency=0.12", cond: "True Degraded"},
			{at: 10 * s, report: ok2("OK 0.01", "OK 0.02"), weights: "member-1=20 member-2=80", requeue: "30s"},
			{at: 40 * s, report: ok2("OK 0.01", "OK 0.02"), replicas: "member-1=3 member-2=3", weights: "member-1=50 member-2=50",
				shifts: "member-1 20->100 Recovered", cond: "False AllHealthy"},
		})
	})
	t.Run("three clusters", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), normal: "member-1=2 member-2=2 member-3=2"}, []shiftStep{
			{at: 0, report: three("OK 0.01", "OK 0.01", "OK 0.01"), weights: "member-1=34 member-2=33 member-3=33"},
			{at: 5 * s, report: three("Breaching 0.12", "OK 0.01", "OK 0.01"), replicas: "member-1=2 member-2=2 member-3=2",
				weights: "member-1=20 member-2=40 member-3=40"},
			{at: 10 * s, report: three("Breaching 0.12", "Breaching 0.2", "OK 0.01"), replicas: "member-1=2 member-2=2 member-3=2",
				weights: "member-1=20 member-2=20 member-3=60"},
		})
	})
	t.Run("degradedPercent 0 takes all traffic, minReplicas does not apply", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(shDegraded(0)), normal: "member-1=2 member-2=2 member-3=2"}, []shiftStep{
			{at: 0, report: three("Breaching 0.12", "OK 0.01", "OK 0.01"), replicas: "member-1=2 member-2=2 member-3=2",
				weights: "member-1=0 member-2=50 member-3=50"},
		})
	})
	t.Run("an even share below degradedPercent does not move", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(shDegraded(30)), normal: "a=1 b=1 c=1 d=1"}, []shiftStep{
			{at: 0, report: map[string]string{"a": "Breaching 0.12", "b": "OK 0", "c": "OK 0", "d": "OK 0"},
				weights: "a=25 b=25 c=25 d=25", caps: "a=30 b=100 c=100 d=100", shifts: "a 100->30 Degraded latency=0.12"},
		})
	})
	t.Run("room does not limit traffic", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), normal: "member-1=3 member-2=3", room: map[string]int64{"member-2": 3}}, []shiftStep{
			{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=3 member-2=3", weights: "member-1=20 member-2=80"},
		})
	})
}

// TestShiftZeroReplicasHaveNoWeight: "the weights of an app sum to 100
// (0 when it runs nowhere)".
func TestShiftZeroReplicasHaveNoWeight(t *testing.T) {
	t.Run("divided", func(t *testing.T) {
		runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=0 member-2=0"}, []shiftStep{
			{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=0 member-2=0", weights: "member-1=0 member-2=0"},
		})
	})
	t.Run("duplicated", func(t *testing.T) {
		res := Shift(ShiftInput{Policy: shPolicy(), Normal: shNormal("member-1=0 member-2=0"),
			Signals: map[string]ClusterSignals{"member-1": shReport("OK 0"), "member-2": shReport("OK 0")}, Now: t0})
		if got := shField(res.Status, func(c v1alpha1.ClusterTraffic) string { return strconv.Itoa(int(c.Weight)) }); got != "member-1=0 member-2=0" {
			t.Errorf("Duplicated with 0 replicas everywhere gives weights %q; ClusterTraffic.Weight says 0 when the app runs nowhere", got)
		}
	})
}

// TestShiftHistory: status.traffic.shifts keeps the newest
// MaxTrafficShifts, newest first.
func TestShiftHistory(t *testing.T) {
	s := time.Second
	var steps []shiftStep
	at := time.Duration(0)
	for range 8 { // 100 -> 20 by 10: 8 cuts
		steps = append(steps, shiftStep{at: at, report: ok2("Breaching 0.12", "OK 0.02")})
		at += 10 * s
	}
	for range 12 { // OK for the 30s window, then 8 recoveries
		steps = append(steps, shiftStep{at: at, report: ok2("OK 0.05", "OK 0.02")})
		at += 10 * s
	}
	res := runShift(t, shiftRun{policy: shPolicy(shSteps(10, 10*s)), divided: true, normal: "member-1=8 member-2=2"}, steps)
	var all []v1alpha1.TrafficShift
	for _, r := range res {
		all = append(all, r.Shifts...)
	}
	if len(all) != 16 {
		t.Fatalf("%d shifts, want 16: %s", len(all), shShifts(all))
	}
	last := res[len(res)-1].Status
	if c, _ := shCluster(last, "member-1"); c.CapPercent != 100 {
		t.Errorf("member-1 ends at cap %d, want 100", c.CapPercent)
	}
	want := slices.Clone(all[len(all)-MaxTrafficShifts:])
	slices.Reverse(want)
	if got := shShifts(last.Shifts); got != shShifts(want) || len(last.Shifts) != MaxTrafficShifts {
		t.Errorf("status shifts = %s, want the newest %d newest first: %s", got, MaxTrafficShifts, shShifts(want))
	}
	if !strings.HasPrefix(shShifts(last.Shifts), "member-1 90->100 Recovered") {
		t.Errorf("newest shift = %s, want the recovery to 100", shShifts(last.Shifts[:1]))
	}

	// Several shifts in one call are all kept, before the older ones.
	prev := &v1alpha1.TrafficStatus{Shifts: slices.Clone(last.Shifts)}
	r := callShift(t, ShiftInput{Policy: shPolicy(), Divided: true, Normal: shNormal("member-1=4 member-2=4 member-3=2"),
		Signals:  map[string]ClusterSignals{"member-1": shReport("Breaching 0.12"), "member-2": shReport("Breaching 0.2"), "member-3": shReport("OK 0")},
		Previous: prev, Now: t0.Add(time.Hour)})
	checkShiftInvariants(t, "two cuts at once", ShiftInput{Policy: shPolicy(), Divided: true, Normal: shNormal("member-1=4 member-2=4 member-3=2"), Previous: prev, Now: t0.Add(time.Hour)}, r)
	if len(r.Shifts) != 2 || len(r.Status.Shifts) != MaxTrafficShifts {
		t.Fatalf("shifts %s, status %d", shShifts(r.Shifts), len(r.Status.Shifts))
	}
	if !equality.Semantic.DeepEqual(r.Status.Shifts[2:], prev.Shifts[:MaxTrafficShifts-2]) {
		t.Errorf("older shifts after two new ones = %s, want %s", shShifts(r.Status.Shifts[2:]), shShifts(prev.Shifts[:MaxTrafficShifts-2]))
	}
}

// TestShiftClusterSetChanges: a cluster that leaves Normal leaves the
// status; a new one starts Healthy with cap 100.
func TestShiftClusterSetChanges(t *testing.T) {
	s := time.Second
	three := map[string]string{"member-1": "Breaching 0.12", "member-2": "OK 0.02", "member-3": "OK 0.02"}
	res := runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=6 member-2=2 member-3=2"}, []shiftStep{
		{at: 0, report: three, replicas: "member-1=2 member-2=4 member-3=4", caps: "member-1=20 member-2=100 member-3=100"},
		{at: 5 * s, normal: "member-1=6 member-2=4", report: three, replicas: "member-1=2 member-2=8",
			caps: "member-1=20 member-2=100", states: "member-1=Degraded member-2=Healthy", shifts: "-"},
		{at: 10 * s, normal: "member-1=6 member-2=2 member-4=2",
			report:   map[string]string{"member-1": "Breaching 0.12", "member-2": "OK 0.02", "member-4": "OK 0.02"},
			replicas: "member-1=2 member-2=4 member-4=4", caps: "member-1=20 member-2=100 member-4=100",
			states: "member-1=Degraded member-2=Healthy member-4=Healthy", shifts: "-",
			check: func(t *testing.T, r ShiftResult) {
				c, _ := shCluster(r.Status, "member-4")
				if c.Since == nil || !c.Since.Time.Equal(t0.Add(10*s)) || c.LastShift != nil || c.HealthySince == nil {
					t.Errorf("new member-4 = %+v, want since now, no lastShift, healthySince now", c)
				}
			}},
		// The cut cluster leaves and comes back: it starts afresh.
		{at: 15 * s, normal: "member-2=6 member-4=4", report: map[string]string{"member-2": "OK 0.02", "member-4": "OK 0.02"},
			replicas: "member-2=6 member-4=4", cond: "False AllHealthy"},
		{at: 20 * s, normal: "member-1=6 member-2=2 member-4=2",
			report:   map[string]string{"member-1": "OK 0.02", "member-2": "OK 0.02", "member-4": "OK 0.02"},
			replicas: "member-1=6 member-2=2 member-4=2", caps: "member-1=100 member-2=100 member-4=100",
			states: "member-1=Healthy member-2=Healthy member-4=Healthy", cond: "False AllHealthy"},
	})
	if _, ok := shCluster(res[1].Status, "member-3"); ok {
		t.Errorf("member-3 left Normal but is still in the status")
	}
	// The history of the shifts stays.
	if got := shShifts(res[4].Status.Shifts); got != "member-1 100->20 Degraded latency=0.12" {
		t.Errorf("shifts = %q, want the old cut kept", got)
	}
}

// TestShiftPending: Pending (above the threshold for less than `for`) is
// not sick yet, so it is not cut; but it is no place to shift to, and it
// does not count towards a recovery. A cluster back to OK takes replicas
// only `for` later.
func TestShiftPending(t *testing.T) {
	s := time.Second
	runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
		{at: 0, report: ok2("Pending 0.1", "OK 0.02"), replicas: "member-1=8 member-2=2", caps: "member-1=100 member-2=100",
			shifts: "-", cond: "False AllHealthy"},
		// Sick together, a moment apart: the first to breach is not cut
		// towards the other.
		{at: 5 * s, report: ok2("Breaching 0.12", "Pending 0.1"), replicas: "member-1=8 member-2=2", shifts: "-",
			cond: "False AllClustersDegraded", condMsg: []string{"member-1 (latency=0.12"}},
		// member-2 OK again: a place to shift to only `for` (5s) later.
		{at: 6 * s, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=8 member-2=2", shifts: "-", requeue: "5s"},
		{at: 11 * s, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=2 member-2=8", shifts: "member-1 100->20 Degraded latency=0.12"},
		// A cut cluster that is Pending is not healthy: no recovery.
		{at: 15 * s, report: ok2("Pending 0.1", "OK 0.02"), shifts: "-", requeue: "0s"},
		{at: 45 * s, report: ok2("Pending 0.1", "OK 0.02"), replicas: "member-1=2 member-2=8", shifts: "-"},
		// OK from 46s: the window counts from there.
		{at: 46 * s, report: ok2("OK 0.02", "OK 0.02"), shifts: "-", requeue: "30s"},
		{at: 76 * s, report: ok2("OK 0.02", "OK 0.02"), replicas: "member-1=8 member-2=2", shifts: "member-1 20->100 Recovered"},
	})
}

// TestShiftKeepsHTTPRoute: the HTTPRoute's sync status is carried over.
func TestShiftKeepsHTTPRoute(t *testing.T) {
	prev := &v1alpha1.TrafficStatus{HTTPRoute: &v1alpha1.HTTPRouteStatus{Name: "web", Synced: true}}
	res := runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2", previous: prev}, []shiftStep{
		{at: 0, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=2 member-2=8"},
	})
	if h := res[0].Status.HTTPRoute; h == nil || h.Name != "web" || !h.Synced || h == prev.HTTPRoute {
		t.Errorf("httpRoute = %+v, want a copy of the previous one", h)
	}
}

// TestShiftRandomProperties drives Shift with random reports and checks
// the invariants and timing rules at every step (runShift does).
func TestShiftRandomProperties(t *testing.T) {
	s := time.Second
	policies := map[string]*v1alpha1.HealthShift{
		"one step":            shPolicy(),
		"gradual":             shPolicy(shSteps(20, 10*s)),
		"gradual uneven":      shPolicy(shSteps(30, 7*s), shDegraded(10), shRecovery(20*s)),
		"floor 0, degraded 0": shPolicy(shDegraded(0), shMinReplicas(0)),
		"floor 3, defaults":   shPolicy(shMinReplicas(3), func(p *v1alpha1.HealthShift) { p.RecoveryWindow, p.For = nil, nil }),
	}
	states := []string{"OK 0.01", "OK 0.01", "OK 0.01", "OK 0.01", "Breaching 0.12", "Breaching 0.12", "Breaching 0.2", "Pending 0.1", "Unknown e", ""}
	for name, p := range policies {
		for _, divided := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s divided=%v", name, divided), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, uint64(len(name))))
				clusters := []string{"a", "b", "c"}
				sticky := map[string]string{}
				var steps []shiftStep
				at := time.Duration(0)
				for range 400 {
					at += time.Duration(1+rng.IntN(6)) * s
					rep := map[string]string{}
					for _, c := range clusters {
						if rng.IntN(4) == 0 || sticky[c] == "" { // reports change now and then
							sticky[c] = states[rng.IntN(len(states))]
						}
						if sticky[c] != "" {
							rep[c] = sticky[c]
						}
					}
					steps = append(steps, shiftStep{at: at, report: rep})
				}
				room := map[string]int64{"b": 7}
				res := runShift(t, shiftRun{policy: p, divided: divided, normal: "a=5 b=3 c=2", room: room}, steps)
				n := map[string]int{}
				for _, r := range res {
					for _, sh := range r.Shifts {
						n[sh.Reason]++
					}
					n[r.Condition.Reason+" condition"]++
				}
				for _, k := range []string{v1alpha1.ReasonHealthDegraded, v1alpha1.ReasonHealthRecovered,
					v1alpha1.ReasonHealthDegraded + " condition", v1alpha1.ReasonSignalUnknown + " condition", v1alpha1.ReasonAllClustersDegraded + " condition"} {
					if n[k] == 0 {
						t.Errorf("no %s in %d steps: the random reports do not exercise it (%v)", k, len(steps), n)
					}
				}
			})
		}
	}
}

// TestShiftWindowsSurviveTheStatusRoundTrip: the status keeps whole
// seconds; the window's start is kept rounded up, so a status written and
// read back between calls never ends a recovery window early.
func TestShiftWindowsSurviveTheStatusRoundTrip(t *testing.T) {
	p := shPolicy() // recovery window 30s
	normal := shNormal("member-1=8 member-2=2")
	start := time.Date(2026, 12, 1, 0, 0, 0, 900_000_000, time.UTC) // x.9s
	roundTrip := func(st *v1alpha1.TrafficStatus) *v1alpha1.TrafficStatus {
		raw, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		out := &v1alpha1.TrafficStatus{}
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	call := func(prev *v1alpha1.TrafficStatus, at time.Duration, m1 string) ShiftResult {
		return Shift(ShiftInput{Policy: p, Divided: true, Normal: normal, Previous: prev, Now: start.Add(at),
			Signals: map[string]ClusterSignals{"member-1": shReport(m1), "member-2": shReport("OK 0.02")}})
	}
	r := call(nil, 0, "Breaching 0.12")
	r = call(roundTrip(r.Status), 200*time.Millisecond, "OK 0.02") // OK first seen at x+1.1s
	// The window ends 30s later, at x+31.1s; a start stored rounded down
	// (x+1s) would end it at x+31.0s.
	r = call(roundTrip(r.Status), 30150*time.Millisecond, "OK 0.02") // x+31.05s
	if c, _ := shCluster(r.Status, "member-1"); c.CapPercent != 20 {
		t.Fatalf("member-1 recovered 29.95s after OK was first seen, before its 30s window: cap %d", c.CapPercent)
	}
	r = call(roundTrip(r.Status), 31200*time.Millisecond, "OK 0.02") // x+32.1s
	if c, _ := shCluster(r.Status, "member-1"); c.CapPercent != 100 {
		t.Fatalf("member-1 not recovered 31s after OK was first seen: cap %d", c.CapPercent)
	}
}

// TestShiftRecoveringTogether: two sick clusters recover a moment apart
// (each agent on its own clock): the first one back is no place to move
// the other's replicas to until it has been OK for `for`, so nothing
// moves.
func TestShiftRecoveringTogether(t *testing.T) {
	s := time.Second
	runShift(t, shiftRun{policy: shPolicy(), divided: true, normal: "member-1=8 member-2=2"}, []shiftStep{
		{at: 0, report: ok2("OK 0.02", "OK 0.02"), shifts: "-", cond: "False AllHealthy"},
		{at: 10 * s, report: ok2("Breaching 0.12", "Breaching 0.12"), shifts: "-", cond: "False AllClustersDegraded"},
		{at: 20 * s, report: ok2("Breaching 0.12", "OK 0.02"), replicas: "member-1=8 member-2=2", shifts: "-", requeue: "5s"},
		{at: 21 * s, report: ok2("OK 0.02", "OK 0.02"), replicas: "member-1=8 member-2=2", shifts: "-", cond: "False AllHealthy"},
	})
}
