package apply

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

var webID = v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop", Name: "web"}

// liveDeployment is Deployment shop/web at generation 2 with 3 desired
// replicas, all rolled out and available, as the Deployment controller
// would report it; mutate changes it into the case under test.
func liveDeployment(t *testing.T, mutate func(*appsv1.Deployment)) *unstructured.Unstructured {
	t.Helper()
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 2},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 3,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
			},
		},
	}
	if mutate != nil {
		mutate(d)
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: content}
}

func rollingOut(d *appsv1.Deployment) {
	d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.ReadyReplicas, d.Status.UnavailableReplicas = 4, 1, 3, 3, 1
}

func waitingPod(name, reason, message string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
			Name:  "app",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}},
		}}},
	}
}

func appliedResult(id v1alpha1.ResourceIdentifier) Result {
	return Result{Identifier: id, Reason: v1alpha1.ReasonApplied, Message: describe(id) + " applied"}
}

// want is a condition's expected status and reason and, when set, a part
// of its message.
type want struct {
	status  metav1.ConditionStatus
	reason  string
	message string
}

func checkCondition(t *testing.T, where string, cs []metav1.Condition, typ string, w want) {
	t.Helper()
	c := meta.FindStatusCondition(cs, typ)
	if c == nil {
		t.Errorf("%s: no %s condition in %+v", where, typ, cs)
		return
	}
	if c.Status != w.status || c.Reason != w.reason || !strings.Contains(c.Message, w.message) {
		t.Errorf("%s: %s = %s/%s %q, want %s/%s containing %q", where, typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.message)
	}
}

