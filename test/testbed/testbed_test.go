package testbed_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

func requireBinaries(t *testing.T) string {
	t.Helper()
	bin := testbed.DefaultBinDir()
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("testbed binary %s missing in %s: run `make testbed-bin` (%v)", b, bin, err)
		}
	}
	return bin
}

// TestMemberRunsDeploymentAndSurvivesRestart is the testbed's acceptance
// test: a hub and two members start; a 3-replica Deployment in a member
// becomes ready through kube-controller-manager, kube-scheduler and kwok;
// the member is stopped and started again and the Deployment is still there
// (its data persisted) and ready again; everything stops.
func TestMemberRunsDeploymentAndSurvivesRestart(t *testing.T) {
	bin := requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	start := time.Now()
	tb, err := testbed.Start(ctx, testbed.Config{
		Dir:     t.TempDir(),
		BinDir:  bin,
		Hub:     &testbed.ClusterSpec{Name: "hub"},
		Members: testbed.DefaultMembers(2),
	})
	if err != nil {
		t.Fatalf("starting the testbed: %v", err)
	}
	t.Logf("hub + 2 members ready in %s", time.Since(start).Round(time.Millisecond))
	var pids []int
	for _, c := range tb.Clusters() {
		for _, pid := range c.PIDs() {
			pids = append(pids, pid)
		}
	}
	t.Cleanup(func() {
		if err := tb.Stop(); err != nil {
			t.Errorf("stopping the testbed: %v", err)
		}
		for _, pid := range pids {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				t.Errorf("process %d still exists after Stop", pid)
			}
		}
	})

	member := tb.Members[0]
	cfg, err := member.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}}},
			},
		},
	}
	created, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the Deployment: %v", err)
	}
	readyReplicas := func() error {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 3 {
			return fmt.Errorf("readyReplicas=%d, want 3", d.Status.ReadyReplicas)
		}
		return nil
	}
	testutil.Eventually(t, "Deployment web in "+member.Spec.Name+" reaching 3 ready replicas", 60*time.Second, readyReplicas)

	if err := member.Stop(); err != nil {
		t.Fatalf("stopping %s: %v", member.Spec.Name, err)
	}
	if member.Running() {
		t.Fatalf("%s still reports running after Stop", member.Spec.Name)
	}
	if _, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Fatalf("the apiserver of stopped %s still answers", member.Spec.Name)
	}
	if err := member.Start(ctx); err != nil {
		t.Fatalf("restarting %s: %v", member.Spec.Name, err)
	}
	got, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Deployment is gone after the restart: %v", err)
	}
	if got.UID != created.UID {
		t.Fatalf("the Deployment was recreated across the restart: uid %s, was %s", got.UID, created.UID)
	}
	testutil.Eventually(t, "Deployment web ready again after the restart", 60*time.Second, readyReplicas)
}

// TestFailImageNeverBecomesReady: the testbed's kwok stages leave pods
// whose image contains flotilla-fail not Ready, while a pod of a normal
// image beside them becomes Ready, so a rollout of such an image fails the
// way a broken image would.
func TestFailImageNeverBecomesReady(t *testing.T) {
	bin := requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tb, err := testbed.Start(ctx, testbed.Config{Dir: t.TempDir(), BinDir: bin, Members: testbed.DefaultMembers(1)})
	if err != nil {
		t.Fatalf("starting the testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := tb.Stop(); err != nil {
			t.Errorf("stopping the testbed: %v", err)
		}
	})
	cfg, err := tb.Members[0].RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	deploy := func(name, image string) {
		t.Helper()
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Deployment %s: %v", name, err)
		}
	}
	deploy("good", "nginx:1.27")
	deploy("bad", "nginx:flotilla-fail")
	podReady := func(app string) (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil || len(pods.Items) == 0 {
			return false, fmt.Errorf("pods of %s: %d (%v)", app, len(pods.Items), err)
		}
		for _, c := range pods.Items[0].Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		if pods.Items[0].Spec.NodeName == "" {
			return false, fmt.Errorf("pod of %s not scheduled yet", app)
		}
		return false, nil
	}
	testutil.Eventually(t, "the nginx:1.27 pod Ready", 60*time.Second, func() error {
		ok, err := podReady("good")
		if err == nil && !ok {
			err = fmt.Errorf("not Ready")
		}
		return err
	})
	// The good pod is Ready, so kwok has been through its stages; the bad
	// pod, scheduled as well, must stay not Ready.
	testutil.Eventually(t, "the nginx:flotilla-fail pod scheduled", 30*time.Second, func() error {
		_, err := podReady("bad")
		return err
	})
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if ok, err := podReady("bad"); err != nil || ok {
			t.Fatalf("the nginx:flotilla-fail pod: ready=%v err=%v", ok, err)
		}
	}
}

