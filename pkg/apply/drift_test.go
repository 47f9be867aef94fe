package apply

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// trackedApplier is an Applier that only remembers: enough for NeedsApply.
func trackedApplier() *Applier {
	return &Applier{tracker: tracker{works: map[string]appliedWork{}}}
}

// ownedMeta is the metadata of an object applied for Work shop.web.
func ownedMeta(uid string, generation int64, rv string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: "web", Namespace: "shop", UID: types.UID(uid), Generation: generation, ResourceVersion: rv,
		Labels:      map[string]string{v1alpha1.LabelWork: "shop.web"},
		Annotations: map[string]string{v1alpha1.AnnotationWork: "shop.web"},
	}
}

// TestNeedsApply shows, case by case, when NeedsApply asks for an apply
// after a recorded one: a Deployment "d1" at generation 3 and a ConfigMap
// "c1" (no generation) at resourceVersion 10, for Work generation 5.
func TestNeedsApply(t *testing.T) {
	deploy := func(uid string, gen int64, mutate ...func(*metav1.ObjectMeta)) client.Object {
		m := ownedMeta(uid, gen, "99")
		for _, f := range mutate {
			f(&m)
		}
		return &appsv1.Deployment{ObjectMeta: m}
	}
	configMap := func(uid, rv string) client.Object {
		m := ownedMeta(uid, 0, rv)
		return &corev1.ConfigMap{ObjectMeta: m}
	}
	work := func(gen int64, uid string) *v1alpha1.Work {
		return &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{Name: "shop.web", Generation: gen, UID: types.UID(uid)}}
	}
	applied := func(a *Applier) {
		a.tracker.record(work(5, "w1"), []Result{
			{Reason: v1alpha1.ReasonApplied, Object: asUnstructured(t, deploy("d1", 3))},
			{Reason: v1alpha1.ReasonApplied, Object: asUnstructured(t, configMap("c1", "10"))},
		})
	}

	cases := []struct {
		name   string
		record bool
		work   *v1alpha1.Work
		live   []kclient.Object
		want   bool
	}{
		{"nothing recorded: the Work was never applied here", false, work(5, "w1"), nil, true},
		{"everything as applied, the Deployment's resourceVersion moved by status updates", true, work(5, "w1"),
			[]kclient.Object{deploy("d1", 3, func(m *metav1.ObjectMeta) { m.ResourceVersion = "150" }), configMap("c1", "10")}, false},
		{"objects of other Works in live are ignored", true, work(5, "w1"),
			[]kclient.Object{deploy("d1", 3), configMap("c1", "10"), deploy("other", 1)}, false},
		{"a new Work generation", true, work(6, "w1"), []kclient.Object{deploy("d1", 3), configMap("c1", "10")}, true},
		{"the Work was deleted and created again (same generation, another UID)", true, work(5, "w2"),
			[]kclient.Object{deploy("d1", 3), configMap("c1", "10")}, true},
		{"a hand edit of the Deployment's spec moved its generation", true, work(5, "w1"),
			[]kclient.Object{deploy("d1", 4), configMap("c1", "10")}, true},
		{"any write to a kind without a generation", true, work(5, "w1"),
			[]kclient.Object{deploy("d1", 3), configMap("c1", "11")}, true},
		{"an applied object is missing from live", true, work(5, "w1"), []kclient.Object{deploy("d1", 3)}, true},
		{"an applied object was replaced (another UID)", true, work(5, "w1"),
			[]kclient.Object{deploy("d1-new", 1), configMap("c1", "10")}, true},
		{"an applied object lost Flotilla's label", true, work(5, "w1"),
			[]kclient.Object{deploy("d1", 3, func(m *metav1.ObjectMeta) { m.Labels = nil }), configMap("c1", "10")}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := trackedApplier()
			if tc.record {
				applied(a)
			}
			if got := a.NeedsApply(tc.work, tc.live); got != tc.want {
				t.Errorf("NeedsApply = %v, want %v", got, tc.want)
			}
		})
	}
}

func asUnstructured(t *testing.T, obj client.Object) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetUID(obj.GetUID())
	u.SetGeneration(obj.GetGeneration())
	u.SetResourceVersion(obj.GetResourceVersion())
	return u
}