func TestWorkStatus(t *testing.T) {
	const T, F = metav1.ConditionTrue, metav1.ConditionFalse
	notOwnedMsg := "Deployment shop/web exists and is not managed by Flotilla (it has no flotilla.dev/work label); field managers: kubectl-create; it was left unchanged"

	cases := []struct {
		name    string
		results []Result
		live    Live
		// Expected Work conditions.
		applied, available, progressing, degraded want
		// workload, when set, is the first manifest's expected numbers.
		workload *v1alpha1.WorkloadStatus
	}{
		{
			name:        "a rolled-out Deployment is Applied, Available, not Progressing, not Degraded",
			results:     []Result{appliedResult(webID)},
			live:        Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, nil)}},
			applied:     want{T, v1alpha1.ReasonApplied, "Deployment shop/web applied"},
			available:   want{T, v1alpha1.ReasonAvailable, "3 of 3 replicas available"},
			progressing: want{F, v1alpha1.ReasonComplete, "3 replicas rolled out"},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
			workload:    &v1alpha1.WorkloadStatus{ObservedGeneration: 2, Generation: 2, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 3},
		},
		{
			name:    "a generation the controller has not observed is Progressing and not yet Available",
			results: []Result{appliedResult(webID)},
			live: Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, func(d *appsv1.Deployment) {
				d.Generation = 3
			})}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, "generation 3 not yet observed"},
			progressing: want{T, v1alpha1.ReasonRollingOut, "generation 3 not yet observed by the Deployment controller (observed 2)"},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
			workload:    &v1alpha1.WorkloadStatus{ObservedGeneration: 2, Generation: 3, Replicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 3},
		},
		{
			name:        "a rollout with old replicas left is Progressing and not Available",
			results:     []Result{appliedResult(webID)},
			live:        Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, rollingOut)}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, "3 of 3 replicas available, 1 updated"},
			progressing: want{T, v1alpha1.ReasonRollingOut, "1 of 3 replicas updated, 3 available, 4 in total"},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
			workload:    &v1alpha1.WorkloadStatus{ObservedGeneration: 2, Generation: 2, Replicas: 4, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 1, UnavailableReplicas: 1},
		},
		{
			name:    "the new template at full scale with old pods still terminating is Available but still Progressing",
			results: []Result{appliedResult(webID)},
			live: Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, func(d *appsv1.Deployment) {
				d.Status.Replicas = 4
			})}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{T, v1alpha1.ReasonAvailable, "3 of 3 replicas available"},
			progressing: want{T, v1alpha1.ReasonRollingOut, "4 in total"},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
		},
		{
			name:    "a progress deadline exceeded is Degraded with the Deployment controller's reason and message",
			results: []Result{appliedResult(webID)},
			live: Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, func(d *appsv1.Deployment) {
				rollingOut(d)
				d.Status.Conditions[1] = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
					Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "web-7d4b9" has timed out progressing.`}
			})}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, ""},
			progressing: want{F, v1alpha1.ReasonProgressDeadlineExceeded, `ReplicaSet "web-7d4b9" has timed out progressing.`},
			degraded:    want{T, v1alpha1.ReasonProgressDeadlineExceeded, `Deployment shop/web: ReplicaSet "web-7d4b9" has timed out progressing.`},
		},
		{
			name:    "a ReplicaFailure is Degraded with the controller's reason and message",
			results: []Result{appliedResult(webID)},
			live: Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, func(d *appsv1.Deployment) {
				d.Status.AvailableReplicas, d.Status.ReadyReplicas, d.Status.Replicas = 1, 1, 1
				d.Status.Conditions = append(d.Status.Conditions, appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure,
					Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: `pods "web-7d4b9-x" is forbidden: exceeded quota: pods`})
			})}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, "1 of 3 replicas available"},
			progressing: want{T, v1alpha1.ReasonRollingOut, ""},
			degraded:    want{T, "FailedCreate", "exceeded quota: pods"},
		},
		{
			name:    "an image that cannot be pulled, seen in a pod of an unavailable Deployment, is Degraded ImagePullBackOff",
			results: []Result{appliedResult(webID)},
			live: Live{
				Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, rollingOut)},
				Pods: map[v1alpha1.ResourceIdentifier][]corev1.Pod{webID: {
					waitingPod("web-new-b", "ImagePullBackOff", `Back-off pulling image "web:nope"`),
					waitingPod("web-new-a", "ImagePullBackOff", `Back-off pulling image "web:nope"`),
					waitingPod("web-new-c", "ContainerCreating", ""),
				}},
			},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, ""},
			progressing: want{T, v1alpha1.ReasonRollingOut, ""},
			degraded:    want{T, "ImagePullBackOff", `Deployment shop/web: pod web-new-a container app: ImagePullBackOff: Back-off pulling image "web:nope" (2 pods affected)`},
		},
		{
			name:    "a crashing container is Degraded CrashLoopBackOff; a terminating pod's problem is not news",
			results: []Result{appliedResult(webID)},
			live: Live{
				Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, rollingOut)},
				Pods: map[v1alpha1.ResourceIdentifier][]corev1.Pod{webID: {
					func() corev1.Pod {
						p := waitingPod("web-old-a", "ImagePullBackOff", "")
						p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
						return p
					}(),
					waitingPod("web-new-z", "CrashLoopBackOff", "back-off 40s restarting failed container=app"),
				}},
			},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, ""},
			progressing: want{T, v1alpha1.ReasonRollingOut, ""},
			degraded:    want{T, "CrashLoopBackOff", "pod web-new-z container app: CrashLoopBackOff: back-off 40s"},
		},
		{
			name:    "an unschedulable pod of an unavailable Deployment is Degraded Unschedulable",
			results: []Result{appliedResult(webID)},
			live: Live{
				Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, rollingOut)},
				Pods: map[v1alpha1.ResourceIdentifier][]corev1.Pod{webID: {{
					ObjectMeta: metav1.ObjectMeta{Name: "web-new-a"},
					Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
						Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient cpu."}}},
				}}},
			},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, ""},
			progressing: want{T, v1alpha1.ReasonRollingOut, ""},
			degraded:    want{T, "Unschedulable", "pod web-new-a: Unschedulable: 0/3 nodes are available"},
		},
		{
			name:    "pod problems are ignored while the Deployment is available",
			results: []Result{appliedResult(webID)},
			live: Live{
				Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, nil)},
				Pods:    map[v1alpha1.ResourceIdentifier][]corev1.Pod{webID: {waitingPod("web-surplus", "CrashLoopBackOff", "")}},
			},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{T, v1alpha1.ReasonAvailable, ""},
			progressing: want{F, v1alpha1.ReasonComplete, ""},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
		},
		{
			name:    "a Deployment scaled to zero is Available",
			results: []Result{appliedResult(webID)},
			live: Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, func(d *appsv1.Deployment) {
				d.Spec.Replicas = ptr.To[int32](0)
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2}
			})}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{T, v1alpha1.ReasonAvailable, "0 of 0 replicas available"},
			progressing: want{F, v1alpha1.ReasonComplete, ""},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
		},
		{
			name:    "spec.replicas unset means one replica desired",
			results: []Result{appliedResult(webID)},
			live: Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, func(d *appsv1.Deployment) {
				d.Spec.Replicas = nil
				d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1}
			})}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, "0 of 1 replicas available, 1 updated"},
			progressing: want{T, v1alpha1.ReasonRollingOut, ""},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
		},
		{
			name:        "an object Flotilla does not own is Applied False NotOwned and Degraded carrying who owns it",
			results:     []Result{{Identifier: webID, Reason: v1alpha1.ReasonNotOwned, Message: notOwnedMsg}},
			applied:     want{F, v1alpha1.ReasonNotOwned, notOwnedMsg},
			available:   want{F, v1alpha1.ReasonNotOwned, notOwnedMsg},
			progressing: want{F, v1alpha1.ReasonNotOwned, ""},
			degraded:    want{T, v1alpha1.ReasonNotOwned, notOwnedMsg},
		},
		{
			name:        "a failed apply is Applied False ApplyFailed and Degraded with the apiserver's message",
			results:     []Result{{Identifier: webID, Reason: v1alpha1.ReasonApplyFailed, Message: "Deployment shop/web: spec.replicas: Invalid value: -1"}},
			applied:     want{F, v1alpha1.ReasonApplyFailed, "Invalid value: -1"},
			available:   want{F, v1alpha1.ReasonApplyFailed, ""},
			progressing: want{F, v1alpha1.ReasonApplyFailed, ""},
			degraded:    want{T, v1alpha1.ReasonApplyFailed, "Invalid value: -1"},
		},
		{
			name:        "an applied object gone from the cluster is Progressing (the next apply restores it), not Degraded",
			results:     []Result{appliedResult(webID)},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{F, v1alpha1.ReasonUnavailable, "Deployment shop/web is gone from the cluster"},
			progressing: want{T, v1alpha1.ReasonRollingOut, "gone from the cluster"},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
		},
		{
			name: "one unowned manifest among two makes the Work not Applied and Degraded, naming only that object",
			results: []Result{
				appliedResult(webID),
				{Identifier: v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop", Name: "api"},
					Reason: v1alpha1.ReasonNotOwned, Message: `Deployment shop/api exists and belongs to Work "shop.other", not "shop.web"; it was left unchanged`},
			},
			live:        Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, nil)}},
			applied:     want{F, v1alpha1.ReasonNotOwned, `Deployment shop/api exists and belongs to Work "shop.other"`},
			available:   want{F, v1alpha1.ReasonNotOwned, "shop/api"},
			progressing: want{F, v1alpha1.ReasonNotOwned, ""},
			degraded:    want{T, v1alpha1.ReasonNotOwned, "shop/api"},
		},
		{
			name:    "a kind without known readiness is Available once it exists",
			results: []Result{appliedResult(v1alpha1.ResourceIdentifier{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "cfg"})},
			live: Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{
				{Version: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "cfg"}: {Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}},
			}},
			applied:     want{T, v1alpha1.ReasonApplied, ""},
			available:   want{T, v1alpha1.ReasonAvailable, "ConfigMap shop/cfg exists"},
			progressing: want{F, v1alpha1.ReasonComplete, ""},
			degraded:    want{F, v1alpha1.ReasonAsExpected, ""},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			work := &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: "shop.web", Generation: 7}}
			st := WorkStatus(work, tc.results, tc.live, time.Unix(1000, 0))
			if st.ObservedGeneration != 7 {
				t.Errorf("observedGeneration = %d, want the Work's 7", st.ObservedGeneration)
			}
			checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionApplied, tc.applied)
			checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionAvailable, tc.available)
			checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionProgressing, tc.progressing)
			checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionDegraded, tc.degraded)
			for _, c := range st.Conditions {
				if c.ObservedGeneration != 7 {
					t.Errorf("Work condition %s has observedGeneration %d, want 7", c.Type, c.ObservedGeneration)
				}
			}
			if len(st.Manifests) != len(tc.results) {
				t.Fatalf("%d manifest statuses, want one per result (%d)", len(st.Manifests), len(tc.results))
			}
			for i, m := range st.Manifests {
				if m.ResourceIdentifier != tc.results[i].Identifier {
					t.Errorf("manifest %d is %+v, want %+v", i, m.ResourceIdentifier, tc.results[i].Identifier)
				}
				if len(m.Conditions) != 4 {
					t.Errorf("manifest %d has %d conditions, want Applied, Available, Progressing, Degraded", i, len(m.Conditions))
				}
			}
			if tc.workload != nil {
				if got := st.Manifests[0].Workload; got == nil || *got != *tc.workload {
					t.Errorf("workload = %+v, want %+v", got, tc.workload)
				}
			}
		})
	}
}

// TestWorkStatusTransitionTimes shows that a condition keeps its previous
// LastTransitionTime while its status holds, even when its reason or
// message changes, and takes now when its status flips.
func TestWorkStatusTransitionTimes(t *testing.T) {
	before, now := time.Unix(1000, 0), time.Unix(2000, 0)
	work := &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: "shop.web", Generation: 1}}
	results := []Result{appliedResult(webID)}
	ready := Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, nil)}}
	work.Status = WorkStatus(work, results, ready, before)

	rolling := Live{Objects: map[v1alpha1.ResourceIdentifier]*unstructured.Unstructured{webID: liveDeployment(t, rollingOut)}}
	st := WorkStatus(work, results, rolling, now)
	for _, tc := range []struct {
		typ  string
		want time.Time
	}{
		{v1alpha1.ConditionApplied, before},  // still True
		{v1alpha1.ConditionAvailable, now},   // True -> False
		{v1alpha1.ConditionProgressing, now}, // False -> True
		{v1alpha1.ConditionDegraded, before}, // still False
	} {
		for where, cs := range map[string][]metav1.Condition{"Work": st.Conditions, "manifest": st.Manifests[0].Conditions} {
			c := meta.FindStatusCondition(cs, tc.typ)
			if c == nil || !c.LastTransitionTime.Time.Equal(tc.want) {
				t.Errorf("%s %s: lastTransitionTime = %v, want %v", where, tc.typ, c, tc.want)
			}
		}
	}
}

// TestJoinMessagesIsBounded shows that a Work condition joins at most
// maxMessages messages, dropping duplicates, and says how many it left out.
func TestJoinMessagesIsBounded(t *testing.T) {
	var cs []metav1.Condition
	for _, m := range []string{"a", "b", "a", "c", "d", "e", "f", "g", ""} {
		cs = append(cs, metav1.Condition{Message: m})
	}
	if got, want := joinMessages(cs), "a; b; c; d; e; and 2 more"; got != want {
		t.Errorf("joinMessages = %q, want %q", got, want)
	}
}

// TestConditionMessageIsBounded shows that a long message is cut within
// maxMessageLength on a character boundary, as the API requires valid UTF-8.
func TestConditionMessageIsBounded(t *testing.T) {
	got := condition(v1alpha1.ConditionApplied, false, "Failed", strings.Repeat("é", maxMessageLength)).Message
	if len(got) > maxMessageLength || !strings.HasSuffix(got, truncate.Marker) || !utf8.ValidString(got) {
		t.Errorf("condition message has %d bytes ending %q", len(got), got[len(got)-8:])
	}
}
