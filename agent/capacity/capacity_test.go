package capacity

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
)

func ready(s corev1.ConditionStatus) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: s}
}

func TestSchedulable(t *testing.T) {
	tests := []struct {
		name string
		node corev1.Node
		want bool
	}{
		{"Ready", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready(corev1.ConditionTrue)}}}, true},
		{"Ready after other conditions", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse}, ready(corev1.ConditionTrue),
		}}}, true},
		{"not Ready", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready(corev1.ConditionFalse)}}}, false},
		{"Ready unknown (kubelet silent)", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready(corev1.ConditionUnknown)}}}, false},
		{"no Ready condition yet", corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}}}}, false},
		{"no conditions at all", corev1.Node{}, false},
		{"cordoned", corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready(corev1.ConditionTrue)}}}, false},
		{"a NoSchedule taint", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready(corev1.ConditionTrue)}}}, false},
		{"a NoExecute taint", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready(corev1.ConditionTrue)}}}, false},
		{"a PreferNoSchedule taint still takes pods", corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready(corev1.ConditionTrue)}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Schedulable(&tt.node); got != tt.want {
				t.Errorf("Schedulable = %t, want %t", got, tt.want)
			}
		})
	}
}

// list builds a ResourceList from name, quantity pairs.
func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func container(requests corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: "c", Image: "app", Resources: corev1.ResourceRequirements{Requests: requests}}
}

// checkList compares two resource lists by quantity, whatever their
// formats.
func checkList(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		if !ok || g.Cmp(w) != 0 {
			t.Errorf("%s[%s] = %s, want %s", what, name, g.String(), w.String())
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s has %s = %s, want none", what, name, g.String())
		}
	}
}

func TestPodRequests(t *testing.T) {
	tests := []struct {
		name string
		spec corev1.PodSpec
		want corev1.ResourceList
	}{
		{"no requests", corev1.PodSpec{Containers: []corev1.Container{container(nil)}}, list()},
		{"one container", corev1.PodSpec{Containers: []corev1.Container{container(list("cpu", "100m", "memory", "64Mi"))}}, list("cpu", "100m", "memory", "64Mi")},
		{"containers are summed", corev1.PodSpec{Containers: []corev1.Container{
			container(list("cpu", "100m", "memory", "64Mi")), container(list("cpu", "250m")), container(list("memory", "1Gi", "nvidia.com/gpu", "1")),
		}}, list("cpu", "350m", "memory", "1088Mi", "nvidia.com/gpu", "1")},
		{"limits are not requests", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: list("cpu", "2")}}}}, list()},
		{"an init container larger than the sum wins, per resource", corev1.PodSpec{
			InitContainers: []corev1.Container{container(list("cpu", "1", "memory", "10Mi"))},
			Containers:     []corev1.Container{container(list("cpu", "100m", "memory", "64Mi")), container(list("cpu", "100m", "memory", "64Mi"))},
		}, list("cpu", "1", "memory", "128Mi")},
		{"init containers run one at a time: the largest counts, not their sum", corev1.PodSpec{
			InitContainers: []corev1.Container{container(list("cpu", "300m")), container(list("cpu", "400m")), container(list("cpu", "200m"))},
			Containers:     []corev1.Container{container(list("cpu", "100m"))},
		}, list("cpu", "400m")},
		{"a resource only an init container requests counts", corev1.PodSpec{
			InitContainers: []corev1.Container{container(list("ephemeral-storage", "1Gi"))},
			Containers:     []corev1.Container{container(list("cpu", "100m"))},
		}, list("cpu", "100m", "ephemeral-storage", "1Gi")},
		{"overhead is added on top", corev1.PodSpec{
			InitContainers: []corev1.Container{container(list("cpu", "1"))},
			Containers:     []corev1.Container{container(list("cpu", "100m", "memory", "64Mi"))},
			Overhead:       list("cpu", "50m", "memory", "20Mi"),
		}, list("cpu", "1050m", "memory", "84Mi")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: tt.spec}
			before := p.DeepCopy()
			checkList(t, "PodRequests", PodRequests(p), tt.want)
			if !equality.Semantic.DeepEqual(p, before) {
				t.Error("PodRequests changed the pod")
			}
		})
	}
}

