package placement

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// This file is the health shift (spec.placement.healthShift): after the
// scheduler's normal split, it cuts the share of clusters whose signals
// breach and gives the rest to the healthy ones. Like Schedule it is pure:
// the state it carries from call to call is the MyApp's status.traffic,
// and time is ShiftInput.Now.
//
// Each cluster has a cap, the most of the app (in percent) it may take:
// 100 when Healthy. A cluster whose signals breach has its cap cut to
// degradedPercent (by stepPercent per stepInterval when set); one whose
// signals stay OK for the recovery window has it raised back the same
// way. A cut cluster keeps min(normal, max(floor, total*cap/100))
// replicas; what it gives up goes to the uncut clusters in proportion to
// their normal replicas, as far as their room allows.
//
// Rules that keep it safe:
//   - a cut needs another cluster that is uncut and whose signals are OK:
//     nothing moves away from every cluster at once, and at least one
//     cluster always keeps its full share;
//   - a shift the other way than a cluster's last one waits the recovery
//     window after it, so an oscillating signal moves a cluster at most
//     once per window; steps the same way wait stepInterval;
//   - a signal that cannot be evaluated (Unknown) or was not reported yet
//     changes nothing for its cluster; nor does one above its threshold
//     for less than `for` (Pending), which is no place to shift to either.

// ClusterSignals is what one cluster reported on the app's signals.
type ClusterSignals []v1alpha1.SignalStatus

// ShiftInput is everything one health-shift decision depends on.
type ShiftInput struct {
	// Policy is spec.placement.healthShift (not nil).
	Policy *v1alpha1.HealthShift
	// Divided says replicas are shared among the clusters; when
	// Duplicated each cluster runs all of them and only traffic shifts.
	Divided bool
	// Normal is the scheduler's split, sorted by name.
	Normal []v1alpha1.TargetCluster
	// Signals are the clusters' reports, by cluster name.
	Signals map[string]ClusterSignals
	// Room, when a cluster is in it, is the most replicas the cluster can
	// run in all (its capacity); a cluster not in it is unbounded.
	Room map[string]int64
	// Previous is the last status.traffic, or nil.
	Previous *v1alpha1.TrafficStatus
	// Now is the current time.
	Now time.Time
}

// ShiftResult is one health-shift decision.
type ShiftResult struct {
	// Clusters is the effective split: Normal with the replicas shifted.
	Clusters []v1alpha1.TargetCluster
	// Status is the new status.traffic.
	Status *v1alpha1.TrafficStatus
	// Shifts are the cap changes of this call (also at the head of
	// Status.Shifts).
	Shifts []v1alpha1.TrafficShift
	// Condition is the HealthShifted condition (ObservedGeneration unset).
	Condition metav1.Condition
	// RequeueAfter, when not zero, is when a step or recovery now held by
	// time alone becomes due.
	RequeueAfter time.Duration
}

// MaxTrafficShifts is how many shifts status.traffic.shifts keeps.
const MaxTrafficShifts = 10

// observation is a cluster's signals summed up.
type observation struct {
	state   v1alpha1.SignalState // OK, Pending, Breaching or Unknown
	signal  string
	value   string
	message string
}

// observe sums up what a cluster reported against the policy's signals:
// Breaching if any breaches, else Unknown if any is unknown or missing,
// else Pending if any is above its threshold for less than `for`, else
// OK. Pending is not sick yet, so it is not cut; but neither is it
// healthy: it is no place to shift replicas to (clusters that turn sick
// together breach a moment apart, on their own clocks, and the first must
// not be cut towards the second), and it does not count towards a
// recovery.
func observe(p *v1alpha1.HealthShift, reported ClusterSignals) observation {
	byName := make(map[string]v1alpha1.SignalStatus, len(reported))
	for _, s := range reported {
		byName[s.Name] = s
	}
	var unknown, pending *observation
	for _, sig := range p.Signals {
		s, ok := byName[sig.Name]
		above := func() string {
			return fmt.Sprintf("%s=%s above %s", sig.Name, s.Value, strconv.FormatFloat(sig.Threshold.AsApproximateFloat64(), 'g', 6, 64))
		}
		switch {
		case ok && s.State == v1alpha1.SignalBreaching:
			return observation{state: v1alpha1.SignalBreaching, signal: sig.Name, value: s.Value, message: above()}
		case unknown != nil:
		case !ok:
			unknown = &observation{state: v1alpha1.SignalUnknown, signal: sig.Name, message: fmt.Sprintf("%s not reported yet", sig.Name)}
		case s.State == v1alpha1.SignalUnknown:
			unknown = &observation{state: v1alpha1.SignalUnknown, signal: sig.Name, message: fmt.Sprintf("%s unknown: %s", sig.Name, s.Message)}
		case s.State == v1alpha1.SignalPending && pending == nil:
			pending = &observation{state: v1alpha1.SignalPending, signal: sig.Name, value: s.Value, message: above() + ", not yet for `for`"}
		}
	}
	switch {
	case unknown != nil:
		return *unknown
	case pending != nil:
		return *pending
	}
	return observation{state: v1alpha1.SignalOK}
}

