// Package appstatus computes a MyApp's status from what its members
// reported: one entry per cluster the app is placed on or is leaving (phase,
// replica numbers, the member's message), the totals, and the Scheduled,
// Applied, Available, Progressing, Degraded and Ready conditions with their
// reasons. It is pure: the MyApp controller gathers the views and writes
// the result; hub/render is its other half (a MyApp into Works).
package appstatus

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
	"github.com/flotilla-dev/flotilla/pkg/workstatus"
)

// MaxMessageLength bounds a condition message, well within the API's
// 32768 bytes.
const MaxMessageLength = 32000

// ClusterView is what the status computation knows of one cluster the app
// is placed on or is leaving.
type ClusterView struct {
	Name string
	// Assigned is the replica count the cluster's Work asks for.
	Assigned int32
	// Work is the Work as the hub's cache has it; nil when not written yet.
	Work *flotillav1.Work
	// Member is the MemberCluster; nil when the hub does not know it.
	Member *flotillav1.MemberCluster
	// Evicting marks a cluster replicas were moved away from whose Work is
	// kept until the replacements are available.
	Evicting bool
	// Evicted is set for a cluster replicas were moved away from and whose
	// Work is gone: it is listed, as lost, until its replicas fail back.
	Evicted *flotillav1.EvictedCluster
}

// Input is everything Compute reads.
type Input struct {
	Generation int64
	Clusters   []ClusterView
	// ScheduleErr is the scheduler's error, nil when it placed every replica.
	ScheduleErr error
	// ScheduleReason is the condition reason for ScheduleErr.
	ScheduleReason string
	// Warnings are the scheduler's remarks, added to Scheduled's message.
	Warnings []string
}

// Output is the computed part of MyApp.status.
type Output struct {
	Clusters                                 []flotillav1.ClusterAppStatus
	Desired, Ready, Available, Updated, Used int32
	Conditions                               []metav1.Condition
}

// memberReady says whether the hub considers the member healthy.
func memberReady(mc *flotillav1.MemberCluster) bool {
	return mc != nil && meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady)
}

// Cluster computes one cluster's entry.
func Cluster(v ClusterView) flotillav1.ClusterAppStatus {
	wl := workstatus.Workload(v.Work)
	st := flotillav1.ClusterAppStatus{
		Name:              v.Name,
		Assigned:          v.Assigned,
		Replicas:          wl.Replicas,
		ReadyReplicas:     wl.ReadyReplicas,
		AvailableReplicas: wl.AvailableReplicas,
		UpdatedReplicas:   wl.UpdatedReplicas,
	}
	if v.Work != nil {
		st.Endpoints, st.Dependencies = objectsOf(v.Work)
		if len(v.Work.Status.Health) > 0 {
			st.Signals = slices.Clone(v.Work.Status.Health)
		}
	}
	switch {
	case v.Evicted != nil:
		st.Phase = flotillav1.ClusterAppLost
		st.Message = fmt.Sprintf("%d replicas moved to other clusters at %s (%s); they return once the cluster stays Ready for the failback window",
			v.Evicted.Replicas, v.Evicted.EvictionTime.UTC().Format("15:04:05"), v.Evicted.Reason)
	case v.Evicting:
		st.Phase = flotillav1.ClusterAppEvicting
		st.Message = "replicas moved to other clusters; this cluster's Work is kept until they are available"
	case v.Member == nil:
		st.Phase = flotillav1.ClusterAppLost
		st.Message = "no MemberCluster of this name"
	case !memberReady(v.Member):
		st.Phase = flotillav1.ClusterAppLost
		st.Message = "cluster not Ready"
		if c := meta.FindStatusCondition(v.Member.Status.Conditions, flotillav1.ConditionReady); c != nil && c.Message != "" {
			st.Message = "cluster not Ready: " + c.Message
		}
		if idle(v, st) {
			st.Message += "; it runs none of the app's replicas, so nothing moves"
		}
	case v.Work == nil:
		st.Phase = flotillav1.ClusterAppPending
		st.Message = "Work not written yet"
	case !workstatus.Observed(v.Work):
		st.Phase = flotillav1.ClusterAppPending
		st.Message = fmt.Sprintf("waiting for the member to apply generation %d of its Work", v.Work.Generation)
	default:
		applied := workstatus.Condition(v.Work, flotillav1.ConditionApplied)
		degraded := workstatus.Condition(v.Work, flotillav1.ConditionDegraded)
		switch {
		case applied != nil && applied.Status == metav1.ConditionFalse:
			st.Phase = flotillav1.ClusterAppDegraded
			st.Message = workstatus.ConditionText(applied)
		case degraded != nil && degraded.Status == metav1.ConditionTrue:
			st.Phase = flotillav1.ClusterAppDegraded
			st.Message = workstatus.ConditionText(degraded)
		case wl.AvailableReplicas >= v.Assigned && wl.UpdatedReplicas >= v.Assigned && wl.ReadyReplicas >= v.Assigned && wl.Replicas == v.Assigned:
			st.Phase = flotillav1.ClusterAppAvailable
		default:
			st.Phase = flotillav1.ClusterAppProgressing
			st.Message = fmt.Sprintf("%d/%d replicas ready, %d updated", wl.ReadyReplicas, v.Assigned, wl.UpdatedReplicas)
		}
	}
	return st
}

