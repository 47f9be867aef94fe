package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1 "k8s.io/api/core/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
)

// simMember is a member cluster that exists only in memory: the Applier of
// one real sync client. It keeps the Works it holds, acknowledges each
// apply at once (Applied, replicas not ready yet) and reports the
// Deployment's replicas ready after readyDelay, as a member whose pods
// start in that time would. It applies nothing anywhere, so the harness
// measures the hub and the protocol, not member apiservers.
type simMember struct {
	name       string
	readyDelay time.Duration
	// reporter is the sync client's ReportStatus (set once the client is
	// built, before Run).
	reporter func(name string, st *flotillav1.WorkStatus)
	counters *counters

	mu    sync.Mutex
	works map[string]*heldWork
}

// heldWork is what the member records of one Work.
type heldWork struct {
	uid        string
	generation int64
	image      string
	// appliedAt is when this generation was applied, firstApplied when
	// the Work was first applied (unix nanoseconds).
	appliedAt, firstApplied int64
	timer                   *time.Timer
}

// counters are shared by every simulated member of one process.
type counters struct {
	applies, deletes, orphans, prunes, statusReports atomic.Int64
}

func newSimMember(name string, readyDelay time.Duration, c *counters) *simMember {
	return &simMember{name: name, readyDelay: readyDelay, counters: c, works: map[string]*heldWork{}}
}

// Held implements syncclient.Applier.
func (m *simMember) Held(context.Context) ([]syncclient.HeldWork, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]syncclient.HeldWork, 0, len(m.works))
	for name, w := range m.works {
		out = append(out, syncclient.HeldWork{Name: name, UID: w.uid, Generation: w.generation})
	}
	return out, nil
}

// manifestHead is the part of a manifest the member reads.
type manifestHead struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Replicas *int32 `json:"replicas"`
		Template struct {
			Spec struct {
				Containers []struct {
					Image string `json:"image"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// Apply implements syncclient.Applier: it records the Work and reports it
// applied now and ready after readyDelay.
func (m *simMember) Apply(_ context.Context, work *flotillav1.Work) error {
	var heads []manifestHead
	image := ""
	for i, mf := range work.Spec.Manifests {
		var h manifestHead
		if err := json.Unmarshal(mf.Raw, &h); err != nil {
			return fmt.Errorf("manifest %d of Work %s: %w", i, work.Name, err)
		}
		if h.Kind == "Deployment" && len(h.Spec.Template.Spec.Containers) > 0 {
			image = h.Spec.Template.Spec.Containers[0].Image
		}
		heads = append(heads, h)
	}
	now := time.Now()
	m.mu.Lock()
	w := m.works[work.Name]
	if w == nil {
		w = &heldWork{firstApplied: now.UnixNano()}
		m.works[work.Name] = w
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	w.uid, w.generation, w.image, w.appliedAt = string(work.UID), work.Generation, image, now.UnixNano()
	name, gen := work.Name, work.Generation
	m.counters.applies.Add(1)
	m.report(name, gen, heads, false, now)
	if m.readyDelay > 0 {
		w.timer = time.AfterFunc(m.readyDelay, func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if cur := m.works[name]; cur != nil && cur.generation == gen {
				m.report(name, gen, heads, true, time.Now())
			}
		})
	} else {
		m.report(name, gen, heads, true, now)
	}
	m.mu.Unlock()
	return nil
}

// report sends the status of generation gen of Work name; m.mu is held.
func (m *simMember) report(name string, gen int64, heads []manifestHead, ready bool, now time.Time) {
	t := metav1.NewTime(now)
	cond := func(typ string, ok bool, reason string) metav1.Condition {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		return metav1.Condition{Type: typ, Status: s, Reason: reason, LastTransitionTime: t, ObservedGeneration: gen}
	}
	st := &flotillav1.WorkStatus{ObservedGeneration: gen, LastReportTime: &t}
	st.Conditions = append(st.Conditions, cond(flotillav1.ConditionApplied, true, flotillav1.ReasonApplied))
	if ready {
		st.Conditions = append(st.Conditions, cond(flotillav1.ConditionAvailable, true, flotillav1.ReasonAvailable), cond(flotillav1.ConditionProgressing, false, flotillav1.ReasonComplete))
	} else {
		st.Conditions = append(st.Conditions, cond(flotillav1.ConditionAvailable, false, flotillav1.ReasonUnavailable), cond(flotillav1.ConditionProgressing, true, flotillav1.ReasonRollingOut))
	}
	for _, h := range heads {
		gv, _ := schema.ParseGroupVersion(h.APIVersion)
		ms := flotillav1.ManifestStatus{ResourceIdentifier: flotillav1.ResourceIdentifier{
			Group: gv.Group, Version: gv.Version, Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name,
		}}
		ms.Conditions = []metav1.Condition{cond(flotillav1.ConditionApplied, true, flotillav1.ReasonApplied)}
		if h.Kind == "Deployment" {
			r := int32(1)
			if h.Spec.Replicas != nil {
				r = *h.Spec.Replicas
			}
			wl := &flotillav1.WorkloadStatus{Replicas: r, UpdatedReplicas: r, Generation: 1, ObservedGeneration: 1}
			if ready {
				wl.ReadyReplicas, wl.AvailableReplicas = r, r
			} else {
				wl.UnavailableReplicas = r
			}
			ms.Workload = wl
		}
		st.Manifests = append(st.Manifests, ms)
	}
	m.counters.statusReports.Add(1)
	if m.reporter != nil {
		m.reporter(name, st)
	}
}

// Delete implements syncclient.Applier.
func (m *simMember) Delete(_ context.Context, name string) error {
	m.forget(name)
	m.counters.deletes.Add(1)
	return nil
}

// Orphan implements syncclient.Applier.
func (m *simMember) Orphan(_ context.Context, name string) error {
	m.forget(name)
	m.counters.orphans.Add(1)
	return nil
}

func (m *simMember) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w := m.works[name]; w != nil && w.timer != nil {
		w.timer.Stop()
	}
	delete(m.works, name)
}

// SnapshotComplete implements syncclient.Applier: it prunes the Works not
// in keep (a member has no deletion brake here: the harness never shrinks
// a member's set by a restore).
func (m *simMember) SnapshotComplete(_ context.Context, keep []string, _ bool) error {
	want := make(map[string]bool, len(keep))
	for _, k := range keep {
		want[k] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, w := range m.works {
		if !want[name] {
			if w.timer != nil {
				w.timer.Stop()
			}
			delete(m.works, name)
			m.counters.prunes.Add(1)
		}
	}
	return nil
}

// imageCount counts the Works holding image (their Deployment's first
// container) and the latest time one of them was applied.
func (m *simMember) imageCount(image string) (n int, last int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.works {
		if w.image == image {
			n++
			last = max(last, w.appliedAt)
		}
	}
	return n, last
}

// firstApplied adds, per Work name, when the member first applied it to
// into (keeping the latest over members).
func (m *simMember) firstApplied(into map[string]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, w := range m.works {
		into[name] = max(into[name], w.firstApplied)
	}
}

// workCount is the number of Works the member holds.
func (m *simMember) workCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.works)
}

// resources is the member's capacity summary for hellos and heartbeats:
// one large node, nothing requested (the harness's apps request nothing).
func resources(context.Context) (*flotillav1.ResourceSummary, error) {
	return &flotillav1.ResourceSummary{
		Nodes: 10,
		Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("320"), corev1.ResourceMemory: resource.MustParse("1280Gi"), corev1.ResourcePods: resource.MustParse("1100"),
		},
	}, nil
}
