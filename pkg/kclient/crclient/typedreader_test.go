package crclient

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

var deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

// agentCache starts a cache configured like the agent's (agent/setup):
// the core scheme, and Deployments only when they carry the
// flotilla.dev/work label.
func agentCache(t *testing.T) (cache.Cache, *runtime.Scheme) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	owned, err := labels.NewRequirement(flotillav1.LabelWork, selection.Exists, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(startEnv(t), cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Label: labels.NewSelector().Add(*owned)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Start(ctx); err != nil {
			t.Errorf("cache: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	return c, scheme
}

func newClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(startEnv(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// deployment is a Deployment of one container; labels go on the object.
func deployment(ns, name string, replicas int32, objLabels map[string]string) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: objLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/web:1.0"}}},
			},
		},
	}
}

func unstructuredDeployment() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(deploymentGVK)
	return u
}

func TestTypedReader(t *testing.T) {
	c := newClient(t)
	informers, scheme := agentCache(t)
	r := TypedReader{Cache: informers, Scheme: scheme}
	const ns = "reader"
	createNamespace(t, c, ns)
	owned := map[string]string{flotillav1.LabelWork: "reader.web", "tier": "front"}
	for _, d := range []*appsv1.Deployment{
		deployment(ns, "web", 2, owned),
		deployment(ns, "api", 1, map[string]string{flotillav1.LabelWork: "reader.api"}),
		deployment(ns, "manual", 1, map[string]string{"tier": "front"}), // not Flotilla's: not in the cache
	} {
		if err := c.Create(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	// The status as the Deployment controller would write it.
	live := &appsv1.Deployment{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, live); err != nil {
		t.Fatal(err)
	}
	live.Status = appsv1.DeploymentStatus{ObservedGeneration: live.Generation, Replicas: 2, ReadyReplicas: 1, UpdatedReplicas: 2, AvailableReplicas: 1}
	if err := c.Status().Update(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the cache seeing web's status", 10*time.Second, func() error {
		var d appsv1.Deployment
		if err := informers.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, &d); err != nil {
			return err
		}
		if d.Status.ReadyReplicas != 1 {
			return fmt.Errorf("web has %d ready replicas, want 1", d.Status.ReadyReplicas)
		}
		return nil
	})
	testutil.Eventually(t, "the cache seeing api", 10*time.Second, func() error {
		return informers.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "api"}, &appsv1.Deployment{})
	})

	t.Run("Get of an unstructured Deployment is served from the typed cache, status included", func(t *testing.T) {
		u := unstructuredDeployment()
		// Whatever the object held before is replaced.
		u.Object["status"] = map[string]any{"replicas": int64(99)}
		u.Object["leftover"] = "x"
		if err := r.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, u); err != nil {
			t.Fatal(err)
		}
		if u.GroupVersionKind() != deploymentGVK || u.GetName() != "web" || u.GetNamespace() != ns || u.GetUID() != live.UID {
			t.Errorf("got %s %s/%s uid %s", u.GroupVersionKind(), u.GetNamespace(), u.GetName(), u.GetUID())
		}
		if u.GetLabels()[flotillav1.LabelWork] != "reader.web" {
			t.Errorf("labels = %v", u.GetLabels())
		}
		if n, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); n != 2 {
			t.Errorf("spec.replicas = %d, want 2", n)
		}
		if n, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas"); n != 1 {
			t.Errorf("status.readyReplicas = %d, want 1", n)
		}
		if n, _, _ := unstructured.NestedInt64(u.Object, "status", "replicas"); n != 2 {
			t.Errorf("status.replicas = %d, want 2 (not the 99 the object held before)", n)
		}
		if _, ok := u.Object["leftover"]; ok {
			t.Error("a field the object held before the Get survived it")
		}
	})

	t.Run("Get of a Deployment outside the cache's selector is NotFound", func(t *testing.T) {
		err := r.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "manual"}, unstructuredDeployment())
		if !apierrors.IsNotFound(err) {
			t.Errorf("error = %v, want NotFound", err)
		}
	})

	for _, kind := range []string{"DeploymentList", "Deployment"} {
		t.Run("List of unstructured Deployments as kind "+kind, func(t *testing.T) {
			ul := &unstructured.UnstructuredList{}
			ul.SetGroupVersionKind(deploymentGVK.GroupVersion().WithKind(kind))
			if err := r.List(t.Context(), ul, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range ul.Items {
				got = append(got, it.GetName())
				if it.GroupVersionKind() != deploymentGVK {
					t.Errorf("item %s is a %s", it.GetName(), it.GroupVersionKind())
				}
				if _, ok := it.Object["spec"]; !ok {
					t.Errorf("item %s has no spec", it.GetName())
				}
			}
			slices.Sort(got)
			if strings.Join(got, ",") != "api,web" {
				t.Errorf("listed %v, want [api web]: only the labelled Deployments", got)
			}
		})
	}

	t.Run("List passes its options on", func(t *testing.T) {
		ul := &unstructured.UnstructuredList{}
		ul.SetGroupVersionKind(deploymentGVK.GroupVersion().WithKind("DeploymentList"))
		if err := r.List(t.Context(), ul, client.InNamespace(ns), client.MatchingLabels{"tier": "front"}); err != nil {
			t.Fatal(err)
		}
		if len(ul.Items) != 1 || ul.Items[0].GetName() != "web" {
			t.Errorf("listed %d items, want web alone", len(ul.Items))
		}
		ul = &unstructured.UnstructuredList{}
		ul.SetGroupVersionKind(deploymentGVK.GroupVersion().WithKind("DeploymentList"))
		if err := r.List(t.Context(), ul, client.InNamespace("elsewhere")); err != nil || len(ul.Items) != 0 {
			t.Errorf("listing another namespace: %d items, %v", len(ul.Items), err)
		}
	})

	t.Run("typed objects pass through", func(t *testing.T) {
		var d appsv1.Deployment
		if err := r.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, &d); err != nil || d.Status.ReadyReplicas != 1 {
			t.Errorf("typed Get: %v, readyReplicas %d", err, d.Status.ReadyReplicas)
		}
		var l appsv1.DeploymentList
		if err := r.List(t.Context(), &l, client.InNamespace(ns)); err != nil || len(l.Items) != 2 {
			t.Errorf("typed List: %v, %d items", err, len(l.Items))
		}
	})

	t.Run("a kind the scheme does not know is an error, not a live read", func(t *testing.T) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(flotillav1.GroupVersion.WithKind("Work"))
		if err := r.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web"}, u); err == nil || !strings.Contains(err.Error(), "no typed cache for") {
			t.Errorf("Get error = %v", err)
		}
		ul := &unstructured.UnstructuredList{}
		ul.SetGroupVersionKind(flotillav1.GroupVersion.WithKind("WorkList"))
		if err := r.List(t.Context(), ul); err == nil || !strings.Contains(err.Error(), "no typed cache for") {
			t.Errorf("List error = %v", err)
		}
	})
}
