package syncbridge

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
)

// benchWorkStatus is a Work status as an agent reports a Deployment with
// ready replicas.
func benchWorkStatus(ready int32) *flotillav1.WorkStatus {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(t string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "AsExpected", Message: "as expected", LastTransitionTime: now, ObservedGeneration: 1}
	}
	return &flotillav1.WorkStatus{
		ObservedGeneration: 1,
		Conditions:         []metav1.Condition{cond("Applied"), cond("Available"), cond("Progressing")},
		Manifests: []flotillav1.ManifestStatus{{
			ResourceIdentifier: flotillav1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "bench", Name: "app"},
			Conditions:         []metav1.Condition{cond("Applied"), cond("Available")},
			Workload:           &flotillav1.WorkloadStatus{ObservedGeneration: 1, Generation: 1, Replicas: 3, ReadyReplicas: ready, AvailableReplicas: ready, UpdatedReplicas: 3},
		}},
	}
}

// BenchmarkStatusPatch measures, on the package's envtest apiserver, the
// status writer's Work status patch against a Lease patch (the bench's
// status floor), and what the Work's size and the patch type change.
func BenchmarkStatusPatch(b *testing.B) {
	ctx, c, _, _ := newSourceEnv(b)
	ns := freshName("patch")
	createNamespace(ctx, b, c, ns)
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "bench"}, Spec: flotillav1.MyAppSpec{Image: "registry.example/app:v1"}}
	d, err := render.Deployment(app, 3, render.ClusterOverrides{})
	if err != nil {
		b.Fatal(err)
	}
	deploy, err := json.Marshal(d)
	if err != nil {
		b.Fatal(err)
	}
	work := func(name string, manifest []byte) *flotillav1.Work {
		w := &flotillav1.Work{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{Raw: manifest}}}},
		}
		if err := c.Create(ctx, w); err != nil {
			b.Fatal(err)
		}
		return w
	}
	small := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"bench"}}`)
	for _, tc := range []struct {
		name  string
		patch func(i int) (client.Object, client.Patch)
	}{
		{"lease-merge", func() func(int) (client.Object, client.Patch) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}
			if err := c.Create(ctx, l); err != nil {
				b.Fatal(err)
			}
			return func(int) (client.Object, client.Patch) {
				p := fmt.Appendf(nil, `{"spec":{"renewTime":%q}}`, metav1.NowMicro().Format(metav1.RFC3339Micro))
				return l, client.RawPatch(types.MergePatchType, p)
			}
		}()},
		{"work-deployment-json", workPatch(b, work("deploy-json", deploy), false)},
		{"work-deployment-merge", workPatch(b, work("deploy-merge", deploy), true)},
		{"work-configmap-json", workPatch(b, work("small-json", small), false)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				obj, p := tc.patch(i)
				i++
				var err error
				if _, lease := obj.(*coordinationv1.Lease); lease {
					err = c.Patch(ctx, obj, p) // a Lease has no status subresource
				} else {
					err = c.Status().Patch(ctx, obj, p)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func workPatch(b *testing.B, w *flotillav1.Work, merge bool) func(int) (client.Object, client.Patch) {
	return func(i int) (client.Object, client.Patch) {
		st := benchWorkStatus(int32(i % 4))
		now := metav1.Now()
		st.LastReportTime = &now
		if merge {
			p, err := json.Marshal(map[string]any{"status": st})
			if err != nil {
				b.Fatal(err)
			}
			return w, client.RawPatch(types.MergePatchType, p)
		}
		p, err := statusPatch(w.UID, st)
		if err != nil {
			b.Fatal(err)
		}
		return w, client.RawPatch(types.JSONPatchType, p)
	}
}
