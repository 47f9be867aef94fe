package direct_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// scheme knows the typed objects the tests pass: core and apps.
func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// clients returns the two kclient.Clients on the apiserver cfg reaches:
// controller-runtime's (through crclient) and direct. Every test runs
// against both, so direct is held to what pkg/apply was written against.
func clients(t *testing.T, cfg *rest.Config) map[string]kclient.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: scheme(t)})
	if err != nil {
		t.Fatalf("creating controller-runtime's client: %v", err)
	}
	d, err := direct.New(cfg, scheme(t))
	if err != nil {
		t.Fatalf("creating the direct client: %v", err)
	}
	return map[string]kclient.Client{"controller-runtime": crclient.Client(c), "direct": d}
}

var namespaces atomic.Int32

// namespace creates a namespace of its own for a test.
func namespace(t *testing.T, c kclient.Client) string {
	t.Helper()
	name := fmt.Sprintf("kclient-%d-%d", time.Now().UnixNano()%100000, namespaces.Add(1))
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, "test"); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

func configMap(ns, name string, lbls map[string]string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}, Data: data}
}

func managers(obj metav1.Object) []string {
	var out []string
	for _, m := range obj.GetManagedFields() {
		out = append(out, m.Manager)
	}
	return out
}

// TestTypedAndUnstructuredReadsAndWrites: create, get, list, update,
// patch and delete of typed and unstructured objects, the answers written
// back into the objects passed, and the apiserver's refusals (NotFound,
// Conflict) passed on as the API errors pkg/apply tests for.
func TestTypedAndUnstructuredReadsAndWrites(t *testing.T) {
	cfg := sharedEnv.Config(t)
	for name, c := range clients(t, cfg) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			ns := namespace(t, c)

			// Create, typed: the answer (UID, resourceVersion, the field
			// manager) lands in the object.
			cm := configMap(ns, "a", map[string]string{"app": "web"}, map[string]string{"k": "1"})
			if err := c.Create(ctx, cm, "flotilla-test"); err != nil {
				t.Fatalf("creating ConfigMap a: %v", err)
			}
			if cm.UID == "" || cm.ResourceVersion == "" {
				t.Fatalf("created ConfigMap a carries no UID or resourceVersion: %+v", cm.ObjectMeta)
			}
			if got := managers(cm); len(got) != 1 || got[0] != "flotilla-test" {
				t.Errorf("ConfigMap a's field managers = %v, want [flotilla-test]", got)
			}
			// Create, unstructured.
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMap")
			u.SetNamespace(ns)
			u.SetName("b")
			u.SetLabels(map[string]string{"app": "db"})
			if err := c.Create(ctx, u, "flotilla-test"); err != nil {
				t.Fatalf("creating ConfigMap b: %v", err)
			}
			if u.GetUID() == "" {
				t.Fatalf("created ConfigMap b carries no UID: %v", u.Object)
			}
			if err := c.Create(ctx, configMap(ns, "a", nil, nil), "flotilla-test"); !apierrors.IsAlreadyExists(err) {
				t.Errorf("creating ConfigMap a again: %v, want AlreadyExists", err)
			}

			// Get, typed and unstructured; a missing object is NotFound.
			got := &corev1.ConfigMap{}
			if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "a"}, got); err != nil {
				t.Fatalf("getting ConfigMap a: %v", err)
			}
			if got.UID != cm.UID || got.Data["k"] != "1" {
				t.Errorf("got ConfigMap a %s with data %v, want %s with k=1", got.UID, got.Data, cm.UID)
			}
			ug := &unstructured.Unstructured{}
			ug.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
			if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "b"}, ug); err != nil {
				t.Fatalf("getting ConfigMap b: %v", err)
			}
			if ug.GetUID() != u.GetUID() || ug.GetKind() != "ConfigMap" {
				t.Errorf("got ConfigMap b %s of kind %q, want %s, ConfigMap", ug.GetUID(), ug.GetKind(), u.GetUID())
			}
			if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "missing"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
				t.Errorf("getting a missing ConfigMap: %v, want NotFound", err)
			}

			// List: by namespace and labels, typed and unstructured, and a
			// limit.
			list := &corev1.ConfigMapList{}
			if err := c.List(ctx, list, kclient.MatchingLabels(ns, map[string]string{"app": "web"})); err != nil {
				t.Fatalf("listing app=web: %v", err)
			}
			if len(list.Items) != 1 || list.Items[0].Name != "a" {
				t.Errorf("listing app=web gave %d items, want ConfigMap a alone", len(list.Items))
			}
			ul := &unstructured.UnstructuredList{}
			ul.SetAPIVersion("v1")
			ul.SetKind("ConfigMapList")
			sel, err := labels.Parse("app in (web,db)")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.List(ctx, ul, kclient.ListOptions{Namespace: ns, Labels: sel}); err != nil {
				t.Fatalf("listing app in (web,db): %v", err)
			}
			if len(ul.Items) != 2 {
				t.Errorf("listing app in (web,db) gave %d items, want 2", len(ul.Items))
			}
			if err := c.List(ctx, ul, kclient.ListOptions{Namespace: ns, Labels: sel, Limit: 1}); err != nil {
				t.Fatalf("listing with a limit: %v", err)
			}
			if len(ul.Items) != 1 || ul.GetContinue() == "" {
				t.Fatalf("listing with limit 1 gave %d items and continue %q, want 1 and a continue token", len(ul.Items), ul.GetContinue())
			}
			next := &unstructured.UnstructuredList{}
			next.SetAPIVersion("v1")
			next.SetKind("ConfigMapList")
			if err := c.List(ctx, next, kclient.ListOptions{Namespace: ns, Labels: sel, Limit: 1, Continue: ul.GetContinue()}); err != nil {
				t.Fatalf("listing the second page: %v", err)
			}
			if len(next.Items) != 1 || next.Items[0].GetName() == ul.Items[0].GetName() || next.GetContinue() != "" {
				t.Errorf("the second page gave %d items (continue %q), want the other ConfigMap and no more pages", len(next.Items), next.GetContinue())
			}
			byName := &corev1.ConfigMapList{}
			if err := c.List(ctx, byName, kclient.ListOptions{Namespace: ns, Fields: fields.OneTermEqualSelector("metadata.name", "b")}); err != nil {
				t.Fatalf("listing by field: %v", err)
			}
			if len(byName.Items) != 1 || byName.Items[0].Name != "b" {
				t.Errorf("listing metadata.name=b gave %d items, want ConfigMap b alone", len(byName.Items))
			}

			// Update: the current version is written; a stale one is a
			// Conflict and changes nothing.
			stale := cm.DeepCopy()
			cm.Data["k"] = "2"
			if err := c.Update(ctx, cm, "flotilla-test"); err != nil {
				t.Fatalf("updating ConfigMap a: %v", err)
			}
			if cm.ResourceVersion == stale.ResourceVersion {
				t.Error("the update's answer did not reach the object: same resourceVersion")
			}
			stale.Data["k"] = "stale"
			if err := c.Update(ctx, stale, "flotilla-test"); !apierrors.IsConflict(err) {
				t.Errorf("updating from a stale version: %v, want Conflict", err)
			}

			// Patch: a merge patch, the answer in the object.
			if err := c.Patch(ctx, ug, types.MergePatchType, []byte(`{"data":{"patched":"yes"}}`)); err != nil {
				t.Fatalf("patching ConfigMap b: %v", err)
			}
			if v, _, _ := unstructured.NestedString(ug.Object, "data", "patched"); v != "yes" {
				t.Errorf("patched ConfigMap b's answer holds data %v", ug.Object["data"])
			}

			// Delete: a UID precondition that does not hold is a Conflict
			// and deletes nothing; the right one deletes.
			wrong := types.UID("00000000-0000-0000-0000-000000000000")
			err = c.Delete(ctx, cm, kclient.DeleteOptions{Preconditions: metav1.Preconditions{UID: &wrong}})
			if !apierrors.IsConflict(err) {
				t.Errorf("deleting ConfigMap a with another UID: %v, want Conflict", err)
			}
			if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "a"}, &corev1.ConfigMap{}); err != nil {
				t.Fatalf("ConfigMap a after a refused delete: %v", err)
			}
			err = c.Delete(ctx, cm, kclient.DeleteOptions{
				Preconditions: metav1.Preconditions{UID: &cm.UID},
				Propagation:   metav1.DeletePropagationBackground,
			})
			if err != nil {
				t.Fatalf("deleting ConfigMap a: %v", err)
			}
			if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "a"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
				t.Errorf("ConfigMap a after its delete: %v, want NotFound", err)
			}
			if err := c.Delete(ctx, u, kclient.DeleteOptions{}); err != nil {
				t.Errorf("deleting ConfigMap b without options: %v", err)
			}
		})
	}
}

