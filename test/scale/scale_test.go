package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func work(t *testing.T, name string, gen int64, image string, replicas int32) *flotillav1.Work {
	t.Helper()
	dep := map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "scale"},
		"spec": map[string]any{"replicas": replicas, "template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "web", "image": image}}}}},
	}
	raw, err := json.Marshal(dep)
	if err != nil {
		t.Fatal(err)
	}
	return &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-" + "name", Generation: gen},
		Spec:       flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{Raw: raw}}}},
	}
}

// The simulated member reports a Work applied at once and ready after its
// delay, with the numbers the hub's status aggregation reads; a newer
// generation cancels the older one's ready report; only a snapshot prunes.
func TestSimMemberReportsAppliedThenReady(t *testing.T) {
	var mu sync.Mutex
	reports := map[string][]*flotillav1.WorkStatus{}
	m := newSimMember("sim-0000", 50*time.Millisecond, &counters{})
	m.reporter = func(name string, st *flotillav1.WorkStatus) {
		mu.Lock()
		defer mu.Unlock()
		reports[name] = append(reports[name], st)
	}
	ctx := context.Background()
	if err := m.Apply(ctx, work(t, "scale.a", 1, "img:1", 2)); err != nil {
		t.Fatal(err)
	}
	// Generation 2 before generation 1 is ready: 1's ready report must
	// never come.
	if err := m.Apply(ctx, work(t, "scale.a", 2, "img:2", 3)); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(ctx, work(t, "scale.b", 1, "img:2", 1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(reports["scale.a"])
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Work scale.a: %d reports after 5s, want 3 (applied 1, applied 2, ready 2)", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a stray ready report of generation 1 would land by now
	mu.Lock()
	a := reports["scale.a"]
	mu.Unlock()
	if len(a) != 3 {
		t.Fatalf("Work scale.a: %d reports, want 3", len(a))
	}
	first, last := a[0], a[2]
	if first.ObservedGeneration != 1 || meta.IsStatusConditionTrue(first.Conditions, flotillav1.ConditionAvailable) {
		t.Errorf("first report: generation %d, Available %v; want generation 1, not Available", first.ObservedGeneration, first.Conditions)
	}
	if !meta.IsStatusConditionTrue(first.Conditions, flotillav1.ConditionApplied) {
		t.Errorf("first report is not Applied: %v", first.Conditions)
	}
	if last.ObservedGeneration != 2 || !meta.IsStatusConditionTrue(last.Conditions, flotillav1.ConditionAvailable) {
		t.Errorf("last report: generation %d, conditions %v; want generation 2, Available", last.ObservedGeneration, last.Conditions)
	}
	if len(last.Manifests) != 1 || last.Manifests[0].Workload == nil {
		t.Fatalf("last report's manifests: %+v, want one Deployment with workload numbers", last.Manifests)
	}
	wl := last.Manifests[0].Workload
	if wl.Replicas != 3 || wl.ReadyReplicas != 3 || wl.AvailableReplicas != 3 || wl.UpdatedReplicas != 3 || wl.ObservedGeneration != wl.Generation {
		t.Errorf("workload %+v, want 3 replicas all ready, available and updated, generation observed", wl)
	}
	if n, _ := m.imageCount("img:2"); n != 2 {
		t.Errorf("imageCount(img:2) = %d, want 2", n)
	}
	held, _ := m.Held(ctx)
	if len(held) != 2 {
		t.Errorf("Held = %v, want 2 Works", held)
	}
	if err := m.SnapshotComplete(ctx, []string{"scale.b"}, false); err != nil {
		t.Fatal(err)
	}
	if m.workCount() != 1 || m.counters.prunes.Load() != 1 {
		t.Errorf("after a snapshot keeping scale.b: %d Works, %d prunes; want 1 and 1", m.workCount(), m.counters.prunes.Load())
	}
}

// A bad manifest is refused with the Work's name and nothing is recorded.
func TestSimMemberRefusesBadManifest(t *testing.T) {
	m := newSimMember("sim-0000", 0, &counters{})
	w := work(t, "scale.bad", 1, "img", 1)
	w.Spec.Manifests[0].Raw = []byte("{not json")
	err := m.Apply(context.Background(), w)
	if err == nil || !strings.Contains(err.Error(), "scale.bad") {
		t.Fatalf("Apply of a bad manifest: %v, want an error naming the Work", err)
	}
	if m.workCount() != 0 {
		t.Errorf("a refused Work was recorded")
	}
}

// The comparison flags a figure that grew beyond 10% and by more than the
// noise floor, and no other.
func TestCompareFlagsRegressions(t *testing.T) {
	dir := t.TempDir()
	prev := record{Date: "before", Members: 200, Apps: 2000, Figures: []figure{
		{Scenario: 1, Key: "all-ready-s", Unit: "s", Value: 10},
		{Scenario: 2, Key: "hub-rss-mib", Unit: "MiB", Value: 100},
		{Scenario: 2, Key: "ready-p50-s", Unit: "s", Value: 0.1},
	}}
	data, _ := json.Marshal(prev)
	path := filepath.Join(dir, "prev.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := &report{o: options{members: 200, apps: 2000}}
	r.add(1, "all-ready-s", "s", 12, "")    // +20%, +2 s: a regression
	r.add(2, "hub-rss-mib", "MiB", 105, "") // +5%: not
	r.add(2, "ready-p50-s", "s", 0.2, "")   // +100% but 0.1 s: noise
	out, err := r.compare(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "REGRESSION") != 1 || !strings.Contains(out, "| 1/all-ready-s | 10.0 s | 12.0 s | +20% | REGRESSION |") {
		t.Errorf("comparison:\n%s\nwant exactly 1/all-ready-s flagged", out)
	}
	r.o.members = 1000
	out, _ = r.compare(path)
	if !strings.Contains(out, "Not comparable") {
		t.Errorf("a run of another size was compared:\n%s", out)
	}
}
