package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The hub writes a Work's status as a whole: a later report that drops a
// field (health, a condition, a manifest) leaves nothing of the earlier
// one behind, and the write is refused for a Work replaced under the same
// name (the UID it carries is the precondition).
func TestWorkStatusWriteReplacesTheWholeStatus(t *testing.T) {
	env := newHubEnv(t, nil)
	ctx := context.Background()
	const cluster = "member-1"
	ns := flotillav1.ClusterNamespace(cluster)
	if err := env.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	work := &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default.web"},
		Spec: flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{
			Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"default"}}`)}}}},
	}
	if err := env.c.Create(ctx, work); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: "Test", LastTransitionTime: now, ObservedGeneration: work.Generation}
	}
	first := &flotillav1.WorkStatus{
		ObservedGeneration: work.Generation,
		Conditions:         []metav1.Condition{cond(flotillav1.ConditionApplied, metav1.ConditionTrue), cond(flotillav1.ConditionDegraded, metav1.ConditionTrue)},
		Manifests: []flotillav1.ManifestStatus{
			{ResourceIdentifier: flotillav1.ResourceIdentifier{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "web"}},
			{ResourceIdentifier: flotillav1.ResourceIdentifier{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "extra"}},
		},
		Health: []flotillav1.SignalStatus{{Name: "errors", State: flotillav1.SignalOK, Value: "0.01", Since: &now}},
	}
	second := &flotillav1.WorkStatus{
		ObservedGeneration: work.Generation,
		Conditions:         []metav1.Condition{cond(flotillav1.ConditionApplied, metav1.ConditionTrue)},
		Manifests:          first.Manifests[:1],
	}
	stored := func(want *flotillav1.WorkStatus) func() error {
		return func() error {
			got := &flotillav1.Work{}
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(work), got); err != nil {
				return err
			}
			st := got.Status.DeepCopy()
			if st.LastReportTime == nil {
				return fmt.Errorf("no lastReportTime in %+v", st)
			}
			st.LastReportTime = nil
			if !equality.Semantic.DeepEqual(st, want) {
				return fmt.Errorf("stored status %+v, want %+v", st, want)
			}
			return nil
		}
	}
	// The writer reads the Work from the hub's cache and drops a report
	// of a Work it does not see (gone): report until it is stored, as an
	// agent reports again on every change.
	report := func(st *flotillav1.WorkStatus) func() error {
		return func() error {
			err := stored(st)()
			if err != nil {
				env.hub.StatusWriter.WorkStatus(ctx, cluster, work.Name, st)
			}
			return err
		}
	}
	eventually(t, "the first report stored whole", 30*time.Second, report(first))
	eventually(t, "the second report stored whole, no health, Degraded or second manifest left", 30*time.Second, report(second))

	// The precondition the writer relies on (syncbridge's statusPatch):
	// its patch, for another UID, is refused as Invalid and changes
	// nothing. (The writer then reads the Work live to tell a replaced
	// Work from a status the schema refuses.)
	patch := []byte(`[{"op":"test","path":"/metadata/uid","value":"00000000-0000-0000-0000-000000000000"},{"op":"add","path":"/status","value":{"observedGeneration":99}}]`)
	err := env.c.Status().Patch(ctx, &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: work.Name}}, client.RawPatch(types.JSONPatchType, patch))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("status patch with a stale UID: %v, want Invalid", err)
	}
	if err := stored(second)(); err != nil {
		t.Fatalf("after the refused patch: %v", err)
	}
}

// TestRestartedHubRewritesNoUnchangedWorkStatus: agents report every
// Work's status again when they reconnect, as they do to a hub that
// restarted or failed over. The new hub writes none of those that change
// nothing (the Work keeps its resourceVersion, so nothing watching it
// wakes up), and still writes one that changes something.
func TestRestartedHubRewritesNoUnchangedWorkStatus(t *testing.T) {
	env := newHubEnv(t, nil)
	ctx := context.Background()
	const cluster = "member-1"
	ns := flotillav1.ClusterNamespace(cluster)
	if err := env.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	newWork := func(name string) *flotillav1.Work {
		w := &flotillav1.Work{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"default"}}`)}}}},
		}
		if err := env.c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	a, b := newWork("default.a"), newWork("default.b")
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	status := func(msg string) *flotillav1.WorkStatus {
		return &flotillav1.WorkStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{{
			Type: flotillav1.ConditionApplied, Status: metav1.ConditionTrue, Reason: "Applied", Message: msg, LastTransitionTime: now, ObservedGeneration: 1}}}
	}
	get := func(w *flotillav1.Work) *flotillav1.Work {
		got := &flotillav1.Work{}
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	// The first hub writes both (reporting until stored: it drops a
	// report of a Work its cache does not see yet).
	for _, w := range []*flotillav1.Work{a, b} {
		eventually(t, "the first hub stores "+w.Name+"'s status", 30*time.Second, func() error {
			if got := get(w); len(got.Status.Conditions) == 0 {
				env.hub.StatusWriter.WorkStatus(ctx, cluster, w.Name, status("applied"))
				return fmt.Errorf("%s has no status yet", w.Name)
			}
			return nil
		})
	}
	rvA := get(a).ResourceVersion

	// A new hub, with nothing in memory, as after a restart. A change
	// (b's) is written, and its event shows the new hub's cache holds
	// everything written before it started.
	second := startHubManager(t, env.cfg, nil)
	eventually(t, "the new hub writes b's changed status", 30*time.Second, func() error {
		if got := get(b); got.Status.Conditions[0].Message != "changed" {
			second.StatusWriter.WorkStatus(ctx, cluster, b.Name, status("changed"))
			return fmt.Errorf("b's status says %q", got.Status.Conditions[0].Message)
		}
		return nil
	})
	eventually(t, "the new hub's status writer trusts its cache", 30*time.Second, func() error {
		if !second.StatusWriter.TrustsCache() {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	// a's agent reports again what a holds.
	second.StatusWriter.WorkStatus(ctx, cluster, a.Name, status("applied"))
	eventually(t, "the new hub's status writer idle", 30*time.Second, func() error {
		if !second.StatusWriter.Idle() {
			return fmt.Errorf("reports pending or in flight")
		}
		return nil
	})
	if got := get(a); got.ResourceVersion != rvA {
		t.Errorf("the unchanged report of a was written again: resourceVersion %s -> %s, status %+v", rvA, got.ResourceVersion, got.Status)
	}
	// And a's next change is written.
	eventually(t, "the new hub writes a's changed status", 30*time.Second, func() error {
		if got := get(a); got.Status.Conditions[0].Message != "degraded" {
			second.StatusWriter.WorkStatus(ctx, cluster, a.Name, status("degraded"))
			return fmt.Errorf("a's status says %q", got.Status.Conditions[0].Message)
		}
		return nil
	})
}
