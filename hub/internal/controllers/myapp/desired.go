package myapp

import (
	"errors"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/appstatus"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/nspolicy"
	"github.com/flotilla-dev/flotilla/pkg/placement"
	"github.com/flotilla-dev/flotilla/pkg/rollout"
)

// desiredState is what one reconcile wants the world to look like. It is
// computed from a scope by pure functions; the write step makes it so.
type desiredState struct {
	// decision is the placement in force: the scheduler's, or the previous
	// one when the app cannot be scheduled now (it keeps running where it
	// runs).
	decision *flotillav1.PlacementDecision
	// scheduled says the scheduler placed the replicas; only then is a
	// changed decision an event.
	scheduled bool
	// works are the Works to write and delete.
	works plan
	// rollout is the step of a Progressive rollout; nil otherwise.
	rollout *rollout.Result
	// status is the MyApp's new status, as it is when every write succeeds.
	status flotillav1.MyAppStatus
	// requeueAfter is the earliest time-driven change: a toleration or
	// failback window ending, a kept Work's grace period, a rollout's
	// minSuccessTime or progressDeadline, a deleted Work's cleanup timeout.
	requeueAfter time.Duration
	// shift is the health shift's decision; nil without
	// spec.placement.healthShift.
	shift *placement.ShiftResult
	// expired are deleted Works whose member did not confirm in time: the
	// write step lets them go (status.orphans names their clusters).
	expired []*flotillav1.Work
}

// desired computes the desired state of s.app: schedule, step the rollout,
// plan the Works (each target cluster rendered once) and compute the status.
// It reads s and writes nothing.
func desired(s *scope) (*desiredState, error) {
	app := s.app
	if ns := nspolicy.Decide(app.Namespace, render.TargetNamespace(app), s.policies); !ns.Allowed {
		return denied(s, ns), nil
	}
	result, schedErr := placement.Schedule(placement.InputFor(app, s.clusters.list, s.now))
	d := &desiredState{scheduled: schedErr == nil}
	reason := ""
	if schedErr != nil {
		reason = flotillav1.ReasonUnschedulable
		var se *placement.ScheduleError
		if errors.As(schedErr, &se) {
			reason = se.Reason
		}
		// Keep running where the app runs: render the previous decision
		// with the current spec, and say why nothing new could be placed.
		d.decision = app.Status.Placement.DeepCopy()
		if d.decision == nil {
			d.decision = &flotillav1.PlacementDecision{}
		}
	} else {
		d.decision = result.Decision(app.Status.Placement, app.Generation, s.now)
	}

	// The health shift moves replicas off sick clusters: the Works follow
	// the effective split, status.placement keeps the normal one.
	effective, shift := healthShift(s, d.decision)
	d.shift = shift

	var revisions map[string]*flotillav1.RevisionTemplate
	if rollout.Enabled(&app.Spec) {
		targets, err := rolloutTargets(s, effective)
		if err != nil {
			return nil, err
		}
		res := rollout.Step(app.Status.Rollout, &app.Spec, targets, s.now, s.revisionKey)
		d.rollout, revisions = &res, res.Revisions
	}
	var err error
	podSecurity := nspolicy.PodSecurity(app.Namespace, s.policies)
	if d.works, err = planWorks(app, effective, s.clusters, s.works, revisions, podSecurity, s.maxWorkBytes, s.deps, s.now); err != nil {
		return nil, err
	}
	var cleanupDue time.Duration
	d.expired, cleanupDue = expiredWorks(s.works, s.now, s.cleanupTimeout)
	d.status = newStatus(app, d, appstatus.Input{
		Generation:     app.Generation,
		Clusters:       withReports(d.works.views, s),
		ScheduleErr:    schedErr,
		ScheduleReason: reason,
		Warnings:       result.Warnings,
	})
	d.status.Orphans = orphansAfter(app.Status.Orphans, d.expired, d.decision.Clusters, s.now, s.cleanupTimeout)
	// Also when unschedulable: a failback about to complete may make the
	// app schedulable again, and the scheduler says when.
	d.requeueAfter = earliest(earliest(d.works.requeueAfter, result.RequeueAfter), cleanupDue)
	if d.rollout != nil {
		d.requeueAfter = earliest(d.requeueAfter, d.rollout.RequeueAfter)
	}
	if d.shift != nil {
		d.requeueAfter = earliest(d.requeueAfter, d.shift.RequeueAfter)
	}
	return d, nil
}

