package works

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
)

// TestStoreRechecksARolloutThatStalls: a rollout whose pods fail while the
// Deployment controller still records progress brings no further event,
// yet the Store wakes its reconciler when the grace ends, and the next
// report names the pods' problem. A forgotten Work's pending recheck is
// stopped.
func TestStoreRechecksARolloutThatStalls(t *testing.T) {
	f := newStoreFixture(t, "store-recheck")
	woke := make(chan string, 16)
	f.store.SetWake(func(name string) { woke <- name })
	w := f.work("web", 1, f.deployment("web", 2))
	f.apply(w)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "web-abc", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/web:1.0"}}},
	}
	if err := f.c.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}}}
	if err := f.c.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	d := f.mustGet("web")
	progressed := time.Now()
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, UnavailableReplicas: 2,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated",
			LastUpdateTime: metav1.NewTime(progressed), LastTransitionTime: metav1.NewTime(progressed)}}}
	if err := f.c.Status().Update(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	f.reconcile(w.Name)
	reports := f.reporter.of(w.Name)
	last := reports[len(reports)-1]
	if c := meta.FindStatusCondition(last.Conditions, flotillav1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("Degraded while the rollout progresses = %+v, want False (the pods are not read yet)", c)
	}

	// No event: only the Store's recheck brings the next reconcile.
	select {
	case name := <-woke:
		if name != w.Name {
			t.Fatalf("woke %q, want %q", name, w.Name)
		}
	case <-time.After(apply.PodProblemsAfter + 5*time.Second):
		t.Fatalf("the Store did not wake the reconciler within %s of a progressing rollout's report", apply.PodProblemsAfter+5*time.Second)
	}
	if waited := time.Since(progressed); waited < apply.PodProblemsAfter-time.Second {
		t.Errorf("woke %s after the progress, before the grace of %s (less the API's whole seconds)", waited, apply.PodProblemsAfter)
	}
	f.reconcile(w.Name)
	reports = f.reporter.of(w.Name)
	last = reports[len(reports)-1]
	if c := meta.FindStatusCondition(last.Conditions, flotillav1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "ErrImagePull" {
		t.Fatalf("Degraded after the grace = %+v, want True ErrImagePull", c)
	}

	// Stalled: the next recheck is as far away as the stall is old (2 to
	// 4 s here), not sooner; forgetting the Work stops it.
	f.store.mu.RLock()
	e := f.store.works[w.Name]
	f.store.mu.RUnlock()
	e.mu.Lock()
	timer, at := e.recheck, e.recheckAt
	e.mu.Unlock()
	if due := at.Sub(progressed); timer == nil || due < 2*apply.PodProblemsAfter-time.Second || due > apply.MaxPodRecheck {
		t.Fatalf("the recheck of a rollout stalled since %s is due %s after it, want about twice the stall", progressed.Format(time.RFC3339Nano), due)
	}
	f.store.forget(w.Name)
	if timer.Stop() {
		t.Errorf("forgetting the Work left its recheck timer running")
	}
}