// TestCrashLoopImageCrashLoops: the testbed's kwok stages run a pod whose
// image contains flotilla-crashloop but never make it Ready: its container
// waits in CrashLoopBackOff, with a terminated last state and a restart
// count that keeps rising, as a crashing container's would. Beside it, a
// pod of a normal image becomes Ready and one of a flotilla-fail image
// stays Pending with no container status at all: the crash-loop stage
// changes neither.
func TestCrashLoopImageCrashLoops(t *testing.T) {
	bin := requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tb, err := testbed.Start(ctx, testbed.Config{Dir: t.TempDir(), BinDir: bin, Members: testbed.DefaultMembers(1)})
	if err != nil {
		t.Fatalf("starting the testbed: %v", err)
	}
	t.Cleanup(func() {
		if err := tb.Stop(); err != nil {
			t.Errorf("stopping the testbed: %v", err)
		}
	})
	cfg, err := tb.Members[0].RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	for name, image := range map[string]string{"good": "nginx:1.27", "bad": "nginx:flotilla-fail", "crash": "registry.example.com/team/web:flotilla-crashloop"} {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
				},
			},
		}
		if _, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Deployment %s: %v", name, err)
		}
	}
	pod := func(app string) (*corev1.Pod, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil || len(pods.Items) != 1 {
			return nil, fmt.Errorf("pods of %s: %d (%v)", app, len(pods.Items), err)
		}
		return &pods.Items[0], nil
	}
	ready := func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	// crashState says how the crash-looping pod is not as wanted ("" when
	// it is), and returns its restart count.
	crashState := func() (int32, error) {
		p, err := pod("crash")
		if err != nil {
			return 0, err
		}
		if ready(p) {
			return 0, fmt.Errorf("pod %s is Ready", p.Name)
		}
		if len(p.Status.ContainerStatuses) != 1 {
			return 0, fmt.Errorf("pod %s (phase %s) has %d container statuses, want 1", p.Name, p.Status.Phase, len(p.Status.ContainerStatuses))
		}
		cs := p.Status.ContainerStatuses[0]
		switch {
		case cs.Ready:
			return 0, fmt.Errorf("container %s is ready", cs.Name)
		case cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff":
			return 0, fmt.Errorf("container %s state %+v, want waiting in CrashLoopBackOff", cs.Name, cs.State)
		case cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1:
			return 0, fmt.Errorf("container %s last state %+v, want terminated with exit code 1", cs.Name, cs.LastTerminationState)
		case p.Status.Phase != corev1.PodRunning:
			return 0, fmt.Errorf("pod %s phase %s, want Running", p.Name, p.Status.Phase)
		}
		return cs.RestartCount, nil
	}
	testutil.Eventually(t, "the nginx:1.27 pod Ready", 60*time.Second, func() error {
		p, err := pod("good")
		if err == nil && !ready(p) {
			err = fmt.Errorf("pod %s not Ready", p.Name)
		}
		return err
	})
	testutil.Eventually(t, "the flotilla-crashloop pod Running, not Ready, its container waiting in CrashLoopBackOff", 60*time.Second, func() error {
		_, err := crashState()
		return err
	})
	first, _ := crashState()
	var last int32
	testutil.Eventually(t, fmt.Sprintf("the flotilla-crashloop container's restartCount rising by 3 from %d, the pod never Ready", first), 60*time.Second, func() error {
		n, err := crashState()
		if err != nil {
			t.Fatalf("the flotilla-crashloop pod left its crash loop: %v", err)
		}
		if n < last {
			t.Fatalf("restartCount went down from %d to %d", last, n)
		}
		last = n
		if n < first+3 {
			return fmt.Errorf("restartCount %d", n)
		}
		return nil
	})
	t.Logf("restartCount %d -> %d", first, last)
	// flotilla-fail is unaffected: Pending, no container status, not Ready.
	p, err := pod("bad")
	if err != nil {
		t.Fatal(err)
	}
	if ready(p) || p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 0 || p.Spec.NodeName == "" {
		t.Errorf("the flotilla-fail pod: phase %s, ready %v, node %q, container statuses %+v; want scheduled, Pending, none", p.Status.Phase, ready(p), p.Spec.NodeName, p.Status.ContainerStatuses)
	}
	// The normal pod is still Ready, with no restart.
	if p, err = pod("good"); err != nil {
		t.Fatal(err)
	}
	if !ready(p) || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("the nginx:1.27 pod: ready %v, container statuses %+v; want Ready, running, no restart", ready(p), p.Status.ContainerStatuses)
	}
}
