package myapp

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// clusterView is what the status computation knows of one cluster the app
// is placed on or is leaving.
type clusterView struct {
	name string
	// assigned is the replica count the cluster's Work asks for.
	assigned int32
	// work is the Work as the hub's cache has it; nil when not written yet.
	work *flotillav1.Work
	// member is the MemberCluster; nil when the hub does not know it.
	member *flotillav1.MemberCluster
	// evicting marks a cluster replicas were moved away from whose Work is
	// kept until the replacements are available.
	evicting bool
	// evicted is set for a cluster replicas were moved away from and whose
	// Work is gone: it is listed, as lost, until its replicas fail back.
	evicted *flotillav1.EvictedCluster
}

// statusInput is everything computeStatus reads.
type statusInput struct {
	generation int64
	clusters   []clusterView
	// scheduleErr is the scheduler's error, nil when it placed every replica.
	scheduleErr error
	// scheduleReason is the condition reason for scheduleErr.
	scheduleReason string
	// warnings are the scheduler's remarks, added to Scheduled's message.
	warnings []string
}

// statusOutput is the computed part of MyApp.status.
type statusOutput struct {
	clusters                                 []flotillav1.ClusterAppStatus
	desired, ready, available, updated, used int32
	conditions                               []metav1.Condition
}

// workCondition returns the Work's condition of type t when the agent has
// reported on the Work's current generation.
func workCondition(w *flotillav1.Work, t string) *metav1.Condition {
	if w == nil {
		return nil
	}
	return meta.FindStatusCondition(w.Status.Conditions, t)
}

// reported says whether the member reported on the Work's current spec.
func reported(w *flotillav1.Work) bool {
	return w != nil && w.Status.ObservedGeneration == w.Generation && w.Generation != 0
}

// workload sums the workload numbers of a Work's manifests.
func workload(w *flotillav1.Work) flotillav1.WorkloadStatus {
	var out flotillav1.WorkloadStatus
	if w == nil {
		return out
	}
	for _, m := range w.Status.Manifests {
		if m.Workload == nil {
			continue
		}
		out.Replicas += m.Workload.Replicas
		out.ReadyReplicas += m.Workload.ReadyReplicas
		out.AvailableReplicas += m.Workload.AvailableReplicas
		out.UpdatedReplicas += m.Workload.UpdatedReplicas
		out.UnavailableReplicas += m.Workload.UnavailableReplicas
	}
	return out
}

// memberReady says whether the hub considers the member healthy.
func memberReady(mc *flotillav1.MemberCluster) bool {
	return mc != nil && meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady)
}