// TestPodRequestsSidecars: restartable init containers (sidecars, GA in
// Kubernetes 1.33) run for the pod's whole life, so the scheduler adds
// their requests to the containers' sum; and pod-level resources, when
// set, are what the scheduler reserves.
func TestPodRequestsSidecars(t *testing.T) {
	tests := []struct {
		name string
		spec corev1.PodSpec
		want corev1.ResourceList
	}{
		{"a sidecar's requests add to the containers'", corev1.PodSpec{
			InitContainers: []corev1.Container{func() corev1.Container {
				c := container(list("cpu", "200m", "memory", "32Mi"))
				c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
				return c
			}()},
			Containers: []corev1.Container{container(list("cpu", "100m", "memory", "64Mi"))},
		}, list("cpu", "300m", "memory", "96Mi")},
		{"an init container after a sidecar runs beside it", corev1.PodSpec{
			InitContainers: []corev1.Container{
				func() corev1.Container {
					c := container(list("cpu", "200m"))
					c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
					return c
				}(),
				container(list("cpu", "1")),
			},
			Containers: []corev1.Container{container(list("cpu", "100m"))},
		}, list("cpu", "1200m")},
		{"pod-level requests are what the pod reserves", corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: list("cpu", "2", "memory", "1Gi")},
			Containers: []corev1.Container{container(list("cpu", "100m", "memory", "64Mi"))},
		}, list("cpu", "2", "memory", "1Gi")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkList(t, "PodRequests", PodRequests(&corev1.Pod{Spec: tt.spec}), tt.want)
		})
	}
}

// countingReader counts the pages of pods listed through it, to show a
// test pages at all.
type countingReader struct {
	kclient.Reader
	podPages, nodePages atomic.Int32
}

func (r *countingReader) List(ctx context.Context, l kclient.ObjectList, opts kclient.ListOptions) error {
	switch l.(type) {
	case *corev1.PodList:
		r.podPages.Add(1)
	case *corev1.NodeList:
		r.nodePages.Add(1)
	}
	return r.Reader.List(ctx, l, opts)
}

func createNode(t *testing.T, c client.Client, name string, spec corev1.NodeSpec, conds []corev1.NodeCondition, allocatable corev1.ResourceList) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if err := c.Create(t.Context(), n); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	n.Status = corev1.NodeStatus{Conditions: conds, Allocatable: allocatable, Capacity: allocatable}
	if err := c.Status().Update(t.Context(), n); err != nil {
		t.Fatalf("setting the status of node %s: %v", name, err)
	}
	// The TaintNodesByCondition admission plugin taints every new node
	// not-ready:NoSchedule; in a cluster the node lifecycle controller
	// lifts the taint once the node is Ready, and envtest runs none.
	n.Spec.Taints = spec.Taints
	if err := c.Update(t.Context(), n); err != nil {
		t.Fatalf("setting the taints of node %s: %v", name, err)
	}
}

func createPod(t *testing.T, c client.Client, ns, name, node string, spec corev1.PodSpec, phase corev1.PodPhase) {
	t.Helper()
	spec.NodeName = node
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := c.Create(t.Context(), p); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	if phase != "" {
		p.Status.Phase = phase
		if err := c.Status().Update(t.Context(), p); err != nil {
			t.Fatalf("setting pod %s %s: %v", name, phase, err)
		}
	}
}

