package apply

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// Live is the state of a Work's applied objects as read from the cluster,
// the input WorkStatus computes from. Applier.ReadLive fills it.
type Live struct {
	// Objects holds each applied object as it is now, keyed by the
	// Identifier of its Result. An applied object missing from it is gone
	// from the cluster.
	Objects map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured
	// Pods holds, for a Deployment that is not available, the pods its
	// selector matches; WorkStatus looks in them for the reason (an image
	// that cannot be pulled, a container that keeps crashing). Missing
	// entries mean the pods were not looked at.
	Pods map[v1alpha1.ResourceIdentifier][]corev1.Pod
	// Endpoints holds, for each Service, the count of its endpoints.
	Endpoints map[v1alpha1.ResourceIdentifier]*v1alpha1.EndpointsStatus
	// Recheck, when not zero, is how soon the live state is worth reading
	// again although no object changes: the soonest a Deployment's pods
	// are due (see podsDue).
	Recheck time.Duration
}

// WorkStatus computes work's status from the results of its last Apply and
// the live state of what was applied. It is pure: now only stamps the
// LastTransitionTime of conditions whose status changed from those in
// work.Status (previous conditions keep theirs, so a caller that holds the
// last status keeps transitions stable). LastReportTime is left for the
// reporter to set.
//
// Each manifest gets Applied, Available, Progressing and Degraded
// conditions and, for a Deployment, its status numbers. The Work's
// conditions summarise them: Applied and Available are True when they are
// True for every manifest, Progressing and Degraded when they are True for
// any; the reason is the first manifest's that decided it and the message
// joins the manifests' messages, each naming its object. Every condition's
// ObservedGeneration is work.Generation.
func WorkStatus(work *v1alpha1.Work, results []Result, live Live, now time.Time) v1alpha1.WorkStatus {
	stamp := metav1.NewTime(now)
	status := v1alpha1.WorkStatus{ObservedGeneration: work.Generation}
	states := make([]objectState, 0, len(results))
	for _, r := range results {
		st := manifestState(r, live.Objects[r.Identifier], live.Pods[r.Identifier])
		states = append(states, st)
		var prev []metav1.Condition
		for _, p := range work.Status.Manifests {
			if p.ResourceIdentifier == r.Identifier {
				prev = p.Conditions
			}
		}
		status.Manifests = append(status.Manifests, v1alpha1.ManifestStatus{
			ResourceIdentifier: r.Identifier,
			Conditions:         finish(st.conditions(), prev, work.Generation, stamp),
			Workload:           st.workload,
			Endpoints:          live.Endpoints[r.Identifier],
		})
	}
	status.Conditions = finish(summarise(states), work.Status.Conditions, work.Generation, stamp)
	return status
}

// objectState is one manifest's conditions before generations and
// transition times are filled in.
type objectState struct {
	applied, available, progressing, degraded metav1.Condition
	workload                                  *v1alpha1.WorkloadStatus
}

func (s objectState) conditions() []metav1.Condition {
	return []metav1.Condition{s.applied, s.available, s.progressing, s.degraded}
}

func condition(typ string, status bool, reason, message string) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: reason, Message: truncate.String(message, maxMessageLength)}
	if status {
		c.Status = metav1.ConditionTrue
	}
	return c
}