// clusterStatus computes one cluster's entry.
func clusterStatus(v clusterView) flotillav1.ClusterAppStatus {
	wl := workload(v.work)
	st := flotillav1.ClusterAppStatus{
		Name:              v.name,
		Assigned:          v.assigned,
		Replicas:          wl.Replicas,
		ReadyReplicas:     wl.ReadyReplicas,
		AvailableReplicas: wl.AvailableReplicas,
		UpdatedReplicas:   wl.UpdatedReplicas,
	}
	switch {
	case v.evicted != nil:
		st.Phase = flotillav1.ClusterAppLost
		st.Message = fmt.Sprintf("%d replicas moved to other clusters at %s (%s); they return once the cluster stays Ready for the failback window",
			v.evicted.Replicas, v.evicted.EvictionTime.UTC().Format("15:04:05"), v.evicted.Reason)
	case v.evicting:
		st.Phase = flotillav1.ClusterAppEvicting
		st.Message = "replicas moved to other clusters; this cluster's Work is kept until they are available"
	case v.member == nil:
		st.Phase = flotillav1.ClusterAppLost
		st.Message = "no MemberCluster of this name"
	case !memberReady(v.member):
		st.Phase = flotillav1.ClusterAppLost
		st.Message = "cluster not Ready"
		if c := meta.FindStatusCondition(v.member.Status.Conditions, flotillav1.ConditionReady); c != nil && c.Message != "" {
			st.Message = "cluster not Ready: " + c.Message
		}
	case v.work == nil:
		st.Phase = flotillav1.ClusterAppPending
		st.Message = "Work not written yet"
	case !reported(v.work):
		st.Phase = flotillav1.ClusterAppPending
		st.Message = fmt.Sprintf("waiting for the member to apply generation %d of its Work", v.work.Generation)
	default:
		applied := workCondition(v.work, flotillav1.ConditionApplied)
		degraded := workCondition(v.work, flotillav1.ConditionDegraded)
		switch {
		case applied != nil && applied.Status == metav1.ConditionFalse:
			st.Phase = flotillav1.ClusterAppDegraded
			st.Message = conditionText(applied)
		case degraded != nil && degraded.Status == metav1.ConditionTrue:
			st.Phase = flotillav1.ClusterAppDegraded
			st.Message = conditionText(degraded)
		case wl.AvailableReplicas >= v.assigned && wl.UpdatedReplicas >= v.assigned && wl.ReadyReplicas >= v.assigned && wl.Replicas == v.assigned:
			st.Phase = flotillav1.ClusterAppAvailable
		default:
			st.Phase = flotillav1.ClusterAppProgressing
			st.Message = fmt.Sprintf("%d/%d replicas ready, %d updated", wl.ReadyReplicas, v.assigned, wl.UpdatedReplicas)
		}
	}
	return st
}

func conditionText(c *metav1.Condition) string {
	if c.Message == "" {
		return c.Reason
	}
	return c.Reason + ": " + c.Message
}