func deployment(ns, image string, replicas int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata":   map[string]any{"name": "web", "namespace": ns},
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": image}}},
			},
		},
	}}
	return u
}

// TestForceApply: a server-side apply creates the object, answers with
// it, and takes back a field another manager changed; the apply of a
// cluster-scoped kind needs no namespace, and a namespaced kind without
// one is refused before any request.
func TestForceApply(t *testing.T) {
	cfg := sharedEnv.Config(t)
	for name, c := range clients(t, cfg) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			ns := namespace(t, c)
			d := deployment(ns, "web:1", 2)
			if err := c.ForceApply(ctx, d, "flotilla-agent"); err != nil {
				t.Fatalf("applying the Deployment: %v", err)
			}
			if d.GetUID() == "" || d.GetGeneration() != 1 {
				t.Fatalf("the apply's answer: UID %q generation %d, want a UID and generation 1", d.GetUID(), d.GetGeneration())
			}
			// Someone else scales it.
			typed := &appsv1.Deployment{}
			if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "web"}, typed); err != nil {
				t.Fatal(err)
			}
			typed.Spec.Replicas = new(int32(5))
			if err := c.Update(ctx, typed, "kubectl"); err != nil {
				t.Fatalf("scaling by hand: %v", err)
			}
			// Flotilla's apply takes the field back, forcing the conflict.
			d = deployment(ns, "web:1", 2)
			if err := c.ForceApply(ctx, d, "flotilla-agent"); err != nil {
				t.Fatalf("applying again over the other manager's field: %v", err)
			}
			if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 2 {
				t.Errorf("replicas after the forced apply = %d, want 2", r)
			}
			if got := managers(d); len(got) == 0 || got[0] != "flotilla-agent" {
				t.Errorf("field managers after the forced apply: %v", got)
			}

			// A cluster-scoped kind.
			n := &unstructured.Unstructured{}
			n.SetAPIVersion("v1")
			n.SetKind("Namespace")
			n.SetName(ns + "-applied")
			if err := c.ForceApply(ctx, n, "flotilla-agent"); err != nil {
				t.Fatalf("applying a Namespace: %v", err)
			}
			if n.GetUID() == "" {
				t.Error("the Namespace apply's answer carries no UID")
			}
		})
	}
	// Only direct checks the namespace itself; controller-runtime's
	// client sends the request and the apiserver refuses it.
	d, err := direct.New(cfg, scheme(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ForceApply(t.Context(), deployment("", "web:1", 1), "flotilla-agent"); err == nil {
		t.Error("applying a Deployment without a namespace: no error")
	}
	if err := d.Get(t.Context(), kclient.Key{Name: "x"}, &corev1.Service{}); err == nil {
		t.Error("reading a typed object of a type the scheme does not know: no error")
	}
}

// TestRESTMapping: kinds map to their resource and scope; a kind the
// cluster does not serve is a NoKindMatchError; and a kind installed after
// the mapper missed it (a CRD) is found once it is served.
func TestRESTMapping(t *testing.T) {
	cfg := sharedEnv.Config(t)
	cs := clients(t, cfg)
	for name, c := range cs {
		t.Run(name, func(t *testing.T) {
			m, err := c.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "v1")
			if err != nil {
				t.Fatalf("mapping apps/v1 Deployment: %v", err)
			}
			if m.Resource.Resource != "deployments" || m.Scope.Name() != meta.RESTScopeNameNamespace {
				t.Errorf("apps/v1 Deployment maps to %s (%s), want deployments, namespaced", m.Resource, m.Scope.Name())
			}
			m, err = c.RESTMapping(schema.GroupKind{Kind: "Namespace"}, "v1")
			if err != nil {
				t.Fatalf("mapping v1 Namespace: %v", err)
			}
			if m.Resource.Resource != "namespaces" || m.Scope.Name() != meta.RESTScopeNameRoot {
				t.Errorf("v1 Namespace maps to %s (%s), want namespaces, cluster-scoped", m.Resource, m.Scope.Name())
			}
			m, err = c.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"})
			if err != nil || m.Resource.Version != "v1" {
				t.Errorf("mapping Deployment in apps' preferred version: %v, %v", m, err)
			}
			for _, gvk := range []schema.GroupVersionKind{
				{Group: "apps", Version: "v1", Kind: "NoSuchKind"},
				{Group: "apps", Version: "v9", Kind: "Deployment"},
				{Group: "nosuch.example.com", Version: "v1", Kind: "Thing"},
			} {
				_, err := c.RESTMapping(gvk.GroupKind(), gvk.Version)
				if !meta.IsNoMatchError(err) {
					t.Errorf("mapping %s: %v, want a NoKindMatchError", gvk, err)
				}
			}
		})
	}

	// Both miss Flotilla's Work before its CRD is installed ...
	work := schema.GroupKind{Group: "flotilla.dev", Kind: "Work"}
	for name, c := range cs {
		if _, err := c.RESTMapping(work, "v1alpha1"); !meta.IsNoMatchError(err) {
			t.Fatalf("%s: mapping Work before its CRD: %v, want a NoKindMatchError", name, err)
		}
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing the CRDs: %v", err)
	}
	// ... and find it once it is served (within the mapper's refetch
	// interval, a second).
	for name, c := range cs {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		var last error
		for {
			m, err := c.RESTMapping(work, "v1alpha1")
			if err == nil {
				if m.Resource.Resource != "works" || m.Scope.Name() != meta.RESTScopeNameNamespace {
					t.Errorf("%s: Work maps to %s (%s), want works, namespaced", name, m.Resource, m.Scope.Name())
				}
				break
			}
			last = err
			if ctx.Err() != nil {
				t.Errorf("%s: Work's mapping not found within 15 s of its CRD being served: %v", name, errors.Join(last, ctx.Err()))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
	}
}
