package membercluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The hub's status ConfigMap, where it reports the partition brake; it
// lives in the hub's own namespace, so the namespaced Role grants it.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create;update,namespace=flotilla-system

// EvictionOptions configure the partition brake and the eviction rate
// limit; zero values mean the defaults.
type EvictionOptions struct {
	// BrakeThreshold: when more than this share (0..1) of the members
	// fall silent within one grace period, none of them is tainted
	// (DefaultBrakeThreshold when 0; 1 or more turns the brake off).
	BrakeThreshold float64
	// RateLimit members at most are tainted unreachable per RateInterval
	// (DefaultEvictionRateLimit when 0; negative turns the limit off).
	RateLimit int
	// RateInterval is DefaultEvictionRateInterval when 0.
	RateInterval time.Duration
}

func (o EvictionOptions) policy(grace time.Duration) evictionPolicy {
	p := evictionPolicy{grace: grace, brakeThreshold: o.BrakeThreshold, rateLimit: o.RateLimit, rateInterval: o.RateInterval}
	if p.brakeThreshold <= 0 {
		p.brakeThreshold = DefaultBrakeThreshold
	}
	switch {
	case p.rateLimit == 0:
		p.rateLimit = DefaultEvictionRateLimit
	case p.rateLimit < 0:
		p.rateLimit = 0
	}
	if p.rateInterval <= 0 {
		p.rateInterval = DefaultEvictionRateInterval
	}
	return p
}

var (
	// partitionBrakeActive is 1 while the partition brake holds.
	partitionBrakeActive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flotilla_partition_brake_active",
		Help: "1 while the hub's partition brake holds: more than the configured share of members fell silent at once, so the hub assumes it is the one cut off and taints (evicts) none of them; 0 otherwise.",
	})
	// evictionsWaiting counts the unreachable members not tainted yet,
	// by why (brake or rateLimit).
	evictionsWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "flotilla_unreachable_clusters_held",
		Help: "Members past the heartbeat grace period that the hub has not tainted unreachable, by why: brake (the partition brake holds) or rateLimit (waiting for the eviction rate limit).",
	}, []string{"reason"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(partitionBrakeActive, evictionsWaiting)
}

// fleetState is the controller's fleet-wide memory. mu serializes the
// taint decisions, so that two members reconciled at once cannot both
// spend the rate limit's last slot.
type fleetState struct {
	mu sync.Mutex
	// decided says a fleet-wide decision was taken since this process
	// leads; until then the brake may be reported active from a previous
	// leader, and every member's reconcile decides fleet-wide once.
	decided bool
	// brake is the brake's state at the last decision.
	brake bool
	// reported is what the hub status ConfigMap says, as far as this
	// process wrote or read it ("" before).
	reported string
	// sinceOnce sets the Reconciler's since at its first reconcile.
	sinceOnce sync.Once
	// heldByBrake names the members the brake held at the last decision.
	heldByBrake map[string]bool
	// graceFrom restarts the grace period of the members the brake held
	// when it released: their silence counts from the release, not from
	// their last heartbeat (see decideTaint).
	graceFrom map[string]time.Time
}

// leaderSince is when this process started reconciling: the controller
// runs on the leader only, so it is when this hub became leader. A hub
// that just took over heard no heartbeats, and counts the grace period
// from then (see computeHealth).
func (r *Reconciler) leaderSince() time.Time {
	r.fleet.sinceOnce.Do(func() { r.since = r.Clock.Now() })
	return r.since
}

// taintDecision is what the fleet-wide decision says of one member.
type taintDecision struct {
	// taint: the member carries the unreachable taint.
	taint bool
	// ready replaces the computed Ready condition of a member that is past
	// the grace period but not tainted (nil: keep it).
	ready *metav1.Condition
	// recheckAfter is when to look again (0: no need).
	recheckAfter time.Duration
}