// idle says a cluster runs none of the app's replicas and is asked for
// none, as far as its member last confirmed (it reported the Work's current
// generation): losing it costs nothing, so it raises no alarm. An app
// scaled to zero keeps its Works in such clusters.
func idle(v ClusterView, st flotillav1.ClusterAppStatus) bool {
	return v.Assigned == 0 && v.Work != nil && workstatus.Observed(v.Work) && st.Replicas == 0
}

// Compute aggregates the clusters into MyApp status: per-cluster
// entries, totals and the Scheduled, Applied, Available, Progressing,
// Degraded and Ready conditions, each with observedGeneration.
func Compute(in Input) Output {
	var out Output
	views := append([]ClusterView(nil), in.Clusters...)
	sort.Slice(views, func(i, j int) bool { return views[i].Name < views[j].Name })
	var t tally
	for _, v := range views {
		st := Cluster(v)
		out.Clusters = append(out.Clusters, st)
		if v.Evicting || v.Evicted != nil {
			continue
		}
		out.Used++
		out.Desired += v.Assigned
		out.Ready += st.ReadyReplicas
		out.Available += st.AvailableReplicas
		out.Updated += st.UpdatedReplicas
		t.add(v, st)
	}
	c := conditions{generation: in.Generation}
	c.scheduledAppliedAvailable(in, &out, &t)
	c.progressingDegradedReady(in, &out, &t)
	out.Conditions = c.list
	return out
}

// tally sorts the clusters in use by phase, each as "name: message", for
// the conditions' messages.
type tally struct {
	pending, notApplied, degraded, lost, unavailable, progressing []string
	// degradedReason is the reason of the first Degraded cluster whose
	// member reported Degraded; empty when none did.
	degradedReason string
}

func (t *tally) add(v ClusterView, st flotillav1.ClusterAppStatus) {
	if st.Phase == flotillav1.ClusterAppLost && idle(v, st) {
		return
	}
	entry := v.Name
	if st.Message != "" {
		entry = v.Name + ": " + st.Message
	}
	switch st.Phase {
	case flotillav1.ClusterAppLost:
		t.lost = append(t.lost, entry)
	case flotillav1.ClusterAppPending:
		t.pending = append(t.pending, entry)
	case flotillav1.ClusterAppDegraded:
		t.degraded = append(t.degraded, entry)
		if c := workstatus.Condition(v.Work, flotillav1.ConditionApplied); c != nil && c.Status == metav1.ConditionFalse {
			t.notApplied = append(t.notApplied, entry)
		}
		if c := workstatus.Condition(v.Work, flotillav1.ConditionDegraded); t.degradedReason == "" && c != nil && c.Status == metav1.ConditionTrue {
			t.degradedReason = c.Reason
		}
	case flotillav1.ClusterAppProgressing:
		t.progressing = append(t.progressing, entry)
	}
	if st.Phase != flotillav1.ClusterAppAvailable {
		t.unavailable = append(t.unavailable, entry)
	}
}

