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
