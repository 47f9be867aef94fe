package myapp

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/rollout"
)

// TestAppAtTakesReplicasFromTheCurrentSpec: a cluster rendered at an old
// revision runs its image and env with today's replicas.
func TestAppAtTakesReplicasFromTheCurrentSpec(t *testing.T) {
	old := app(func(a *flotillav1.MyApp) {
		a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"a"}},
			Env: []corev1.EnvVar{{Name: "R", Value: "old"}}, Replicas: ptr.To[int32](1)}}
	})
	rt := rollout.Revision(&old.Spec)
	now := app(func(a *flotillav1.MyApp) {
		a.Spec.Image = "registry.example.com/team/web:2.0"
		a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"a"}},
			Env: []corev1.EnvVar{{Name: "R", Value: "new"}}, Replicas: ptr.To[int32](4)}}
	})
	at := rollout.AppAt(now, &rt)
	if at.Spec.Image != old.Spec.Image {
		t.Errorf("image %s, want %s", at.Spec.Image, old.Spec.Image)
	}
	w, replicas, err := renderWork(at, "a")
	if err != nil {
		t.Fatal(err)
	}
	if replicas != 4 {
		t.Errorf("replicas %d, want the current override's 4", replicas)
	}
	if !strings.Contains(string(w), `"value":"old"`) {
		t.Errorf("the old revision's env is missing: %s", w)
	}
}

func renderWork(a *flotillav1.MyApp, cluster string) ([]byte, int32, error) {
	w, n, err := render.Work(a, cluster, readyMember(cluster), 2, "", nil)
	if err != nil {
		return nil, 0, err
	}
	return w.Spec.Manifests[0].Raw, n, nil
}
