package apply

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// staleReader answers Get with a copy of an object read before: a cache
// that has not seen the latest write yet.
type staleReader struct {
	kclient.Reader
	saved *unstructured.Unstructured
}

func (r staleReader) Get(_ context.Context, _ kclient.Key, obj kclient.Object) error {
	r.saved.DeepCopyInto(obj.(*unstructured.Unstructured))
	return nil
}

// TestStatusFromStaleCache: right after a new template is applied, a cache
// that still holds the previous, fully rolled out Deployment must not make
// the Work report the new generation as updated and available; the apply's
// own answer (a generation not yet observed) is used instead.
func TestStatusFromStaleCache(t *testing.T) {
	f := newFixture(t)
	direct := New(nil, f.writer(), Options{})
	f.apply(direct, newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2)))
	d := f.getDeployment(f.ns, "web")
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	if err := f.c.Status().Update(f.ctx, d); err != nil {
		t.Fatalf("updating the Deployment's status: %v", err)
	}
	old := f.getDeployment(f.ns, "web")
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(old)
	if err != nil {
		t.Fatal(err)
	}
	saved := &unstructured.Unstructured{Object: obj}
	saved.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))

	a := New(staleReader{saved: saved}, f.writer(), Options{})
	work := newWork(t, f.work("web"), 2, deployment(f.ns, "web", "web:2", 2))
	results := f.apply(a, work)
	st, _, err := a.Status(f.ctx, work, results, time.Now())
	if err != nil {
		t.Fatalf("computing status: %v", err)
	}
	w := st.Manifests[0].Workload
	if w == nil || w.Generation <= old.Generation || w.ObservedGeneration == w.Generation {
		t.Fatalf("workload %+v: want the applied generation (> %d), not yet observed", w, old.Generation)
	}
}