// Shift computes the effective split of in.Normal under in.Policy.
func Shift(in ShiftInput) ShiftResult {
	p := in.Policy
	now := metav1.NewTime(in.Now)
	// The times the windows count from are kept rounded up to the second:
	// the status stores whole seconds, and a time rounded down would end
	// a window up to a second early.
	mark := metav1.NewTime(in.Now.Truncate(time.Second))
	if !mark.Equal(&now) {
		mark = metav1.NewTime(mark.Add(time.Second))
	}
	prev := map[string]v1alpha1.ClusterTraffic{}
	var prevShifts []v1alpha1.TrafficShift
	if in.Previous != nil {
		for _, c := range in.Previous.Clusters {
			prev[c.Name] = c
		}
		prevShifts = in.Previous.Shifts
	}
	n := len(in.Normal)
	obs := make([]observation, n)
	cur := make([]v1alpha1.ClusterTraffic, n)
	for i, tc := range in.Normal {
		obs[i] = observe(p, in.Signals[tc.Name])
		c, ok := prev[tc.Name]
		if !ok {
			c = v1alpha1.ClusterTraffic{Name: tc.Name, CapPercent: 100, State: v1alpha1.HealthStateHealthy, Since: &now}
		}
		c.NormalReplicas = tc.Replicas
		cur[i] = c
	}
	// healthyOther says a cluster other than i is uncut, OK, and not
	// unhealthy within the last `for` (as long as a breach must last to
	// count: clusters that recover together, a moment apart on their own
	// clocks, are not cut one towards the other); or, when one will be
	// soon, when (soon is not zero).
	healthyOther := func(i int) (ok bool, soon time.Time) {
		for j := range cur {
			if j == i || cur[j].CapPercent < 100 || obs[j].state != v1alpha1.SignalOK {
				continue
			}
			if cur[j].UnhealthyUntil == nil {
				return true, time.Time{}
			}
			at := cur[j].UnhealthyUntil.Add(p.ForDuration())
			if !at.After(in.Now) {
				return true, time.Time{}
			}
			if soon.IsZero() || at.Before(soon) {
				soon = at
			}
		}
		return false, soon
	}
	var (
		shifts  []v1alpha1.TrafficShift
		requeue time.Duration
		blocked []string // breaching clusters no cut may reach: nowhere to go
	)
	wait := func(until time.Time) bool {
		if until.After(in.Now) {
			requeue = earliest(requeue, until.Sub(in.Now))
			return true
		}
		return false
	}
	sinceLast := func(c *v1alpha1.ClusterTraffic, d time.Duration) time.Time {
		if c.LastShift == nil {
			return time.Time{}
		}
		return c.LastShift.Add(d)
	}
	target := p.DegradedShare()
	// Recoveries first, then cuts: a cut depends on which other clusters
	// are uncut and OK, so deciding it after every recovery of this call
	// makes the outcome independent of the clusters' order.
	for pass := 0; pass < 2; pass++ {
		for i := range cur {
			c, o := &cur[i], obs[i]
			if (o.state == v1alpha1.SignalBreaching) != (pass == 1) {
				continue
			}
			switch o.state {
			case v1alpha1.SignalBreaching:
				c.HealthySince = nil
				c.Reason = o.message
				if c.CapPercent <= target {
					continue
				}
				if ok, soon := healthyOther(i); !ok {
					if soon.IsZero() {
						blocked = append(blocked, c.Name+" ("+o.message+")")
					} else {
						wait(soon)
					}
					continue
				}
				gap := p.RecoveryDuration() // the other way than the last shift
				if c.State == v1alpha1.HealthStateDegraded {
					gap = p.StepDuration()
				}
				if wait(sinceLast(c, gap)) {
					continue
				}
				to := max(target, c.CapPercent-p.Step())
				shifts = append(shifts, v1alpha1.TrafficShift{Time: now, Cluster: c.Name, FromPercent: c.CapPercent, ToPercent: to,
					Signal: o.signal, Value: o.value, Reason: v1alpha1.ReasonHealthDegraded})
				c.CapPercent, c.LastShift = to, &mark
				if c.State != v1alpha1.HealthStateDegraded {
					c.State, c.Since = v1alpha1.HealthStateDegraded, &now
				}
				if to > target {
					wait(in.Now.Add(p.StepDuration())) // the next step
				}
			case v1alpha1.SignalOK:
				if c.HealthySince == nil {
					c.HealthySince = &mark
					if _, seen := prev[c.Name]; seen {
						// It was not OK at the last call.
						c.UnhealthyUntil = &mark
					}
				}
				if c.CapPercent >= 100 {
					c.Reason = ""
					continue
				}
				c.Reason = "signals OK since " + c.HealthySince.UTC().Format(time.RFC3339)
				gap := p.RecoveryDuration()
				if c.State == v1alpha1.HealthStateRecovering {
					gap = p.StepDuration()
				}
				if wait(c.HealthySince.Add(p.RecoveryDuration())) || wait(sinceLast(c, gap)) {
					continue
				}
				to := min(100, c.CapPercent+p.Step())
				shifts = append(shifts, v1alpha1.TrafficShift{Time: now, Cluster: c.Name, FromPercent: c.CapPercent, ToPercent: to,
					Reason: v1alpha1.ReasonHealthRecovered})
				c.CapPercent, c.LastShift = to, &mark
				switch {
				case to >= 100:
					c.State, c.Since, c.Reason = v1alpha1.HealthStateHealthy, &now, ""
				case c.State != v1alpha1.HealthStateRecovering:
					c.State, c.Since = v1alpha1.HealthStateRecovering, &now
				}
				if to < 100 {
					wait(in.Now.Add(p.StepDuration())) // the next step
				}
			default: // Unknown or Pending: hold; a recovery window starts again
				c.HealthySince = nil
				c.Reason = o.message
			}
		}
	}

	// The split: replicas when Divided, and traffic in percent.
	normal := make([]int64, n)
	caps := make([]int32, n)
	// What a cut frees goes to the uncut clusters whose signals are OK;
	// only when there are none (they turned Unknown or breach, held by
	// time) to any uncut cluster.
	okUncut := false
	for i := range cur {
		normal[i] = int64(in.Normal[i].Replicas)
		caps[i] = cur[i].CapPercent
		okUncut = okUncut || (caps[i] >= 100 && obs[i].state == v1alpha1.SignalOK)
	}
	receives := func(i int) bool { return caps[i] >= 100 && (!okUncut || obs[i].state == v1alpha1.SignalOK) }
	out := slices.Clone(in.Normal)
	var weights []int64
	if in.Divided {
		room := make([]int64, n)
		for i, tc := range in.Normal {
			room[i] = -1
			if r, ok := in.Room[tc.Name]; ok {
				room[i] = max(r, normal[i])
			}
		}
		eff := cutShares(normal, caps, receives, room, int64(p.Floor()))
		for i := range out {
			out[i].Replicas = int32(eff[i])
			cur[i].Replicas = int32(eff[i])
		}
		weights = percentOf(eff)
	} else {
		even := make([]int64, n)
		if slices.ContainsFunc(normal, func(v int64) bool { return v > 0 }) {
			apportion(100, make([]int64, n), nil, even)
		}
		weights = cutShares(even, caps, receives, nil, 0)
		for i := range cur {
			cur[i].Replicas = in.Normal[i].Replicas
		}
	}
	for i := range cur {
		cur[i].Weight = int32(weights[i])
	}

	st := &v1alpha1.TrafficStatus{Clusters: cur}
	for i := len(shifts) - 1; i >= 0; i-- {
		st.Shifts = append(st.Shifts, shifts[i])
	}
	st.Shifts = append(st.Shifts, prevShifts...)
	if len(st.Shifts) > MaxTrafficShifts {
		st.Shifts = st.Shifts[:MaxTrafficShifts]
	}
	if in.Previous != nil && in.Previous.HTTPRoute != nil {
		st.HTTPRoute = in.Previous.HTTPRoute.DeepCopy()
	}
	return ShiftResult{Clusters: out, Status: st, Shifts: shifts, Condition: shiftCondition(cur, obs, blocked), RequeueAfter: requeue}
}