// denied is the desired state of an app whose target namespace the
// FleetNamespacePolicies do not allow (ns says why): the webhook refuses
// such an app, but a grant can be withdrawn after admission and a webhook
// can be bypassed. Nothing is written into the denied namespace: no Work
// is created or updated, the placement and a Progressive rollout's state
// stay as they are, and no Work is deleted either, so what runs keeps
// running and nothing is lost; Works already being deleted still expire.
// The status shows the clusters the app runs on and says why it is held:
// Scheduled False with reason NamespaceNotAllowed and the decision's
// message, which also makes Degraded True and Ready False.
func denied(s *scope, ns nspolicy.Decision) *desiredState {
	app := s.app
	d := &desiredState{decision: app.Status.Placement.DeepCopy()}
	if d.decision == nil {
		d.decision = &flotillav1.PlacementDecision{}
	}
	for _, tc := range d.decision.Clusters {
		d.works.views = append(d.works.views, appstatus.ClusterView{
			Name: tc.Name, Assigned: tc.Replicas, Member: s.clusters.byName[tc.Name], Work: s.works[tc.Name],
		})
	}
	var cleanupDue time.Duration
	d.expired, cleanupDue = expiredWorks(s.works, s.now, s.cleanupTimeout)
	d.status = newStatus(app, d, appstatus.Input{
		Generation:     app.Generation,
		Clusters:       withReports(d.works.views, s),
		ScheduleErr:    errors.New(ns.Message()),
		ScheduleReason: flotillav1.ReasonNamespaceNotAllowed,
	})
	// newStatus clears the rollout of an app without a rollout step; this
	// one's rollout is only held, and continues from where it stands.
	d.status.Rollout = app.Status.Rollout.DeepCopy()
	d.status.Orphans = orphansAfter(app.Status.Orphans, d.expired, d.decision.Clusters, s.now, s.cleanupTimeout)
	d.requeueAfter = cleanupDue
	return d
}

// withReports is views with each stored Work whose status is about to be
// written replaced by its copy with that status (scope.reported), so the
// app's status shows a member's report as soon as the hub has it, not
// after its Work status write and that write's watch event: the status is
// then the one computed a moment later from the stored Works. views itself
// is left as it is: the plan and the rollout decide on stored status only.
func withReports(views []appstatus.ClusterView, s *scope) []appstatus.ClusterView {
	if len(s.reported) == 0 {
		return views
	}
	out := slices.Clone(views)
	for i, v := range out {
		if rw := s.reported[v.Name]; rw != nil && v.Work != nil && v.Work == s.works[v.Name] {
			out[i].Work = rw
		}
	}
	return out
}

// rolloutTargets lists the decision's clusters as the rollout sees them,
// with the replicas each Work asks for (no rendering needed for that).
func rolloutTargets(s *scope, decision *flotillav1.PlacementDecision) ([]rollout.Target, error) {
	targets := make([]rollout.Target, 0, len(decision.Clusters))
	for _, tc := range decision.Clusters {
		mc := s.clusters.byName[tc.Name]
		assigned, err := render.Replicas(s.app, mc, tc.Replicas)
		if err != nil {
			return nil, err
		}
		targets = append(targets, rollout.Target{Name: tc.Name, Member: mc, Work: s.works[tc.Name], Assigned: assigned})
	}
	return targets, nil
}

// newStatus is app's status with the decision, the rollout and the
// aggregated view of the clusters in. It returns a new value and leaves
// app as it is.
func newStatus(app *flotillav1.MyApp, d *desiredState, in appstatus.Input) flotillav1.MyAppStatus {
	st := *app.Status.DeepCopy()
	st.Placement = d.decision
	st.Rollout = nil
	if d.rollout != nil {
		st.Rollout = d.rollout.Status
	}
	out := appstatus.Compute(in)
	st.Clusters = out.Clusters
	st.DesiredReplicas = out.Desired
	st.ReadyReplicas = out.Ready
	st.AvailableReplicas = out.Available
	st.UpdatedReplicas = out.Updated
	st.ClusterCount = out.Used
	for _, c := range out.Conditions {
		if d.rollout != nil && c.Type == flotillav1.ConditionProgressing {
			if rc, ok := rolloutCondition(d.rollout.Status, app.Generation); ok {
				c = rc
			}
		}
		meta.SetStatusCondition(&st.Conditions, c)
	}
	policy := app.Spec.Placement.HealthShift != nil
	if !policy {
		meta.RemoveStatusCondition(&st.Conditions, flotillav1.ConditionHealthShifted)
	}
	switch {
	case d.shift != nil:
		st.Traffic = d.shift.Status
		if policy {
			c := d.shift.Condition
			c.ObservedGeneration = app.Generation
			meta.SetStatusCondition(&st.Conditions, c)
		}
	case !policy:
		st.Traffic = nil
	}
	st.ObservedGeneration = app.Generation
	return st
}

// earliest is the shorter of two positive durations; zero means none.
func earliest(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}