// TestCompute sums a real apiserver's nodes and pods: only Ready,
// schedulable nodes count, and only pods on them that are not terminal,
// over as many pages as it takes.
func TestCompute(t *testing.T) {
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ns = "capacity"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	readyTrue := []corev1.NodeCondition{ready(corev1.ConditionTrue)}
	createNode(t, c, "ready-1", corev1.NodeSpec{}, readyTrue, list("cpu", "4", "memory", "8Gi", "pods", "110", "ephemeral-storage", "100Gi"))
	createNode(t, c, "ready-2", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}}}, readyTrue,
		list("cpu", "2", "memory", "4Gi", "pods", "110"))
	createNode(t, c, "cordoned", corev1.NodeSpec{Unschedulable: true}, readyTrue, list("cpu", "8", "memory", "8Gi", "pods", "110"))
	createNode(t, c, "not-ready", corev1.NodeSpec{}, []corev1.NodeCondition{ready(corev1.ConditionFalse)}, list("cpu", "8", "memory", "8Gi", "pods", "110"))
	createNode(t, c, "tainted", corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}}, readyTrue,
		list("cpu", "8", "memory", "8Gi", "pods", "110"))
	createNode(t, c, "new", corev1.NodeSpec{}, nil, list("cpu", "8", "memory", "8Gi", "pods", "110"))

	small := corev1.PodSpec{Containers: []corev1.Container{container(list("cpu", "10m", "memory", "16Mi"))}}
	big := corev1.PodSpec{Containers: []corev1.Container{container(list("cpu", "1", "memory", "1Gi"))}}
	const many = 120
	for i := range many {
		createPod(t, c, ns, fmt.Sprintf("small-%03d", i), []string{"ready-1", "ready-2"}[i%2], small, "")
	}
	// The RuntimeClass admission plugin sets the pod's overhead from its
	// RuntimeClass.
	if err := c.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "kata",
		Overhead: &nodev1.Overhead{PodFixed: list("cpu", "50m")}}); err != nil {
		t.Fatal(err)
	}
	initContainer := container(list("cpu", "500m"))
	initContainer.Name = "init"
	createPod(t, c, ns, "init-and-overhead", "ready-1", corev1.PodSpec{
		RuntimeClassName: ptr.To("sandboxed"),
		InitContainers:   []corev1.Container{initContainer},
		Containers:       []corev1.Container{container(list("cpu", "100m", "memory", "10Mi"))},
	}, "")
	createPod(t, c, ns, "no-requests", "ready-2", corev1.PodSpec{Containers: []corev1.Container{container(nil)}}, "")
	createPod(t, c, ns, "running", "ready-2", small, corev1.PodRunning)
	// None of these count.
	createPod(t, c, ns, "succeeded", "ready-1", big, corev1.PodSucceeded)
	createPod(t, c, ns, "failed", "ready-2", big, corev1.PodFailed)
	createPod(t, c, ns, "on-cordoned", "cordoned", big, "")
	createPod(t, c, ns, "on-not-ready", "not-ready", big, "")
	createPod(t, c, ns, "unscheduled", "", big, "")
	createPod(t, c, ns, "on-missing-node", "gone", big, "")

	wantAllocatable := list("cpu", "6", "memory", "12Gi", "pods", "220")
	// 121 small pods, the init-and-overhead pod (550m, 10Mi) and the one
	// without requests.
	wantAllocated := list("cpu", "1760m", "memory", "1946Mi", "pods", "123")

	tests := []struct {
		name     string
		pageSize int64
		// minPodPages and minNodePages show the listing paged.
		minPodPages, minNodePages int32
	}{
		{"the default page size lists everything at once", 0, 1, 1},
		{"pages of 50 pods", 50, 3, 1},
		{"pages of 4: nodes page too", 4, 32, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &countingReader{Reader: crclient.Reader(c)}
			s := &Summarizer{Reader: r, PageSize: tt.pageSize}
			sum, err := s.Compute(t.Context())
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			if sum.Nodes != 2 {
				t.Errorf("nodes = %d, want 2 (ready-1 and ready-2)", sum.Nodes)
			}
			checkList(t, "allocatable", sum.Allocatable, wantAllocatable)
			checkList(t, "allocated", sum.Allocated, wantAllocated)
			if p := r.podPages.Load(); p < tt.minPodPages {
				t.Errorf("pods listed in %d pages, want at least %d", p, tt.minPodPages)
			}
			if p := r.nodePages.Load(); p < tt.minNodePages {
				t.Errorf("nodes listed in %d pages, want at least %d", p, tt.minNodePages)
			}
		})
	}

	t.Run("Start keeps Latest up to date and Latest hands out copies", func(t *testing.T) {
		s := &Summarizer{Reader: crclient.Reader(c), PageSize: 50, Interval: 50 * time.Millisecond}
		if sum, err := s.Latest(t.Context()); sum != nil || err != nil {
			t.Fatalf("Latest before the first computation = %v, %v; want nil, nil", sum, err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- s.Start(ctx) }()
		var sum *flotillav1.ResourceSummary
		if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			sum, _ = s.Latest(ctx)
			return sum != nil, nil
		}); err != nil {
			t.Fatalf("no summary within 10s: %v", err)
		}
		checkList(t, "allocated", sum.Allocated, wantAllocated)
		sum.Allocated[corev1.ResourceCPU] = resource.MustParse("0")
		sum.Nodes = 99
		again, _ := s.Latest(t.Context())
		if again.Nodes != 2 || again.Allocated.Cpu().Cmp(resource.MustParse("1760m")) != 0 {
			t.Errorf("changing what Latest returned changed the Summarizer's summary: %+v", again)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v, want nil on cancel", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Start did not return after its context ended")
		}
	})
}

type failingReader struct{ kclient.Reader }

func (failingReader) List(context.Context, kclient.ObjectList, kclient.ListOptions) error {
	return errors.New("connection refused")
}

func TestComputeSaysWhatFailed(t *testing.T) {
	_, err := (&Summarizer{Reader: failingReader{}}).Compute(t.Context())
	if err == nil || err.Error() != "listing nodes: connection refused" {
		t.Errorf("error = %v, want listing nodes: connection refused", err)
	}
}