// conditions collects conditions of one generation.
type conditions struct {
	generation int64
	list       []metav1.Condition
}

func (c *conditions) set(t string, s metav1.ConditionStatus, reason, msg string) {
	c.list = append(c.list, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: truncate.String(msg, MaxMessageLength), ObservedGeneration: c.generation,
	})
}

// scheduledAppliedAvailable sets Scheduled, Applied and Available.
func (c *conditions) scheduledAppliedAvailable(in Input, out *Output, t *tally) {
	switch {
	case in.ScheduleErr != nil:
		c.set(flotillav1.ConditionScheduled, metav1.ConditionFalse, in.ScheduleReason, in.ScheduleErr.Error())
	case out.Desired == 0 && out.Used == 0:
		c.set(flotillav1.ConditionScheduled, metav1.ConditionTrue, flotillav1.ReasonScheduled, "scaled to zero: 0 replicas, on no cluster")
	case out.Desired == 0:
		c.set(flotillav1.ConditionScheduled, metav1.ConditionTrue, flotillav1.ReasonScheduled,
			fmt.Sprintf("scaled to zero: the app's Works are kept at 0 replicas in %d clusters", out.Used))
	default:
		msg := fmt.Sprintf("%d replicas placed on %d clusters", out.Desired, out.Used)
		if len(in.Warnings) > 0 {
			msg += "; " + strings.Join(in.Warnings, "; ")
		}
		c.set(flotillav1.ConditionScheduled, metav1.ConditionTrue, flotillav1.ReasonScheduled, msg)
	}

	switch {
	case len(t.notApplied) > 0:
		c.set(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonApplyFailed, strings.Join(t.notApplied, "; "))
	case len(t.pending) > 0 || len(t.lost) > 0:
		c.set(flotillav1.ConditionApplied, metav1.ConditionUnknown, flotillav1.ReasonWaitingForMember, strings.Join(append(t.pending, t.lost...), "; "))
	case out.Used == 0 && out.Desired == 0 && in.ScheduleErr == nil:
		c.set(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, "scaled to zero: nothing to apply")
	case out.Used == 0:
		c.set(flotillav1.ConditionApplied, metav1.ConditionUnknown, flotillav1.ReasonWaitingForMember, "the app is placed on no cluster")
	default:
		c.set(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, fmt.Sprintf("applied in all %d clusters", out.Used))
	}

	// Available: every cluster has its assigned replicas available.
	msg := fmt.Sprintf("%d/%d replicas available", out.Available, out.Desired)
	if len(t.unavailable) == 0 && (out.Used > 0 || out.Desired == 0) {
		c.set(flotillav1.ConditionAvailable, metav1.ConditionTrue, flotillav1.ReasonAvailable, msg)
		return
	}
	if len(t.unavailable) > 0 {
		msg += "; " + strings.Join(t.unavailable, "; ")
	}
	c.set(flotillav1.ConditionAvailable, metav1.ConditionFalse, flotillav1.ReasonUnavailable, msg)
}

