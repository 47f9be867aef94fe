package finalizer

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

const ours = "flotilla.dev/member-cleanup"

// TestRemovePatch runs against a real apiserver: the patch computed from a
// stale copy still removes the finalizer after another write changed the
// object (no resourceVersion conflict), and refuses, changing nothing,
// when the finalizer list changed so that the entry it names is another.
func TestRemovePatch(t *testing.T) {
	ctx := context.Background()
	c, err := client.New(sharedEnv.Config(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	create := func(name string, finalizers ...string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Finalizers: finalizers}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cm := get(name)
			cm.Finalizers = nil
			_ = c.Update(ctx, cm)
			_ = c.Delete(ctx, cm)
		})
		return cm
	}

	// Another write in between: the stale patch still applies.
	stale := create("written-meanwhile", "other.example/keep", ours)
	fresh := stale.DeepCopy()
	fresh.Data = map[string]string{"k": "v"}
	if err := c.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	patch, ok, err := RemovePatch(stale, ours)
	if err != nil || !ok {
		t.Fatalf("RemovePatch: ok %v, err %v", ok, err)
	}
	if err := c.Patch(ctx, stale.DeepCopy(), patch); err != nil {
		t.Fatalf("patch after another write: %v", err)
	}
	if got := get("written-meanwhile"); !slices.Equal(got.Finalizers, []string{"other.example/keep"}) || got.Data["k"] != "v" {
		t.Errorf("after the patch: finalizers %v, data %v; want only other.example/keep and the other write kept", got.Finalizers, got.Data)
	}

	// The list changed: the entry the stale copy names is another one now.
	stale = create("list-changed", "other.example/first", ours, "other.example/last")
	fresh = stale.DeepCopy()
	fresh.Finalizers = []string{ours, "other.example/last"}
	if err := c.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	patch, _, _ = RemovePatch(stale, ours)
	err = c.Patch(ctx, stale.DeepCopy(), patch)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("patch after the list changed: err %v, want Invalid", err)
	}
	if got := get("list-changed"); !slices.Equal(got.Finalizers, []string{ours, "other.example/last"}) {
		t.Errorf("a refused patch changed the finalizers: %v", got.Finalizers)
	}

	if _, ok, _ := RemovePatch(get("list-changed"), "not.there/x"); ok {
		t.Error("RemovePatch of a finalizer the object lacks says ok")
	}
}