// manifestState computes the conditions of one manifest from its apply
// result, its live object (nil when gone) and, for a Deployment, its pods.
func manifestState(r Result, obj *unstructured.Unstructured, pods []corev1.Pod) objectState {
	if !r.Applied() {
		// Everything about an object that was not applied is the apply's
		// failure: the object Flotilla wants does not run.
		return objectState{
			applied:     condition(v1alpha1.ConditionApplied, false, r.Reason, r.Message),
			available:   condition(v1alpha1.ConditionAvailable, false, r.Reason, r.Message),
			progressing: condition(v1alpha1.ConditionProgressing, false, r.Reason, r.Message),
			degraded:    condition(v1alpha1.ConditionDegraded, true, r.Reason, r.Message),
		}
	}
	applied := condition(v1alpha1.ConditionApplied, true, v1alpha1.ReasonApplied, r.Message)
	if obj == nil {
		// Deleted behind Flotilla's back; NeedsApply reports it and the
		// next Apply creates it again, so it is progress, not damage.
		msg := describe(r.Identifier) + " is gone from the cluster; the next apply creates it again"
		return objectState{
			applied:     applied,
			available:   condition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonUnavailable, msg),
			progressing: condition(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonRollingOut, msg),
			degraded:    condition(v1alpha1.ConditionDegraded, false, v1alpha1.ReasonAsExpected, ""),
		}
	}
	if obj.GroupVersionKind().GroupKind() == DeploymentKind.GroupKind() {
		return deploymentState(r.Identifier, applied, obj, pods)
	}
	// Flotilla knows no readiness for other kinds: existing is all they do.
	return objectState{
		applied:     applied,
		available:   condition(v1alpha1.ConditionAvailable, true, v1alpha1.ReasonAvailable, describe(r.Identifier)+" exists"),
		progressing: condition(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonComplete, ""),
		degraded:    condition(v1alpha1.ConditionDegraded, false, v1alpha1.ReasonAsExpected, ""),
	}
}

// deploymentHealth is what WorkStatus and ReadLive need to know about a
// Deployment.
type deploymentHealth struct {
	desired int32
	// observed: the Deployment controller has seen the current spec, so the
	// status numbers describe it.
	observed bool
	// available: observed, at least the desired replicas available, and
	// the current template runs at full scale.
	available bool
	// complete: observed and exactly the desired replicas, all updated and
	// available; nothing of an older template is left.
	complete bool
	// deadline is the Progressing condition when the controller gave up
	// waiting for progress (reason ProgressDeadlineExceeded).
	deadline *appsv1.DeploymentCondition
	// failure is a True ReplicaFailure condition: the controller cannot
	// create or delete pods (quota, admission).
	failure *appsv1.DeploymentCondition
}

func evaluateDeployment(d *appsv1.Deployment) deploymentHealth {
	h := deploymentHealth{desired: 1}
	if d.Spec.Replicas != nil {
		h.desired = *d.Spec.Replicas
	}
	s := d.Status
	h.observed = s.ObservedGeneration >= d.Generation
	h.available = h.observed && s.AvailableReplicas >= h.desired && s.UpdatedReplicas >= h.desired
	h.complete = h.observed && s.UpdatedReplicas == h.desired && s.Replicas == h.desired && s.AvailableReplicas >= h.desired
	for i := range s.Conditions {
		c := &s.Conditions[i]
		switch {
		case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == v1alpha1.ReasonProgressDeadlineExceeded:
			h.deadline = c
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
			h.failure = c
		}
	}
	return h
}

