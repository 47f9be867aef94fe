package myapp

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/metrics"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// LabelRevision is set on a Progressive MyApp's Works to the revision they
// render, so the rollout knows whether a Work's reported status is about
// the revision it waits for. Only the hub reads it.
const LabelRevision = "flotilla.dev/revision"

// Defaults of a Progressive rollout, as the CRD writes them.
const (
	defaultProgressDeadline = 10 * time.Minute
)

// progressive says whether app rolls out Progressively.
func progressive(app *flotillav1.MyApp) bool {
	return app.Spec.Rollout != nil && app.Spec.Rollout.Strategy == flotillav1.RolloutProgressive
}

// revisionOf returns what spec runs as a revision: its image, template and
// overrides without replicas (an override that only sets replicas is not
// part of it), named by a stable hash of their JSON.
func revisionOf(spec *flotillav1.MyAppSpec) flotillav1.RevisionTemplate {
	rt := flotillav1.RevisionTemplate{Image: spec.Image, Template: spec.Template.DeepCopy()}
	for i := range spec.Overrides {
		o := spec.Overrides[i].DeepCopy()
		if o.Image == nil && len(o.Env) == 0 {
			continue
		}
		o.Replicas = nil
		rt.Overrides = append(rt.Overrides, *o)
	}
	raw, err := json.Marshal(struct {
		Image     string                       `json:"image"`
		Template  *flotillav1.PodTemplate      `json:"template,omitempty"`
		Overrides []flotillav1.ClusterOverride `json:"overrides,omitempty"`
	}{rt.Image, rt.Template, rt.Overrides})
	if err != nil {
		// Plain structs of strings, maps and quantities always encode.
		panic(fmt.Sprintf("encoding a revision: %v", err))
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	rt.Name = fmt.Sprintf("%016x", h.Sum64())[:10]
	return rt
}

// appAt returns a copy of app that runs revision rt: image, template and
// overrides from rt, replicas (the spec's and the overrides') from app.
func appAt(app *flotillav1.MyApp, rt *flotillav1.RevisionTemplate) *flotillav1.MyApp {
	out := app.DeepCopy()
	out.Spec.Image = rt.Image
	out.Spec.Template = rt.Template.DeepCopy()
	out.Spec.Overrides = nil
	for i := range rt.Overrides {
		o := rt.Overrides[i].DeepCopy()
		o.Replicas = nil
		out.Spec.Overrides = append(out.Spec.Overrides, *o)
	}
	// Replica overrides are not part of a revision: the current ones apply
	// last, in their own order, so the replicas are what the spec says now.
	for _, o := range app.Spec.Overrides {
		if o.Replicas != nil {
			out.Spec.Overrides = append(out.Spec.Overrides, flotillav1.ClusterOverride{
				Name: o.Name, TargetCluster: *o.TargetCluster.DeepCopy(), Replicas: o.Replicas,
			})
		}
	}
	return out
}

// rolloutTarget is one target cluster as the rollout sees it.
type rolloutTarget struct {
	name string
	// member is the MemberCluster (for the order groups); nil if unknown.
	member *flotillav1.MemberCluster
	// work is the cluster's Work in the cache; nil when not written yet.
	work *flotillav1.Work
	// assigned is the replicas the cluster's Work asks for.
	assigned int32
}

// rolloutEvent is an event the controller emits on the MyApp.
type rolloutEvent struct {
	typ, reason, message string
}

// rolloutResult is the outcome of one rollout step.
type rolloutResult struct {
	status *flotillav1.RolloutStatus
	// revisions is the revision each target cluster renders.
	revisions map[string]*flotillav1.RevisionTemplate
	// requeueAfter is when a minSuccessTime or progressDeadline ends.
	requeueAfter time.Duration
	events       []rolloutEvent
	// started, completed, failed and rolledBack say what happened in this
	// step, for the metrics.
	started, completed, failed, rolledBack bool
	// waveDurations are the durations of the waves that finished.
	waveDurations []time.Duration
}

// rolloutPolicy is a ProgressiveRollout with its defaults filled in.
type rolloutPolicy struct {
	paused           bool
	maxConcurrency   intstr.IntOrString
	maxFailures      intstr.IntOrString
	order            []flotillav1.RolloutGroup
	minSuccessTime   time.Duration
	progressDeadline time.Duration
	onFailure        flotillav1.RolloutFailureAction
}

func policyOf(spec *flotillav1.MyAppSpec) rolloutPolicy {
	p := rolloutPolicy{
		maxConcurrency:   intstr.FromInt32(1),
		maxFailures:      intstr.FromInt32(0),
		progressDeadline: defaultProgressDeadline,
		onFailure:        flotillav1.RolloutFailurePause,
	}
	if spec.Rollout == nil {
		return p
	}
	p.paused = spec.Rollout.Paused
	if pr := spec.Rollout.Progressive; pr != nil {
		if pr.MaxConcurrency != nil {
			p.maxConcurrency = *pr.MaxConcurrency
		}
		if pr.MaxFailures != nil {
			p.maxFailures = *pr.MaxFailures
		}
		p.order = pr.Order
		if pr.MinSuccessTime != nil {
			p.minSuccessTime = pr.MinSuccessTime.Duration
		}
		if pr.ProgressDeadline != nil {
			p.progressDeadline = pr.ProgressDeadline.Duration
		}
		if pr.OnFailure != "" {
			p.onFailure = pr.OnFailure
		}
	}
	return p
}

// scaled resolves a count or percentage of total, rounded down.
func scaled(v intstr.IntOrString, total int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, total, false)
	if err != nil {
		// The CRD validates both forms; a value it let through that does
		// not parse counts as 0.
		return 0
	}
	return n
}