// shiftCondition sums the clusters up in the HealthShifted condition.
func shiftCondition(cur []v1alpha1.ClusterTraffic, obs []observation, blocked []string) metav1.Condition {
	var unknown, cut []string
	for i, c := range cur {
		if obs[i].state == v1alpha1.SignalUnknown {
			unknown = append(unknown, c.Name+": "+obs[i].message)
		}
		if c.CapPercent < 100 {
			cut = append(cut, fmt.Sprintf("%s at most %d%% (%s)", c.Name, c.CapPercent, c.Reason))
		}
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionHealthShifted}
	switch {
	case len(unknown) > 0:
		cond.Status, cond.Reason = metav1.ConditionUnknown, v1alpha1.ReasonSignalUnknown
		cond.Message = "a signal cannot be evaluated, so its cluster's share does not move: " + strings.Join(unknown, "; ")
	case len(blocked) > 0:
		// Status says whether a share is cut; the reason that a sick
		// cluster has nowhere to go.
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonAllClustersDegraded
		if len(cut) > 0 {
			cond.Status = metav1.ConditionTrue
		}
		cond.Message = "no healthy cluster to shift to, nothing moves: " + strings.Join(blocked, "; ")
	case len(cut) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonHealthDegraded
		cond.Message = strings.Join(cut, "; ")
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonAllHealthy
		cond.Message = "every cluster has its normal share"
	}
	if len(cut) > 0 && cond.Reason != v1alpha1.ReasonHealthDegraded {
		cond.Message += "; cut: " + strings.Join(cut, "; ")
	}
	return cond
}