func deploymentState(id v1alpha1.ResourceIdentifier, applied metav1.Condition, obj *unstructured.Unstructured, pods []corev1.Pod) objectState {
	name := describe(id)
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
		msg := fmt.Sprintf("%s: reading its status: %v", name, err)
		return objectState{
			applied:     applied,
			available:   condition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonUnavailable, msg),
			progressing: condition(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonUnavailable, msg),
			degraded:    condition(v1alpha1.ConditionDegraded, true, v1alpha1.ReasonUnavailable, msg),
		}
	}
	h := evaluateDeployment(&d)
	s := d.Status
	st := objectState{
		applied: applied,
		workload: &v1alpha1.WorkloadStatus{
			ObservedGeneration:  s.ObservedGeneration,
			Generation:          d.Generation,
			Replicas:            s.Replicas,
			ReadyReplicas:       s.ReadyReplicas,
			AvailableReplicas:   s.AvailableReplicas,
			UpdatedReplicas:     s.UpdatedReplicas,
			UnavailableReplicas: s.UnavailableReplicas,
		},
	}
	notObserved := fmt.Sprintf("%s: generation %d not yet observed by the Deployment controller (observed %d)", name, d.Generation, s.ObservedGeneration)

	switch {
	case h.available:
		st.available = condition(v1alpha1.ConditionAvailable, true, v1alpha1.ReasonAvailable,
			fmt.Sprintf("%s: %d of %d replicas available", name, s.AvailableReplicas, h.desired))
	case !h.observed:
		st.available = condition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonUnavailable, notObserved)
	default:
		st.available = condition(v1alpha1.ConditionAvailable, false, v1alpha1.ReasonUnavailable,
			fmt.Sprintf("%s: %d of %d replicas available, %d updated", name, s.AvailableReplicas, h.desired, s.UpdatedReplicas))
	}

	switch {
	case h.deadline != nil:
		st.progressing = condition(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonProgressDeadlineExceeded, name+": "+h.deadline.Message)
	case !h.observed:
		st.progressing = condition(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonRollingOut, notObserved)
	case h.complete:
		st.progressing = condition(v1alpha1.ConditionProgressing, false, v1alpha1.ReasonComplete,
			fmt.Sprintf("%s: %d replicas rolled out", name, h.desired))
	default:
		st.progressing = condition(v1alpha1.ConditionProgressing, true, v1alpha1.ReasonRollingOut,
			fmt.Sprintf("%s: rolling out: %d of %d replicas updated, %d available, %d in total", name, s.UpdatedReplicas, h.desired, s.AvailableReplicas, s.Replicas))
	}

	// Degraded names the most specific cause first: the controller failing
	// to create pods, then what the pods say, then the deadline, which is
	// only the controller's summary of the other two.
	var reasons, messages []string
	if h.failure != nil {
		reasons = append(reasons, nonEmpty(h.failure.Reason, string(appsv1.DeploymentReplicaFailure)))
		messages = append(messages, name+": "+h.failure.Message)
	}
	if !h.available {
		if reason, msg := podProblem(pods); reason != "" {
			reasons = append(reasons, reason)
			messages = append(messages, name+": "+msg)
		}
	}
	if h.deadline != nil {
		reasons = append(reasons, v1alpha1.ReasonProgressDeadlineExceeded)
		messages = append(messages, name+": "+h.deadline.Message)
	}
	if len(reasons) > 0 {
		st.degraded = condition(v1alpha1.ConditionDegraded, true, reasons[0], strings.Join(messages, "; "))
	} else {
		st.degraded = condition(v1alpha1.ConditionDegraded, false, v1alpha1.ReasonAsExpected, "")
	}
	return st
}

// podWaitingProblems are container waiting reasons that waiting alone will
// not fix; ContainerCreating and PodInitializing are left out because they
// are how every pod starts.
var podWaitingProblems = sets.New(
	"ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName",
	"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
	"RunContainerError", "PreStartHookError", "PostStartHookError",
)

// podProblem returns the reason and message of the first pod (by name) that
// shows a problem, saying how many pods share one; "" when none does.
// Terminating pods are skipped: an old pod going away is no news.
func podProblem(pods []corev1.Pod) (reason, message string) {
	sorted := slices.Clone(pods)
	slices.SortFunc(sorted, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	affected := 0
	for i := range sorted {
		if sorted[i].DeletionTimestamp != nil {
			continue
		}
		r, m := problemOf(&sorted[i])
		if r == "" {
			continue
		}
		affected++
		if reason == "" {
			reason, message = r, m
		}
	}
	if affected > 1 {
		message += fmt.Sprintf(" (%d pods affected)", affected)
	}
	return reason, message
}

func problemOf(pod *corev1.Pod) (reason, message string) {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && podWaitingProblems.Has(w.Reason) {
				msg := fmt.Sprintf("pod %s container %s: %s", pod.Name, cs.Name, w.Reason)
				if w.Message != "" {
					msg += ": " + w.Message
				}
				return w.Reason, msg
			}
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			msg := fmt.Sprintf("pod %s: %s", pod.Name, c.Reason)
			if c.Message != "" {
				msg += ": " + c.Message
			}
			return c.Reason, msg
		}
	}
	return "", ""
}

