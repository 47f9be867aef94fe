// Package capacity computes a member's resource summary for the hub's
// dynamic weighting: allocatable cpu, memory and pods summed over Ready,
// schedulable nodes, and what the pods on those nodes request. It pages
// through pods and keeps only running totals, so a member with 100,000
// pods costs the agent one page of pods in memory, not all of them.
package capacity

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/log"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// The resources the summary counts.
var counted = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Summarizer computes and caches the summary.
type Summarizer struct {
	// Reader must read live (the manager's APIReader): caching every pod
	// is what this package avoids.
	Reader kclient.Reader
	// PageSize is how many objects one list request returns (default 500).
	PageSize int64
	// Interval is how often the summary is recomputed (default 10s).
	Interval time.Duration

	mu     sync.RWMutex
	latest *flotillav1.ResourceSummary
}

// Latest returns the last computed summary (nil before the first).
func (s *Summarizer) Latest(context.Context) (*flotillav1.ResourceSummary, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.latest == nil {
		return nil, nil
	}
	return s.latest.DeepCopy(), nil
}

// NeedLeaderElection: only the leader reports to the hub.
func (s *Summarizer) NeedLeaderElection() bool { return true }

// Start recomputes the summary every Interval until ctx ends.
func (s *Summarizer) Start(ctx context.Context) error {
	if s.Interval == 0 {
		s.Interval = 10 * time.Second
	}
	for {
		if sum, err := s.Compute(ctx); err != nil {
			if ctx.Err() == nil {
				log.FromContext(ctx).Error(err, "computing the resource summary")
			}
		} else {
			s.mu.Lock()
			s.latest = sum
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.Interval):
		}
	}
}

// Compute computes the summary now.
func (s *Summarizer) Compute(ctx context.Context) (*flotillav1.ResourceSummary, error) {
	page := s.PageSize
	if page == 0 {
		page = 500
	}
	sum := &flotillav1.ResourceSummary{Allocatable: corev1.ResourceList{}, Allocated: corev1.ResourceList{}}
	for _, r := range counted {
		sum.Allocatable[r] = resource.Quantity{}
		sum.Allocated[r] = resource.Quantity{}
	}
	eligible := map[string]bool{}
	cont := ""
	for {
		var nodes corev1.NodeList
		if err := s.Reader.List(ctx, &nodes, kclient.ListOptions{Limit: page, Continue: cont}); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if !Schedulable(n) {
				continue
			}
			eligible[n.Name] = true
			sum.Nodes++
			for _, r := range counted {
				if q, ok := n.Status.Allocatable[r]; ok {
					add(sum.Allocatable, r, q)
				}
			}
		}
		if cont = nodes.Continue; cont == "" {
			break
		}
	}
	cont = ""
	for {
		var pods corev1.PodList
		if err := s.Reader.List(ctx, &pods, kclient.ListOptions{Limit: page, Continue: cont, Fields: terminalPhases}); err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !eligible[p.Spec.NodeName] {
				continue
			}
			req := PodRequests(p)
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if q, ok := req[r]; ok {
					add(sum.Allocated, r, q)
				}
			}
			add(sum.Allocated, corev1.ResourcePods, *resource.NewQuantity(1, resource.DecimalSI))
		}
		if cont = pods.Continue; cont == "" {
			break
		}
	}
	return sum, nil
}

func add(list corev1.ResourceList, r corev1.ResourceName, q resource.Quantity) {
	cur := list[r]
	cur.Add(q)
	list[r] = cur
}

// Schedulable says whether new pods can land on n: Ready, not cordoned, and
// without a NoSchedule or NoExecute taint.
func Schedulable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodRequests is what the scheduler reserves for p, computed the way the
// scheduler does: the containers' requests plus the sidecars' (init
// containers with restartPolicy Always run for the pod's whole life), or
// the largest need of an ordinary init container together with the
// sidecars started before it if that is more; pod-level requests, when set,
// replace the containers' for the resources they name; then the overhead.
func PodRequests(p *corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, c := range p.Spec.Containers {
		for r, q := range c.Resources.Requests {
			add(out, r, q)
		}
	}
	initMax := corev1.ResourceList{}
	sidecars := corev1.ResourceList{}
	for _, c := range p.Spec.InitContainers {
		need := corev1.ResourceList{}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			for r, q := range c.Resources.Requests {
				add(out, r, q)
				add(sidecars, r, q)
			}
			for r, q := range sidecars {
				need[r] = q.DeepCopy()
			}
		} else {
			for r, q := range c.Resources.Requests {
				add(need, r, q)
			}
			for r, q := range sidecars {
				add(need, r, q)
			}
		}
		maxInto(initMax, need)
	}
	maxInto(out, initMax)
	if p.Spec.Resources != nil {
		for r, q := range p.Spec.Resources.Requests {
			out[r] = q.DeepCopy()
		}
	}
	for r, q := range p.Spec.Overhead {
		add(out, r, q)
	}
	return out
}

// maxInto sets each resource of dst to the larger of dst's and src's.
func maxInto(dst, src corev1.ResourceList) {
	for r, q := range src {
		if cur, ok := dst[r]; !ok || q.Cmp(cur) > 0 {
			dst[r] = q.DeepCopy()
		}
	}
}
