package apply

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestPodsDue: the pods of an unavailable Deployment are listed once its
// rollout has stalled for PodProblemsAfter, not while the Deployment
// controller records progress, and the answer says when to ask again.
func TestPodsDue(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	progressing := func(ago time.Duration) appsv1.DeploymentCondition {
		return appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated",
			LastUpdateTime: metav1.NewTime(now.Add(-ago))}
	}
	deploy := func(mut func(d *appsv1.Deployment)) *appsv1.Deployment {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)},
			Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, AvailableReplicas: 1},
		}
		mut(d)
		return d
	}
	for _, tc := range []struct {
		name    string
		d       *appsv1.Deployment
		due     bool
		recheck time.Duration
	}{
		{"available: nothing to explain", deploy(func(d *appsv1.Deployment) {
			d.Status.AvailableReplicas = 3
			d.Status.Conditions = []appsv1.DeploymentCondition{progressing(time.Hour)}
		}), false, 0},
		{"generation not observed: the pods are not the new template's yet, and the controller's status is an event", deploy(func(d *appsv1.Deployment) {
			d.Status.ObservedGeneration = 1
			d.Status.Conditions = []appsv1.DeploymentCondition{progressing(time.Hour)}
		}), false, 0},
		{"progress half a second ago: not yet, ask again when the grace ends", deploy(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{progressing(500 * time.Millisecond)}
		}), false, PodProblemsAfter - 500*time.Millisecond},
		{"the controller's clock ahead of ours counts as now", deploy(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{progressing(-time.Minute)}
		}), false, PodProblemsAfter},
		{"no progress for the grace: list, and again after as long", deploy(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{progressing(PodProblemsAfter)}
		}), true, PodProblemsAfter},
		{"stalled for a minute: list, and again in a minute", deploy(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{progressing(time.Minute)}
		}), true, time.Minute},
		{"stalled for an hour: list, and again at the most after MaxPodRecheck", deploy(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{progressing(time.Hour)}
		}), true, MaxPodRecheck},
		{"just past its progress deadline: list, and again after the grace", deploy(func(d *appsv1.Deployment) {
			d.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
				Reason: "ProgressDeadlineExceeded", LastUpdateTime: metav1.NewTime(now)}}
		}), true, PodProblemsAfter},
		{"no Progressing condition (no progress deadline): list, and again after MaxPodRecheck", deploy(func(d *appsv1.Deployment) {}), true, MaxPodRecheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due, recheck := podsDue(tc.d, now)
			if due != tc.due || recheck != tc.recheck {
				t.Errorf("podsDue = %v, %s; want %v, %s", due, recheck, tc.due, tc.recheck)
			}
		})
	}
}

// TestPodsWaitWhileTheRolloutProgresses: while the Deployment controller
// records progress, Status reads no pods (a pod already failing its pull
// is not reported yet) and asks to be computed again when the grace ends;
// once progress has stalled it lists them, reports the pod's problem, and
// asks again after as long as the rollout has stalled.
func TestPodsWaitWhileTheRolloutProgresses(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{})
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:nope", 2))
	results := f.apply(a, work)

	f.waitingPod("web-abc", "web", "web:nope", "ImagePullBackOff", "")
	setProgress := func(at time.Time) {
		t.Helper()
		d := f.getDeployment(f.ns, "web")
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, UnavailableReplicas: 2,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue,
				Reason: "ReplicaSetUpdated", LastUpdateTime: metav1.NewTime(at), LastTransitionTime: metav1.NewTime(at)}}}
		if err := f.c.Status().Update(f.ctx, d); err != nil {
			t.Fatalf("updating the Deployment's status: %v", err)
		}
	}

	// Progress recorded now (the API keeps whole seconds).
	now := time.Now()
	setProgress(now)
	st, recheck, err := a.Status(f.ctx, work, results, now)
	if err != nil {
		t.Fatalf("computing status: %v", err)
	}
	checkCondition(t, "Work while progressing", st.Conditions, v1alpha1.ConditionDegraded, want{metav1.ConditionFalse, v1alpha1.ReasonAsExpected, ""})
	checkCondition(t, "Work while progressing", st.Conditions, v1alpha1.ConditionAvailable, want{metav1.ConditionFalse, v1alpha1.ReasonUnavailable, "0 of 2"})
	if recheck <= 0 || recheck > PodProblemsAfter {
		t.Errorf("recheck while progressing = %s, want within (0, %s]", recheck, PodProblemsAfter)
	}

	// The same Deployment, its last progress older than the grace.
	setProgress(now.Add(-PodProblemsAfter - time.Second))
	st, recheck, err = a.Status(f.ctx, work, results, now)
	if err != nil {
		t.Fatalf("computing status: %v", err)
	}
	checkCondition(t, "Work stalled", st.Conditions, v1alpha1.ConditionDegraded,
		want{metav1.ConditionTrue, "ImagePullBackOff", "pod web-abc container app: ImagePullBackOff"})
	// Stalled 3 s ago, or up to a second more (whole seconds).
	if recheck < PodProblemsAfter+time.Second || recheck > PodProblemsAfter+2*time.Second {
		t.Errorf("recheck once stalled for %s = %s, want as long again", PodProblemsAfter+time.Second, recheck)
	}
}