// summarise computes the Work's conditions from its manifests'.
func summarise(states []objectState) []metav1.Condition {
	pick := func(f func(objectState) metav1.Condition) []metav1.Condition {
		out := make([]metav1.Condition, len(states))
		for i, s := range states {
			out[i] = f(s)
		}
		return out
	}
	return []metav1.Condition{
		all(v1alpha1.ConditionApplied, v1alpha1.ReasonApplied, pick(func(s objectState) metav1.Condition { return s.applied })),
		all(v1alpha1.ConditionAvailable, v1alpha1.ReasonAvailable, pick(func(s objectState) metav1.Condition { return s.available })),
		anyTrue(v1alpha1.ConditionProgressing, v1alpha1.ReasonComplete, pick(func(s objectState) metav1.Condition { return s.progressing })),
		anyTrue(v1alpha1.ConditionDegraded, v1alpha1.ReasonAsExpected, pick(func(s objectState) metav1.Condition { return s.degraded })),
	}
}

// all is True when every condition in cs is; otherwise False with the
// first False one's reason and the messages of those not True.
func all(typ, trueReason string, cs []metav1.Condition) metav1.Condition {
	var failing []metav1.Condition
	for _, c := range cs {
		if c.Status != metav1.ConditionTrue {
			failing = append(failing, c)
		}
	}
	if len(cs) > 0 && len(failing) == 0 {
		return condition(typ, true, trueReason, joinMessages(cs))
	}
	if len(failing) == 0 {
		return condition(typ, false, v1alpha1.ReasonWaitingForMember, "no manifests were applied")
	}
	return condition(typ, false, failing[0].Reason, joinMessages(failing))
}

// anyTrue is True when any condition in cs is, with the first True one's
// reason and the messages of the True ones; otherwise False with the first
// reason that is not the quiet one (say ProgressDeadlineExceeded rather
// than Complete), or the quiet one.
func anyTrue(typ, quietReason string, cs []metav1.Condition) metav1.Condition {
	var hot, loud []metav1.Condition
	for _, c := range cs {
		switch {
		case c.Status == metav1.ConditionTrue:
			hot = append(hot, c)
		case c.Reason != quietReason:
			loud = append(loud, c)
		}
	}
	switch {
	case len(hot) > 0:
		return condition(typ, true, hot[0].Reason, joinMessages(hot))
	case len(loud) > 0:
		return condition(typ, false, loud[0].Reason, joinMessages(loud))
	default:
		return condition(typ, false, quietReason, joinMessages(cs))
	}
}

// maxMessages bounds how many manifests' messages a Work condition joins:
// the condition stays readable, and far below the API's 32768 characters.
const maxMessages = 5

func joinMessages(cs []metav1.Condition) string {
	var msgs []string
	for _, c := range cs {
		if c.Message != "" && !slices.Contains(msgs, c.Message) {
			msgs = append(msgs, c.Message)
		}
	}
	if len(msgs) > maxMessages {
		more := len(msgs) - maxMessages
		msgs = append(msgs[:maxMessages], fmt.Sprintf("and %d more", more))
	}
	return strings.Join(msgs, "; ")
}

// maxMessageLength bounds one condition's message; kubelet and apiserver
// messages can be long, and a Work holds up to 32 manifests' conditions.
const maxMessageLength = 1024

// finish sets each condition's ObservedGeneration and LastTransitionTime:
// a condition keeps the previous transition time while its status holds.
func finish(cs, prev []metav1.Condition, generation int64, now metav1.Time) []metav1.Condition {
	for i := range cs {
		cs[i].ObservedGeneration = generation
		cs[i].LastTransitionTime = now
		if p := meta.FindStatusCondition(prev, cs[i].Type); p != nil && p.Status == cs[i].Status && !p.LastTransitionTime.IsZero() {
			cs[i].LastTransitionTime = p.LastTransitionTime
		}
	}
	return cs
}

func nonEmpty(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