// cutShares moves units away from the cut clusters (caps[i] < 100): a cut
// cluster keeps min(normal, max(floor, total*cap/100)); the units it gives
// up go to the receiving clusters (uncut, and receives says so) in
// proportion to their normal units, each up to its room (-1 or nil:
// unbounded). Units no uncut cluster has room for
// stay with the cut clusters, so the total never changes.
func cutShares(normal []int64, caps []int32, receives func(int) bool, room []int64, floor int64) []int64 {
	var total int64
	for _, v := range normal {
		total += v
	}
	eff := slices.Clone(normal)
	var freed int64
	var receivers []int
	for i := range normal {
		if caps[i] >= 100 {
			if receives(i) {
				receivers = append(receivers, i)
			}
			continue
		}
		keep := min(normal[i], max(floor, total*int64(caps[i])/100))
		freed += normal[i] - keep
		eff[i] = keep
	}
	for freed > 0 && len(receivers) > 0 {
		w := make([]int64, len(receivers))
		add := make([]int64, len(receivers))
		for k, i := range receivers {
			w[k] = normal[i]
		}
		apportion(freed, w, nil, add)
		var next []int
		for k, i := range receivers {
			give := add[k]
			if room != nil && room[i] >= 0 && eff[i]+give >= room[i] {
				give = max(0, room[i]-eff[i])
			} else {
				next = append(next, i)
			}
			eff[i] += give
			freed -= give
		}
		if len(next) == len(receivers) {
			break
		}
		receivers = next
	}
	// What found no room goes back to the cut clusters, in order.
	for i := range normal {
		if freed <= 0 {
			break
		}
		if caps[i] < 100 {
			back := min(freed, normal[i]-eff[i])
			eff[i] += back
			freed -= back
		}
	}
	return eff
}

// percentOf shares 100 among the parts by value (all 0: all 0).
func percentOf(v []int64) []int64 {
	out := make([]int64, len(v))
	var sum int64
	for _, x := range v {
		sum += x
	}
	if sum > 0 {
		apportion(100, v, nil, out)
	}
	return out
}

// earliest is the shorter of two positive durations; zero means none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// ShiftRoom is ShiftInput.Room for app: for each cluster that reports a
// resource summary, the replicas of the app it runs now (status.traffic's
// effective split, else the scheduler's) plus those that still fit. A
// cluster without a summary is left out (unbounded): the shift does not
// stall on clusters that report no capacity, and the member's own
// scheduler keeps what does not fit Pending.
func ShiftRoom(app *v1alpha1.MyApp, clusters []v1alpha1.MemberCluster) map[string]int64 {
	running := map[string]int64{}
	if app.Status.Placement != nil {
		for _, tc := range app.Status.Placement.Clusters {
			running[tc.Name] = int64(tc.Replicas)
		}
	}
	if app.Status.Traffic != nil {
		for _, c := range app.Status.Traffic.Clusters {
			running[c.Name] = int64(c.Replicas)
		}
	}
	reqs := compileRequests(PodRequests(&app.Spec, nil))
	own := clusterRequests(app, clusters)
	room := map[string]int64{}
	for i := range clusters {
		mc := &clusters[i]
		if mc.Status.Resources == nil {
			continue
		}
		r := reqs
		if o, ok := own[mc.Name]; ok {
			r = compileRequests(o)
		}
		room[mc.Name] = running[mc.Name] + availableReplicas(mc.Status.Resources, r)
	}
	return room
}
