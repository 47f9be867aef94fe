package rollout

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/workstatus"
)

// Enabled says whether spec rolls out Progressively.
func Enabled(spec *flotillav1.MyAppSpec) bool {
	return spec.Rollout != nil && spec.Rollout.Strategy == flotillav1.RolloutProgressive
}

// Revision returns what spec runs as a revision: its image, template and
// overrides without replicas (an override that only sets replicas is not
// part of it), named by a stable hash of their JSON.
func Revision(spec *flotillav1.MyAppSpec) flotillav1.RevisionTemplate {
	rt := flotillav1.RevisionTemplate{Image: spec.Image, Template: spec.Template.DeepCopy(), MainContainer: spec.MainContainer}
	for i := range spec.Overrides {
		o := spec.Overrides[i].DeepCopy()
		if o.Image == nil && len(o.Env) == 0 && o.Resources == nil && len(o.NodeSelector) == 0 && len(o.Tolerations) == 0 && len(o.Patches) == 0 {
			continue
		}
		o.Replicas = nil
		rt.Overrides = append(rt.Overrides, *o)
	}
	// MainContainer is empty for every MyApp of the first version, so
	// their revision names stay what they were.
	raw, err := json.Marshal(struct {
		Image         string                       `json:"image"`
		Template      *flotillav1.PodTemplate      `json:"template,omitempty"`
		MainContainer string                       `json:"mainContainer,omitempty"`
		Overrides     []flotillav1.ClusterOverride `json:"overrides,omitempty"`
	}{rt.Image, rt.Template, rt.MainContainer, rt.Overrides})
	if err != nil {
		// Plain structs of strings, maps and quantities always encode.
		panic(fmt.Sprintf("encoding a revision: %v", err))
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	rt.Name = fmt.Sprintf("%016x", h.Sum64())[:10]
	return rt
}

// AppAt returns a copy of app that runs revision rt: image, template and
// overrides from rt, replicas (the spec's and the overrides') from app.
func AppAt(app *flotillav1.MyApp, rt *flotillav1.RevisionTemplate) *flotillav1.MyApp {
	out := app.DeepCopy()
	out.Spec.Image = rt.Image
	out.Spec.Template = rt.Template.DeepCopy()
	out.Spec.MainContainer = rt.MainContainer
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

// Target is one target cluster as the rollout sees it.
type Target struct {
	Name string
	// Member is the MemberCluster (for the order groups); nil if unknown.
	Member *flotillav1.MemberCluster
	// Work is the cluster's Work in the cache; nil when not written yet.
	Work *flotillav1.Work
	// Assigned is the replicas the cluster's Work asks for.
	Assigned int32
}

// Event is an event the controller emits on the MyApp.
type Event struct {
	Type, Reason, Message string
}

// Result is the outcome of one rollout step.
type Result struct {
	// Status is the rollout's new status, every piece of its state.
	Status *flotillav1.RolloutStatus
	// Revisions is the revision each target cluster renders.
	Revisions map[string]*flotillav1.RevisionTemplate
	// RequeueAfter is when a minSuccessTime or progressDeadline ends.
	RequeueAfter time.Duration
	// Events are what to tell on the MyApp, in order.
	Events []Event
	// Started, Completed, Failed and RolledBack say what happened in this
	// step, for the metrics.
	Started, Completed, Failed, RolledBack bool
	// WaveDurations are the durations of the waves that finished.
	WaveDurations []time.Duration
}

// policy is a ProgressiveRollout with its defaults filled in.
type policy struct {
	paused           bool
	maxConcurrency   intstr.IntOrString
	maxFailures      intstr.IntOrString
	order            []flotillav1.RolloutGroup
	minSuccessTime   time.Duration
	progressDeadline time.Duration
	onFailure        flotillav1.RolloutFailureAction
}

func policyOf(spec *flotillav1.MyAppSpec) policy {
	p := policy{
		maxConcurrency:   intstr.FromInt32(flotillav1.DefaultMaxConcurrency),
		maxFailures:      intstr.FromInt32(flotillav1.DefaultMaxFailures),
		minSuccessTime:   flotillav1.DefaultMinSuccessTime,
		progressDeadline: flotillav1.DefaultProgressDeadline,
		onFailure:        flotillav1.DefaultOnFailure,
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

// Step advances a Progressive rollout by one step. It is
// pure: the previous status (nil on the first reconcile), the spec, the
// target clusters with their Works and now in; the new status, the revision
// each cluster renders and what happened out. Every piece of state lives in
// the returned status, so a new hub continues where the old one stood.
//
// key is the hub's revision key: the desired revision's template is signed
// with it, and a template in prev whose digest does not verify (written by
// someone else into status, or by a hub with another key) is dropped before
// anything renders it, with a warning event; clusters on it move to the
// current revision, as when a template is missing.
func Step(prev *flotillav1.RolloutStatus, spec *flotillav1.MyAppSpec, targets []Target, now time.Time, key []byte) Result {
	desired := Revision(spec)
	Sign(&desired, key)
	pol := policyOf(spec)
	res := Result{Revisions: map[string]*flotillav1.RevisionTemplate{}}
	byName := map[string]*Target{}
	for i := range targets {
		byName[targets[i].Name] = &targets[i]
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
		st.Revisions = res.verified(st.Revisions, key)
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
		res.Started = true
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
			res.Events = append(res.Events, Event{corev1.EventTypeNormal, flotillav1.ReasonRollingOut,
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
		if c := clusters[t.Name]; c != nil {
			if templates[c.Revision] == nil {
				c.Revision, c.Phase = st.CurrentRevision, flotillav1.ClusterRolloutPending
			}
			out = append(out, *c)
			continue
		}
		c := flotillav1.ClusterRolloutStatus{Name: t.Name, Revision: st.CurrentRevision, Phase: flotillav1.ClusterRolloutPending}
		if !rolling {
			c.Phase = flotillav1.ClusterRolloutSucceeded
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	st.Clusters = out

	if rolling && nothingRuns(targets) && !pol.paused &&
		st.Phase != flotillav1.RolloutPhaseFailed && st.Phase != flotillav1.RolloutPhaseRolledBack {
		// Scaled to zero: no replica is updated, so there is nothing to
		// wait for and nothing that can fail; every cluster takes the
		// target revision at once.
		st.CurrentRevision = st.TargetRevision
		for i := range st.Clusters {
			st.Clusters[i] = flotillav1.ClusterRolloutStatus{Name: st.Clusters[i].Name, Revision: st.TargetRevision, Phase: flotillav1.ClusterRolloutSucceeded}
		}
		st.Phase = flotillav1.RolloutPhaseComplete
		st.Message = fmt.Sprintf("revision %s applied to all %d clusters at once: the app is scaled to zero", st.TargetRevision, len(st.Clusters))
		res.Completed = true
		res.Events = append(res.Events, Event{corev1.EventTypeNormal, flotillav1.ReasonComplete, st.Message})
		rolling = false
	}

	if rolling {
		res.advance(st, pol, byName, now)
	} else if !res.Completed {
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
		res.Revisions[c.Name] = templates[c.Revision]
	}
	st.Progress = fmt.Sprintf("%d/%d", succeeded, len(st.Clusters))
	res.Status = st
	return res
}

// nothingRuns says no target cluster is asked for a replica: the app is
// scaled to zero (or placed nowhere).
func nothingRuns(targets []Target) bool {
	for _, t := range targets {
		if t.Assigned > 0 {
			return false
		}
	}
	return true
}

// advance evaluates the updating clusters, applies the failure policy,
// starts the next wave and completes the rollout.
func (res *Result) advance(st *flotillav1.RolloutStatus, pol policy, byName map[string]*Target, now time.Time) {
	nowT := metav1.NewTime(now.Truncate(time.Second)) // what the API stores
	requeue := func(at time.Time) {
		if d := at.Sub(now); d > 0 && (res.RequeueAfter == 0 || d < res.RequeueAfter) {
			res.RequeueAfter = d
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
				res.Events = append(res.Events, Event{corev1.EventTypeWarning, flotillav1.ReasonRolloutFailed,
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
			res.WaveDurations = append(res.WaveDurations, now.Sub(c.StartTime.Time))
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
			res.RolledBack = true
			res.Events = append(res.Events, Event{corev1.EventTypeWarning, flotillav1.ReasonRolledBack, st.Message})
		} else {
			st.Phase = flotillav1.RolloutPhaseFailed
			st.Message = msg + fmt.Sprintf("; clusters not yet updated stay on revision %s", st.CurrentRevision)
			res.Failed = true
			res.Events = append(res.Events, Event{corev1.EventTypeWarning, flotillav1.ReasonRolloutFailed, st.Message})
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
		res.Events = append(res.Events, Event{corev1.EventTypeNormal, flotillav1.ReasonComplete, st.Message})
		st.CurrentRevision = st.TargetRevision
		res.Completed = true
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
		res.Events = append(res.Events, Event{corev1.EventTypeNormal, flotillav1.ReasonRollingOut,
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
func nextClusters(st *flotillav1.RolloutStatus, order []flotillav1.RolloutGroup, byName map[string]*Target) []*flotillav1.ClusterRolloutStatus {
	group := make([]int, len(st.Clusters)) // index into order; len(order) for none
	for i, c := range st.Clusters {
		group[i] = len(order)
		t := byName[c.Name]
		if t == nil || t.Member == nil {
			continue
		}
		for g := range order {
			if ok, err := placement.AffinityMatches(&order[g].Clusters, t.Member); err == nil && ok {
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
func clusterUpdated(t *Target, revision string) (ok bool, failMsg, progress string) {
	if t == nil || t.Work == nil {
		return false, "", "Work not written yet"
	}
	w := t.Work
	if w.Labels[flotillav1.LabelRevision] != revision || !workstatus.Observed(w) {
		return false, "", "waiting for the member to apply the new revision"
	}
	if c := meta.FindStatusCondition(w.Status.Conditions, flotillav1.ConditionDegraded); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason == flotillav1.ReasonProgressDeadlineExceeded {
		return false, workstatus.ConditionText(c), ""
	}
	if !workstatus.GenerationsObserved(w) {
		return false, "", "waiting for the member's Deployment controller to observe the new generation"
	}
	wl := workstatus.Workload(w)
	progress = fmt.Sprintf("%d/%d replicas updated, %d available, %d ready", wl.UpdatedReplicas, t.Assigned, wl.AvailableReplicas, wl.ReadyReplicas)
	ok = wl.Replicas == t.Assigned && wl.UpdatedReplicas == t.Assigned && wl.AvailableReplicas == t.Assigned && wl.ReadyReplicas == t.Assigned
	return ok, "", progress
}

// verified returns the templates of revisions whose digest verifies under
// key, and records a warning event for each one it drops.
func (r *Result) verified(revisions []flotillav1.RevisionTemplate, key []byte) []flotillav1.RevisionTemplate {
	kept := revisions[:0:0]
	for i := range revisions {
		if Verify(&revisions[i], key) {
			kept = append(kept, revisions[i])
			continue
		}
		r.Events = append(r.Events, Event{corev1.EventTypeWarning, flotillav1.ReasonRevisionRejected,
			fmt.Sprintf("ignored revision template %q in status: its digest does not verify under this hub's revision key (written by someone else, or by a hub with another key); clusters on it move to the current revision", revisions[i].Name)})
	}
	return kept
}