// progressingDegradedReady sets Progressing, Degraded and Ready.
func (c *conditions) progressingDegradedReady(in Input, out *Output, t *tally) {
	// Progressing: a change is still on its way somewhere.
	if len(t.pending) > 0 || len(t.progressing) > 0 {
		c.set(flotillav1.ConditionProgressing, metav1.ConditionTrue, flotillav1.ReasonRollingOut, strings.Join(append(t.pending, t.progressing...), "; "))
	} else {
		c.set(flotillav1.ConditionProgressing, metav1.ConditionFalse, flotillav1.ReasonComplete, "no change is rolling out")
	}

	// Degraded: something waiting alone may not fix.
	degradedReason := flotillav1.ReasonApplyFailed
	if t.degradedReason != "" {
		degradedReason = t.degradedReason
	}
	switch {
	case in.ScheduleErr != nil:
		c.set(flotillav1.ConditionDegraded, metav1.ConditionTrue, in.ScheduleReason, in.ScheduleErr.Error())
	case len(t.degraded) > 0:
		c.set(flotillav1.ConditionDegraded, metav1.ConditionTrue, degradedReason, strings.Join(t.degraded, "; "))
	case len(t.lost) > 0:
		c.set(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonClusterLost, strings.Join(t.lost, "; "))
	default:
		c.set(flotillav1.ConditionDegraded, metav1.ConditionFalse, flotillav1.ReasonAsExpected, "")
	}

	// Ready: scheduled, applied and every replica ready and updated. Scaled
	// to zero, that is every kept cluster confirming it runs none.
	if in.ScheduleErr == nil && out.Desired == 0 && len(t.unavailable) == 0 {
		c.set(flotillav1.ConditionReady, metav1.ConditionTrue, flotillav1.ReasonScaledToZero, "0/0 replicas")
		return
	}
	if in.ScheduleErr == nil && out.Used > 0 && len(t.unavailable) == 0 {
		c.set(flotillav1.ConditionReady, metav1.ConditionTrue, flotillav1.ReasonReady, fmt.Sprintf("%d/%d replicas ready in %d clusters", out.Ready, out.Desired, out.Used))
		return
	}
	reason := flotillav1.ReasonNotReady
	switch {
	case in.ScheduleErr != nil:
		reason = in.ScheduleReason
	case len(t.degraded) > 0:
		reason = degradedReason
	case len(t.lost) > 0:
		reason = flotillav1.ReasonClusterLost
	case len(t.pending) > 0:
		reason = flotillav1.ReasonWaitingForMember
	case len(t.progressing) > 0:
		reason = flotillav1.ReasonRollingOut
	}
	c.set(flotillav1.ConditionReady, metav1.ConditionFalse, reason, fmt.Sprintf("%d/%d replicas ready", out.Ready, out.Desired))
}

// maxDependencies bounds the dependencies listed per cluster (the CRD's
// MaxItems).
const maxDependencies = 32

// objectsOf reads, from what w's member last reported, its Service's
// endpoints and the state of each dependency (a core ConfigMap, Secret or
// ServiceAccount): Applied, Pending while the member reports no Applied
// condition for it, else the reason it was not applied.
func objectsOf(w *flotillav1.Work) (*flotillav1.EndpointsStatus, []flotillav1.DependencyStatus) {
	var eps *flotillav1.EndpointsStatus
	var deps []flotillav1.DependencyStatus
	for _, m := range w.Status.Manifests {
		if m.Endpoints != nil && eps == nil {
			e := *m.Endpoints
			eps = &e
		}
		if m.Group != "" || (m.Kind != "ConfigMap" && m.Kind != "Secret" && m.Kind != "ServiceAccount") || len(deps) == maxDependencies {
			continue
		}
		d := flotillav1.DependencyStatus{Kind: m.Kind, Name: m.Name, State: "Pending"}
		if c := meta.FindStatusCondition(m.Conditions, flotillav1.ConditionApplied); c != nil {
			if c.Status == metav1.ConditionTrue {
				d.State = flotillav1.ReasonApplied
			} else {
				d.State = c.Reason
				d.Message = truncate.String(c.Message, 1024)
			}
		}
		deps = append(deps, d)
	}
	return eps, deps
}