// computeStatus aggregates the clusters into MyApp status: per-cluster
// entries, totals and the Scheduled, Applied, Available, Progressing,
// Degraded and Ready conditions, each with observedGeneration.
func computeStatus(in statusInput) statusOutput {
	var out statusOutput
	views := append([]clusterView(nil), in.clusters...)
	sort.Slice(views, func(i, j int) bool { return views[i].name < views[j].name })

	var pending, notApplied, degraded, lost, unavailable, progressing []string
	for _, v := range views {
		st := clusterStatus(v)
		out.clusters = append(out.clusters, st)
		if v.evicting || v.evicted != nil {
			continue
		}
		out.used++
		out.desired += v.assigned
		out.ready += st.ReadyReplicas
		out.available += st.AvailableReplicas
		out.updated += st.UpdatedReplicas
		entry := v.name
		if st.Message != "" {
			entry = v.name + ": " + st.Message
		}
		switch st.Phase {
		case flotillav1.ClusterAppLost:
			lost = append(lost, entry)
		case flotillav1.ClusterAppPending:
			pending = append(pending, entry)
		case flotillav1.ClusterAppDegraded:
			degraded = append(degraded, entry)
			if c := workCondition(v.work, flotillav1.ConditionApplied); c != nil && c.Status == metav1.ConditionFalse {
				notApplied = append(notApplied, entry)
			}
		case flotillav1.ClusterAppProgressing:
			progressing = append(progressing, entry)
		}
		if st.Phase != flotillav1.ClusterAppAvailable {
			unavailable = append(unavailable, entry)
		}
	}

	cond := func(t string, s metav1.ConditionStatus, reason, msg string) {
		out.conditions = append(out.conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: truncate(msg), ObservedGeneration: in.generation,
		})
	}

	// Scheduled.
	if in.scheduleErr != nil {
		cond(flotillav1.ConditionScheduled, metav1.ConditionFalse, in.scheduleReason, in.scheduleErr.Error())
	} else {
		msg := fmt.Sprintf("%d replicas placed on %d clusters", out.desired, out.used)
		if len(in.warnings) > 0 {
			msg += "; " + strings.Join(in.warnings, "; ")
		}
		cond(flotillav1.ConditionScheduled, metav1.ConditionTrue, flotillav1.ReasonScheduled, msg)
	}

	// Applied.
	switch {
	case len(notApplied) > 0:
		cond(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonApplyFailed, strings.Join(notApplied, "; "))
	case len(pending) > 0 || len(lost) > 0:
		cond(flotillav1.ConditionApplied, metav1.ConditionUnknown, flotillav1.ReasonWaitingForMember, strings.Join(append(pending, lost...), "; "))
	case out.used == 0:
		cond(flotillav1.ConditionApplied, metav1.ConditionUnknown, flotillav1.ReasonWaitingForMember, "the app is placed on no cluster")
	default:
		cond(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, fmt.Sprintf("applied in all %d clusters", out.used))
	}

	// Available: every cluster has its assigned replicas available.
	if len(unavailable) == 0 && out.used > 0 {
		cond(flotillav1.ConditionAvailable, metav1.ConditionTrue, flotillav1.ReasonAvailable, fmt.Sprintf("%d/%d replicas available", out.available, out.desired))
	} else {
		msg := fmt.Sprintf("%d/%d replicas available", out.available, out.desired)
		if len(unavailable) > 0 {
			msg += "; " + strings.Join(unavailable, "; ")
		}
		cond(flotillav1.ConditionAvailable, metav1.ConditionFalse, flotillav1.ReasonUnavailable, msg)
	}

	// Progressing: a change is still on its way somewhere.
	if len(pending) > 0 || len(progressing) > 0 {
		cond(flotillav1.ConditionProgressing, metav1.ConditionTrue, flotillav1.ReasonRollingOut, strings.Join(append(pending, progressing...), "; "))
	} else {
		cond(flotillav1.ConditionProgressing, metav1.ConditionFalse, flotillav1.ReasonComplete, "no change is rolling out")
	}

	// Degraded: something waiting alone may not fix.
	switch {
	case in.scheduleErr != nil:
		cond(flotillav1.ConditionDegraded, metav1.ConditionTrue, in.scheduleReason, in.scheduleErr.Error())
	case len(degraded) > 0:
		reason := flotillav1.ReasonApplyFailed
		for _, v := range views {
			if c := workCondition(v.work, flotillav1.ConditionDegraded); clusterStatus(v).Phase == flotillav1.ClusterAppDegraded && c != nil && c.Status == metav1.ConditionTrue {
				reason = c.Reason
				break
			}
		}
		cond(flotillav1.ConditionDegraded, metav1.ConditionTrue, reason, strings.Join(degraded, "; "))
	case len(lost) > 0:
		cond(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonClusterLost, strings.Join(lost, "; "))
	default:
		cond(flotillav1.ConditionDegraded, metav1.ConditionFalse, flotillav1.ReasonAsExpected, "")
	}

	// Ready: scheduled, applied and every replica ready and updated.
	if in.scheduleErr == nil && out.used > 0 && len(unavailable) == 0 {
		cond(flotillav1.ConditionReady, metav1.ConditionTrue, flotillav1.ReasonReady, fmt.Sprintf("%d/%d replicas ready in %d clusters", out.ready, out.desired, out.used))
	} else {
		reason := flotillav1.ReasonNotReady
		msg := fmt.Sprintf("%d/%d replicas ready", out.ready, out.desired)
		switch {
		case in.scheduleErr != nil:
			reason = in.scheduleReason
		case len(degraded) > 0:
			reason = flotillav1.ReasonApplyFailed
			if c := meta.FindStatusCondition(out.conditions, flotillav1.ConditionDegraded); c != nil {
				reason = c.Reason
			}
		case len(lost) > 0:
			reason = flotillav1.ReasonClusterLost
		case len(pending) > 0:
			reason = flotillav1.ReasonWaitingForMember
		case len(progressing) > 0:
			reason = flotillav1.ReasonRollingOut
		}
		cond(flotillav1.ConditionReady, metav1.ConditionFalse, reason, msg)
	}
	return out
}

// truncate keeps a condition message within the API's 32768 bytes.
func truncate(s string) string {
	const max = 32000
	if len(s) <= max {
		return s
	}
	return s[:max] + " ..."
}