// progressiveRollout advances a Progressive rollout by one step. It is
// pure: the previous status (nil on the first reconcile), the spec, the
// target clusters with their Works and now in; the new status, the revision
// each cluster renders and what happened out. Every piece of state lives in
// the returned status, so a new hub continues where the old one stood.
func progressiveRollout(prev *flotillav1.RolloutStatus, spec *flotillav1.MyAppSpec, targets []rolloutTarget, now time.Time) rolloutResult {
	desired := revisionOf(spec)
	pol := policyOf(spec)
	res := rolloutResult{revisions: map[string]*flotillav1.RevisionTemplate{}}
	byName := map[string]*rolloutTarget{}
	for i := range targets {
		byName[targets[i].name] = &targets[i]
	}
	nowT := metav1.NewTime(now.Truncate(time.Second)) // what the API stores

	var st *flotillav1.RolloutStatus
	if prev == nil {
		// The first revision (a new MyApp, or one switched to Progressive)
		// is not a rollout: every cluster runs it at once.
		st = &flotillav1.RolloutStatus{
			CurrentRevision: desired.Name, TargetRevision: desired.Name,
			Phase: flotillav1.RolloutPhaseComplete, Revisions: []flotillav1.RevisionTemplate{desired},
		}
	} else {
		st = prev.DeepCopy()
	}
	templates := map[string]*flotillav1.RevisionTemplate{}
	for i := range st.Revisions {
		templates[st.Revisions[i].Name] = &st.Revisions[i]
	}
	if templates[desired.Name] == nil {
		st.Revisions = append(st.Revisions, desired)
		templates[desired.Name] = &st.Revisions[len(st.Revisions)-1]
	}
	if templates[st.CurrentRevision] == nil {
		// A status that lost its current template (edited by hand): the
		// desired revision is all there is to render.
		st.CurrentRevision = desired.Name
	}

	clusters := map[string]*flotillav1.ClusterRolloutStatus{}
	for i := range st.Clusters {
		if byName[st.Clusters[i].Name] != nil {
			clusters[st.Clusters[i].Name] = &st.Clusters[i]
		}
	}
	// A new revision supersedes the one rolling out. Clusters not yet
	// touched go straight to it when their turn comes; clusters on the
	// superseded one wait, Pending, for theirs.
	if desired.Name != st.TargetRevision {
		st.TargetRevision = desired.Name
		st.Phase = flotillav1.RolloutPhaseProgressing
		res.started = true
		for _, c := range clusters {
			switch {
			case c.Revision == st.TargetRevision && c.Revision == st.CurrentRevision:
				*c = flotillav1.ClusterRolloutStatus{Name: c.Name, Revision: c.Revision, Phase: flotillav1.ClusterRolloutSucceeded}
			case c.Revision == st.TargetRevision:
				*c = flotillav1.ClusterRolloutStatus{Name: c.Name, Revision: c.Revision, Phase: flotillav1.ClusterRolloutUpdating, StartTime: &nowT}
			default:
				*c = flotillav1.ClusterRolloutStatus{Name: c.Name, Revision: c.Revision, Phase: flotillav1.ClusterRolloutPending}
			}
		}
		if st.TargetRevision != st.CurrentRevision {
			res.events = append(res.events, rolloutEvent{corev1.EventTypeNormal, flotillav1.ReasonRollingOut,
				fmt.Sprintf("rolling out revision %s (image %s) from %s", desired.Name, desired.Image, st.CurrentRevision)})
		}
	}

	// A rollout is under way while the target is new or a cluster runs
	// another revision (a return to the last good one after a failure).
	rolling := st.TargetRevision != st.CurrentRevision
	for _, c := range clusters {
		if c.Revision != st.TargetRevision {
			rolling = true
		}
	}

	// Clusters that joined the placement start on the last good revision
	// (the newest, when nothing is rolling out); clusters that left drop out.
	out := make([]flotillav1.ClusterRolloutStatus, 0, len(targets))
	for _, t := range targets {
		if c := clusters[t.name]; c != nil {
			if templates[c.Revision] == nil {
				c.Revision, c.Phase = st.CurrentRevision, flotillav1.ClusterRolloutPending
			}
			out = append(out, *c)
			continue
		}
		c := flotillav1.ClusterRolloutStatus{Name: t.name, Revision: st.CurrentRevision, Phase: flotillav1.ClusterRolloutPending}
		if !rolling {
			c.Phase = flotillav1.ClusterRolloutSucceeded
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	st.Clusters = out

	if rolling {
		res.advance(st, pol, byName, now)
	} else {
		st.Phase = flotillav1.RolloutPhaseComplete
		st.Message = fmt.Sprintf("every cluster runs revision %s", st.CurrentRevision)
		for i := range st.Clusters {
			st.Clusters[i].Phase, st.Clusters[i].Message = flotillav1.ClusterRolloutSucceeded, ""
		}
	}

	// Keep the templates in use: the current, the target and any a
	// cluster still renders. The API keeps three at most: past that (a
	// revision superseded twice while clusters ran each), clusters on the
	// older superseded revisions move on to the target at once.
	var others []string
	for _, c := range st.Clusters {
		if c.Revision != st.CurrentRevision && c.Revision != st.TargetRevision && !slices.Contains(others, c.Revision) {
			others = append(others, c.Revision)
		}
	}
	if len(others) > 1 {
		keep := others[0]
		for _, c := range st.Clusters { // the superseded revision started last
			if c.Revision != keep && slices.Contains(others, c.Revision) && c.StartTime != nil {
				for _, k := range st.Clusters {
					if k.Revision == keep && k.StartTime != nil && k.StartTime.Before(c.StartTime) {
						keep = c.Revision
					}
				}
			}
		}
		for i := range st.Clusters {
			c := &st.Clusters[i]
			if c.Revision != keep && slices.Contains(others, c.Revision) {
				c.Revision, c.Phase, c.Message = st.TargetRevision, flotillav1.ClusterRolloutUpdating, ""
				c.StartTime, c.AvailableTime = &nowT, nil
			}
		}
	}
	inUse := map[string]bool{st.CurrentRevision: true, st.TargetRevision: true}
	for _, c := range st.Clusters {
		inUse[c.Revision] = true
	}
	kept := st.Revisions[:0:0]
	for _, rt := range st.Revisions {
		if inUse[rt.Name] {
			kept = append(kept, rt)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Name < kept[j].Name })
	st.Revisions = kept
	for i := range st.Revisions {
		templates[st.Revisions[i].Name] = &st.Revisions[i]
	}

	succeeded := 0
	for _, c := range st.Clusters {
		if c.Revision == st.TargetRevision && c.Phase == flotillav1.ClusterRolloutSucceeded {
			succeeded++
		}
		res.revisions[c.Name] = templates[c.Revision]
	}
	st.Progress = fmt.Sprintf("%d/%d", succeeded, len(st.Clusters))
	res.status = st
	return res
}

// advance evaluates the updating clusters, applies the failure policy,
// starts the next wave and completes the rollout.
func (res *rolloutResult) advance(st *flotillav1.RolloutStatus, pol rolloutPolicy, byName map[string]*rolloutTarget, now time.Time) {
	nowT := metav1.NewTime(now.Truncate(time.Second)) // what the API stores
	requeue := func(at time.Time) {
		if d := at.Sub(now); d > 0 && (res.requeueAfter == 0 || d < res.requeueAfter) {
			res.requeueAfter = d
		}
	}
	total := len(st.Clusters)

	// Evaluate the clusters updating to the target.
	var finished []*flotillav1.ClusterRolloutStatus
	for i := range st.Clusters {
		c := &st.Clusters[i]
		if c.Phase != flotillav1.ClusterRolloutUpdating || c.Revision != st.TargetRevision {
			continue
		}
		t := byName[c.Name]
		ok, failMsg, progress := clusterUpdated(t, st.TargetRevision)
		switch {
		case failMsg != "":
			c.Phase, c.Message = flotillav1.ClusterRolloutFailed, failMsg
		case ok:
			if c.AvailableTime == nil {
				// Rounded up to the second the API stores: minSuccessTime is
				// then never counted from before the cluster was available
				// (at most a second late, never early).
				up := metav1.NewTime(now.Truncate(time.Second))
				if up.Time.Before(now) {
					up = metav1.NewTime(up.Add(time.Second))
				}
				c.AvailableTime = &up
			}
			if end := c.AvailableTime.Add(pol.minSuccessTime); !now.Before(end) {
				c.Phase, c.Message = flotillav1.ClusterRolloutSucceeded, ""
			} else {
				c.Message = fmt.Sprintf("available; succeeds at %s unless it stops being so", end.UTC().Format(time.RFC3339))
				requeue(end)
			}
		default:
			c.AvailableTime = nil
			c.Message = progress
		}
		if c.Phase == flotillav1.ClusterRolloutUpdating && c.StartTime != nil {
			if deadline := c.StartTime.Add(pol.progressDeadline); !now.Before(deadline) {
				c.Phase = flotillav1.ClusterRolloutFailed
				c.Message = fmt.Sprintf("not updated and available within the progress deadline (%s): %s", pol.progressDeadline, progress)
			} else {
				requeue(deadline)
			}
		}
		if c.Phase != flotillav1.ClusterRolloutUpdating {
			finished = append(finished, c)
			if c.Phase == flotillav1.ClusterRolloutFailed {
				res.events = append(res.events, rolloutEvent{corev1.EventTypeWarning, flotillav1.ReasonRolloutFailed,
					fmt.Sprintf("cluster %s failed to update to revision %s: %s", c.Name, st.TargetRevision, c.Message)})
			}
		}
	}
	// A wave (the clusters started together) ends when its last cluster
	// finishes.
	for _, c := range finished {
		if c.StartTime == nil {
			continue
		}
		last := true
		for _, o := range st.Clusters {
			if o.Phase == flotillav1.ClusterRolloutUpdating && o.StartTime != nil && o.StartTime.Equal(c.StartTime) {
				last = false
			}
		}
		seen := false
		for _, d := range finished {
			if d == c {
				break
			}
			if d.StartTime != nil && d.StartTime.Equal(c.StartTime) {
				seen = true
			}
		}
		if last && !seen {
			res.waveDurations = append(res.waveDurations, now.Sub(c.StartTime.Time))
		}
	}

	var failed, updating, succeeded []string
	for _, c := range st.Clusters {
		if c.Revision != st.TargetRevision {
			continue
		}
		switch c.Phase {
		case flotillav1.ClusterRolloutFailed:
			failed = append(failed, c.Name)
		case flotillav1.ClusterRolloutUpdating:
			updating = append(updating, c.Name)
		case flotillav1.ClusterRolloutSucceeded:
			succeeded = append(succeeded, c.Name)
		}
	}

	// Too many failures: stop, and roll back if asked to.
	if maxF := scaled(pol.maxFailures, total); len(failed) > maxF &&
		st.Phase != flotillav1.RolloutPhaseFailed && st.Phase != flotillav1.RolloutPhaseRolledBack {
		msg := fmt.Sprintf("%d clusters failed (%s), more than the %d tolerated", len(failed), strings.Join(failed, ", "), maxF)
		if pol.onFailure == flotillav1.RolloutFailureRollback {
			st.Phase = flotillav1.RolloutPhaseRolledBack
			st.Message = msg + fmt.Sprintf("; updated clusters returned to revision %s", st.CurrentRevision)
			for i := range st.Clusters {
				c := &st.Clusters[i]
				if c.Revision == st.CurrentRevision {
					continue
				}
				c.Revision, c.StartTime, c.AvailableTime = st.CurrentRevision, nil, nil
				if c.Phase != flotillav1.ClusterRolloutFailed {
					c.Phase, c.Message = flotillav1.ClusterRolloutPending, ""
				}
			}
			res.rolledBack = true
			res.events = append(res.events, rolloutEvent{corev1.EventTypeWarning, flotillav1.ReasonRolledBack, st.Message})
		} else {
			st.Phase = flotillav1.RolloutPhaseFailed
			st.Message = msg + fmt.Sprintf("; clusters not yet updated stay on revision %s", st.CurrentRevision)
			res.failed = true
			res.events = append(res.events, rolloutEvent{corev1.EventTypeWarning, flotillav1.ReasonRolloutFailed, st.Message})
		}
		return
	}
	if st.Phase == flotillav1.RolloutPhaseFailed || st.Phase == flotillav1.RolloutPhaseRolledBack {
		// Stopped: only a new revision starts it again.
		return
	}

	if len(succeeded) == total {
		st.Phase = flotillav1.RolloutPhaseComplete
		st.Message = fmt.Sprintf("revision %s rolled out to all %d clusters", st.TargetRevision, total)
		res.events = append(res.events, rolloutEvent{corev1.EventTypeNormal, flotillav1.ReasonComplete, st.Message})
		st.CurrentRevision = st.TargetRevision
		res.completed = true
		return
	}

	if pol.paused {
		st.Phase = flotillav1.RolloutPhasePaused
		st.Message = fmt.Sprintf("paused by spec.rollout.paused at %d/%d clusters on revision %s", len(succeeded), total, st.TargetRevision)
		return
	}
	st.Phase = flotillav1.RolloutPhaseProgressing

	// The next wave: up to maxConcurrency clusters updating, in order.
	slots := max(scaled(pol.maxConcurrency, total), 1) - len(updating)
	var started []string
	for _, c := range nextClusters(st, pol.order, byName) {
		if slots <= 0 {
			break
		}
		c.Revision, c.Phase, c.Message = st.TargetRevision, flotillav1.ClusterRolloutUpdating, ""
		c.StartTime, c.AvailableTime = &nowT, nil
		started = append(started, c.Name)
		updating = append(updating, c.Name)
		requeue(now.Add(pol.progressDeadline))
		slots--
	}
	if len(started) > 0 {
		res.events = append(res.events, rolloutEvent{corev1.EventTypeNormal, flotillav1.ReasonRollingOut,
			fmt.Sprintf("wave: updating %s to revision %s (%d/%d clusters succeeded)", strings.Join(started, ", "), st.TargetRevision, len(succeeded), total)})
	}
	sort.Strings(updating)
	st.Message = fmt.Sprintf("rolling out revision %s: %d/%d clusters succeeded", st.TargetRevision, len(succeeded), total)
	if len(updating) > 0 {
		st.Message += "; updating " + strings.Join(updating, ", ")
	}
}

// nextClusters lists, in rollout order, the clusters that may start now:
// the pending ones of the first order group not yet done (a group is done
// when each of its clusters succeeded or failed), then, once every group is
// done, the clusters in no group by name.
func nextClusters(st *flotillav1.RolloutStatus, order []flotillav1.RolloutGroup, byName map[string]*rolloutTarget) []*flotillav1.ClusterRolloutStatus {
	group := make([]int, len(st.Clusters)) // index into order; len(order) for none
	for i, c := range st.Clusters {
		group[i] = len(order)
		t := byName[c.Name]
		if t == nil || t.member == nil {
			continue
		}
		for g := range order {
			if ok, err := placement.AffinityMatches(&order[g].Clusters, t.member); err == nil && ok {
				group[i] = g
				break
			}
		}
	}
	for g := 0; g <= len(order); g++ {
		var pending []*flotillav1.ClusterRolloutStatus
		done := true
		for i := range st.Clusters {
			if group[i] != g {
				continue
			}
			c := &st.Clusters[i]
			onTarget := c.Revision == st.TargetRevision
			if !onTarget || c.Phase == flotillav1.ClusterRolloutPending {
				pending = append(pending, c)
			}
			if !onTarget || (c.Phase != flotillav1.ClusterRolloutSucceeded && c.Phase != flotillav1.ClusterRolloutFailed) {
				done = false
			}
		}
		if !done {
			return pending // already sorted by name
		}
	}
	return nil
}

// clusterUpdated says whether the cluster's Work renders revision and the
// member reports its Deployment updated and available with the assigned
// replicas; failMsg is the member's message when it reported the
// Deployment failed; progress says where it stands otherwise.
func clusterUpdated(t *rolloutTarget, revision string) (ok bool, failMsg, progress string) {
	if t == nil || t.work == nil {
		return false, "", "Work not written yet"
	}
	w := t.work
	if w.Labels[LabelRevision] != revision || !reported(w) {
		return false, "", "waiting for the member to apply the new revision"
	}
	if c := meta.FindStatusCondition(w.Status.Conditions, flotillav1.ConditionDegraded); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == flotillav1.ReasonProgressDeadlineExceeded {
		return false, conditionText(c), ""
	}
	for _, m := range w.Status.Manifests {
		if m.Workload != nil && m.Workload.ObservedGeneration != m.Workload.Generation {
			return false, "", "waiting for the member's Deployment controller to observe the new generation"
		}
	}
	wl := workload(w)
	progress = fmt.Sprintf("%d/%d replicas updated, %d available, %d ready", wl.UpdatedReplicas, t.assigned, wl.AvailableReplicas, wl.ReadyReplicas)
	ok = wl.Replicas == t.assigned && wl.UpdatedReplicas == t.assigned && wl.AvailableReplicas == t.assigned && wl.ReadyReplicas == t.assigned
	return ok, "", progress
}

// rolloutCondition is the Progressing condition of a rollout that is not
// complete; ok is false when the aggregated one stands.
func rolloutCondition(st *flotillav1.RolloutStatus, generation int64) (metav1.Condition, bool) {
	c := metav1.Condition{Type: flotillav1.ConditionProgressing, ObservedGeneration: generation, Message: truncate(st.Message)}
	switch st.Phase {
	case flotillav1.RolloutPhaseProgressing:
		c.Status, c.Reason = metav1.ConditionTrue, flotillav1.ReasonRollingOut
	case flotillav1.RolloutPhasePaused:
		c.Status, c.Reason = metav1.ConditionUnknown, flotillav1.ReasonPaused
	case flotillav1.RolloutPhaseFailed:
		c.Status, c.Reason = metav1.ConditionFalse, flotillav1.ReasonRolloutFailed
	case flotillav1.RolloutPhaseRolledBack:
		c.Status, c.Reason = metav1.ConditionFalse, flotillav1.ReasonRolledBack
	default:
		return c, false
	}
	return c, true
}

// advanceRollout runs one step of app's Progressive rollout. A changed
// rollout status is written (with optimistic locking) before any Work, so
// the Works never get ahead of the recorded state and a new hub continues
// from it; a conflict means the cache was stale and the reconcile is
// retried. Events and metrics follow the write.
func (r *Reconciler) advanceRollout(ctx context.Context, app, original *flotillav1.MyApp, decision *flotillav1.PlacementDecision,
	clusters clusterSet, works map[string]*flotillav1.Work, now time.Time) (*rolloutResult, error) {
	targets := make([]rolloutTarget, 0, len(decision.Clusters))
	for _, tc := range decision.Clusters {
		mc := clusters.byName[tc.Name]
		_, assigned, err := render.Work(app, tc.Name, mc, tc.Replicas)
		if err != nil {
			return nil, reconcile.TerminalError(err)
		}
		targets = append(targets, rolloutTarget{name: tc.Name, member: mc, work: works[tc.Name], assigned: assigned})
	}
	res := progressiveRollout(app.Status.Rollout, &app.Spec, targets, now)
	if !equality.Semantic.DeepEqual(original.Status.Rollout, res.status) {
		patched := original.DeepCopy()
		patched.Status.Rollout = res.status
		if err := r.Client.Status().Patch(ctx, patched, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil {
			return nil, fmt.Errorf("recording the rollout of revision %s: %w", res.status.TargetRevision, err)
		}
		// The rest of the status is patched against what was just written.
		*original = *patched.DeepCopy()
		app.ResourceVersion = patched.ResourceVersion
		res.status = patched.Status.Rollout
		r.recordRollout(app, &res)
	}
	app.Status.Rollout = res.status
	return &res, nil
}

// recordRollout emits the step's events and counts it.
func (r *Reconciler) recordRollout(app *flotillav1.MyApp, res *rolloutResult) {
	for _, e := range res.events {
		r.event(app, e.typ, e.reason, "Rollout", "%s", e.message)
	}
	ns, name := app.Namespace, app.Name
	if res.started && res.status.TargetRevision != res.status.CurrentRevision {
		metrics.RolloutsStarted.WithLabelValues(ns, name).Inc()
	}
	if res.completed {
		metrics.RolloutsCompleted.WithLabelValues(ns, name).Inc()
	}
	if res.failed {
		metrics.RolloutsFailed.WithLabelValues(ns, name).Inc()
	}
	if res.rolledBack {
		metrics.RolloutsRolledBack.WithLabelValues(ns, name).Inc()
	}
	for _, d := range res.waveDurations {
		metrics.RolloutWaveDuration.Observe(d.Seconds())
	}
}
