package wire

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestEncodeWorkRoundTrip(t *testing.T) {
	w := &v1alpha1.Work{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "flotilla-cluster-east", UID: "u1", Generation: 4,
			Labels:        map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "hub"}},
		},
		Spec: v1alpha1.WorkSpec{Manifests: []v1alpha1.Manifest{{RawExtension: runtime.RawExtension{
			Raw: []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"}}`)}}}},
		Status: v1alpha1.WorkStatus{ObservedGeneration: 3},
	}
	data, err := EncodeWork(w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeWork(data, "east")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "web" || got.UID != "u1" || got.Generation != 4 || got.Labels["a"] != "b" || got.Kind != "Work" {
		t.Errorf("round trip lost metadata: %+v", got.ObjectMeta)
	}
	if len(got.ManagedFields) != 0 || got.Status.ObservedGeneration != 0 {
		t.Error("managedFields or status were sent; the agent does not need them")
	}
	if string(got.Spec.Manifests[0].Raw) != string(w.Spec.Manifests[0].Raw) {
		t.Errorf("manifest = %s", got.Spec.Manifests[0].Raw)
	}
	if _, err := DecodeWork(data, "west"); err == nil {
		t.Error("a Work of east was accepted by west's agent")
	}
}

// FuzzDecodeWork feeds arbitrary JSON as the hub's upsert payload: the
// decoder must never panic and must accept only valid, own-namespace
// Works.
func FuzzDecodeWork(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"web","namespace":"flotilla-cluster-east","generation":1},"spec":{"manifests":[{"kind":"Deployment"}]}}`))
	f.Add([]byte(`{"metadata":{"name":"web","namespace":"flotilla-cluster-east","generation":-1}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := DecodeWork(data, "east")
		if err != nil {
			return
		}
		if w.Namespace != "flotilla-cluster-east" || ValidateWorkName(w.Name) != nil || w.Generation < 0 {
			t.Fatalf("accepted %+v", w.ObjectMeta)
		}
	})
}

// FuzzDecodeWorkStatus feeds arbitrary JSON as an agent's status payload.
func FuzzDecodeWorkStatus(f *testing.F) {
	f.Add([]byte(`{"observedGeneration":2,"conditions":[{"type":"Applied","status":"True","reason":"Applied","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"manifests":[{"kind":"Deployment","name":"web","workload":{"replicas":3}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := DecodeWorkStatus(data)
		if err == nil && st.ObservedGeneration < 0 {
			t.Fatalf("accepted negative observedGeneration %d", st.ObservedGeneration)
		}
	})
}

// FuzzDecodeResourceSummary feeds arbitrary JSON as an agent's resource
// summary, which reaches the scheduler's dynamic weighting.
func FuzzDecodeResourceSummary(f *testing.F) {
	f.Add([]byte(`{"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"},"allocated":{"cpu":"500m"},"nodes":2}`))
	f.Add([]byte(`{"allocatable":{"cpu":"1e400"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := DecodeResourceSummary(data)
		if err == nil && rs != nil && rs.Nodes < 0 {
			t.Fatalf("accepted negative node count %d", rs.Nodes)
		}
	})
}