// decideTaint decides whether mc carries the unreachable taint. A healthy,
// untainted member needs no fleet-wide look while the brake is off;
// otherwise every member is read live (a cache could miss a taint just
// written, and spend the rate limit twice) and decideEvictions decides.
// Other members whose taint or Ready reason the decision changes are
// woken, and the brake is reported when it changes.
func (r *Reconciler) decideTaint(ctx context.Context, mc *flotillav1.MemberCluster, h healthOutput, now time.Time) (taintDecision, error) {
	has := unreachableTaintTime(mc.Spec.Taints) != nil
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	if !h.lost && !has && r.fleet.decided && !r.fleet.brake && len(r.fleet.graceFrom) == 0 {
		return taintDecision{}, nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var list flotillav1.MemberClusterList
	if err := reader.List(ctx, &list); err != nil {
		return taintDecision{}, fmt.Errorf("listing MemberClusters to decide the unreachable taint of %s: %w", mc.Name, err)
	}
	since := r.leaderSince()
	members := make([]memberSilence, 0, len(list.Items))
	lost := map[string]bool{}
	for i := range list.Items {
		m := &list.Items[i]
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		agent, known := r.Tracker.snapshot(m.Name)
		mh := computeHealth(healthInput{now: now, grace: r.Grace, since: since, agent: agent, known: known,
			recorded: m.Status.LastHeartbeatTime, conditions: m.Status.Conditions, name: m.Name, acceptance: m.Spec.Acceptance})
		lost[m.Name] = mh.lost
		ref := mh.lastHeartbeat
		if !ref.IsZero() && !known && since.After(ref) {
			ref = since
		}
		members = append(members, memberSilence{name: m.Name, silentSince: ref, taintedAt: unreachableTaintTime(m.Spec.Taints)})
	}
	p := r.Evictions.policy(r.Grace)
	d := decideEvictions(r.restartedGrace(members), now, p)
	if r.fleet.brake && !d.brake && len(r.fleet.heldByBrake) > 0 {
		// The brake just released. A partition heals over seconds, not at
		// once: the first members back release it while the others are
		// still reconnecting, and those, silent since long before, would
		// be tainted (and their replicas evicted) just before they return.
		// As the node lifecycle controller resets its timers when a zone
		// leaves full disruption, every member the brake held gets a new
		// grace period from now; one that stays silent through it is lost
		// then, under the rate limit as ever.
		if r.fleet.graceFrom == nil {
			r.fleet.graceFrom = map[string]time.Time{}
		}
		for name := range r.fleet.heldByBrake {
			r.fleet.graceFrom[name] = now
		}
		d = decideEvictions(r.restartedGrace(members), now, p)
		// Decide again once the restarted grace periods run out (a
		// healthy member's reconcile decides fleet-wide while any runs).
		soonestAfter(&d.recheckAfter, p.grace+time.Second)
	}
	// A member in its restarted grace period is past its own (lost) but
	// neither tainted nor held otherwise: say why.
	for name := range r.fleet.graceFrom {
		if _, held := d.held[name]; lost[name] && !d.taint[name] && !held {
			d.held[name] = holdBrakeReleased
		}
	}
	r.fleet.decided, r.fleet.brake = true, d.brake
	r.fleet.heldByBrake = map[string]bool{}
	for name, why := range d.held {
		if why == holdBrake {
			r.fleet.heldByBrake[name] = true
		}
	}
	r.reportBrake(ctx, d, p)

	// Wake the members whose taint or Ready reason this decision changes.
	var wake []string
	for i := range list.Items {
		m := &list.Items[i]
		if m.Name == mc.Name || !m.DeletionTimestamp.IsZero() {
			continue
		}
		if d.taint[m.Name] != (unreachableTaintTime(m.Spec.Taints) != nil) {
			wake = append(wake, m.Name)
			continue
		}
		if lost[m.Name] {
			if c := meta.FindStatusCondition(m.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Reason != heldReason(d.held[m.Name]) {
				wake = append(wake, m.Name)
			}
		}
	}
	r.Tracker.wakeClusters(wake)

	out := taintDecision{taint: d.taint[mc.Name], recheckAfter: d.recheckAfter}
	if why, ok := d.held[mc.Name]; ok && h.lost {
		c := h.ready
		c.Reason = heldReason(why)
		c.Message += "; " + heldMessage(why, d, p)
		out.ready = &c
	}
	return out, nil
}

// restartedGrace counts the silence of the members whose grace period
// restarted when the brake released from that moment, when it is later
// than their last heartbeat, and forgets the restarts of members heard
// since.
func (r *Reconciler) restartedGrace(members []memberSilence) []memberSilence {
	for i := range members {
		from, ok := r.fleet.graceFrom[members[i].name]
		switch {
		case !ok:
		case members[i].silentSince.IsZero() || members[i].silentSince.After(from):
			delete(r.fleet.graceFrom, members[i].name)
		default:
			members[i].silentSince = from
		}
	}
	return members
}

// soonestAfter lowers *recheck to d when it is 0 or later.
func soonestAfter(recheck *time.Duration, d time.Duration) {
	if *recheck == 0 || d < *recheck {
		*recheck = d
	}
}

// heldReason is the Ready reason of a member past the grace period.
func heldReason(why string) string {
	switch why {
	case holdBrake, holdBrakeReleased:
		return flotillav1.ReasonPartitionBrake
	case holdRateLimit:
		return flotillav1.ReasonEvictionRateLimited
	}
	return flotillav1.ReasonHeartbeatMissed
}

// unreachableTaintTime is the TimeAdded of the unreachable taint among
// taints; nil when there is none. A taint without TimeAdded (written by
// hand) counts as added long ago.
func unreachableTaintTime(taints []corev1.Taint) *time.Time {
	for _, t := range taints {
		if t.Key == flotillav1.TaintClusterUnreachable && t.Effect == corev1.TaintEffectNoExecute {
			if t.TimeAdded == nil {
				return &time.Time{}
			}
			at := t.TimeAdded.Time
			return &at
		}
	}
	return nil
}

// wakeClusters enqueues each of clusters for a reconcile.
func (t *Tracker) wakeClusters(clusters []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range clusters {
		t.wake(c)
	}
}

// hubStatusData renders the brake's state for the hub status ConfigMap.
func hubStatusData(d evictionDecision, p evictionPolicy) (brake, message string, held []string) {
	for _, n := range slices.Sorted(maps.Keys(d.held)) {
		if d.held[n] == holdBrake {
			held = append(held, n)
		}
	}
	if !d.brake {
		return "false", fmt.Sprintf("%d of %d members fell silent within one grace period (%s), not more than %.0f%%: unreachable members are tainted, at most %d per %s",
			d.counted, d.population, p.grace, p.brakeThreshold*100, p.rateLimit, p.rateInterval), nil
	}
	return "true", fmt.Sprintf("%d of %d members fell silent within one grace period (%s), more than %.0f%%: this hub assumes it is the one cut off from them and taints (evicts) none of them until they heartbeat again or fewer are silent; held: %s",
		d.counted, d.population, p.grace, p.brakeThreshold*100, strings.Join(held, ", ")), held
}

// reportBrake writes the brake's state to the hub status ConfigMap, sets
// the gauges, and emits an event on the ConfigMap when the brake engages
// or releases. A failed write is logged and tried again at the next
// decision, not returned: reporting must not stop the taint decision.
func (r *Reconciler) reportBrake(ctx context.Context, d evictionDecision, p evictionPolicy) {
	partitionBrakeActive.Set(boolGauge(d.brake))
	counts := map[string]float64{holdBrake: 0, holdRateLimit: 0}
	for _, why := range d.held {
		if why == holdBrakeReleased {
			why = holdBrake
		}
		counts[why]++
	}
	for k, v := range counts {
		evictionsWaiting.WithLabelValues(k).Set(v)
	}
	brake, message, held := hubStatusData(d, p)
	key := brake + "|" + strings.Join(held, ",")
	if key == r.fleet.reported || r.Namespace == "" {
		return
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: flotillav1.HubStatusConfigMapName}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: flotillav1.HubStatusConfigMapName}}
	case err != nil:
		log.FromContext(ctx).Error(err, "reading the hub status ConfigMap", "namespace", r.Namespace)
		return
	}
	was := cm.Data["partitionBrake"]
	if was == brake && cm.Data["heldClusters"] == strings.Join(held, ",") {
		r.fleet.reported = key
		return
	}
	var conds []metav1.Condition
	_ = json.Unmarshal([]byte(cm.Data["conditions"]), &conds)
	status, reason := metav1.ConditionFalse, "Released"
	if d.brake {
		status, reason = metav1.ConditionTrue, flotillav1.ReasonPartitionBrake
	}
	meta.SetStatusCondition(&conds, metav1.Condition{Type: flotillav1.ConditionPartitionBrake, Status: status, Reason: reason, Message: message})
	c := meta.FindStatusCondition(conds, flotillav1.ConditionPartitionBrake)
	raw, _ := json.Marshal(conds)
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["partitionBrake"] = brake
	cm.Data["message"] = message
	cm.Data["since"] = c.LastTransitionTime.UTC().Format(time.RFC3339)
	cm.Data["heldClusters"] = strings.Join(held, ",")
	cm.Data["conditions"] = string(raw)
	if cm.ResourceVersion == "" {
		err = r.Client.Create(ctx, cm)
	} else {
		err = r.Client.Update(ctx, cm)
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "writing the partition brake to the hub status ConfigMap", "namespace", r.Namespace, "brake", brake)
		return
	}
	r.fleet.reported = key
	switch {
	case d.brake && was != "true":
		r.eventOn(cm, corev1.EventTypeWarning, flotillav1.ReasonPartitionBrake, "HoldEvictions", "%s", message)
	case !d.brake && was == "true":
		r.eventOn(cm, corev1.EventTypeNormal, "PartitionBrakeReleased", "ResumeEvictions", "%s", message)
	}
}

func (r *Reconciler) eventOn(obj client.Object, typ, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, typ, reason, action, format, args...)
	}
}
