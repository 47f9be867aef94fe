package informer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/kclient/informer"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

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

var namespaces atomic.Int32

func namespace(t *testing.T, c kclient.Client) string {
	t.Helper()
	name := fmt.Sprintf("informer-%d-%d", time.Now().UnixNano()%100000, namespaces.Add(1))
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, "test"); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

func deployment(ns, name string, lbls map[string]string) *appsv1.Deployment {
	sel := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
			},
		},
	}
}

// events records the keys OnChange saw, in order.
type events struct {
	mu   sync.Mutex
	keys []string
}

func (e *events) add(o kclient.Object) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.keys = append(e.keys, o.GetNamespace()+"/"+o.GetName()+"@"+o.GetResourceVersion())
}

func (e *events) snapshot() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.keys)
}

func (e *events) count(prefix string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, k := range e.keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// start builds a cache of owned Deployments (label owned=yes) and every
// ConfigMap, runs it until the test ends and waits for its sync.
func start(t *testing.T, seen *events) *informer.Cache {
	t.Helper()
	owned := labels.SelectorFromSet(labels.Set{"owned": "yes"})
	c, err := informer.New(sharedEnv.Config(t), scheme(t), []informer.Kind{
		{Object: &appsv1.Deployment{}, Labels: owned},
		{Object: &corev1.ConfigMap{}},
	})
	if err != nil {
		t.Fatalf("informer.New: %v", err)
	}
	if seen != nil {
		if err := c.OnChange(&appsv1.Deployment{}, seen.add); err != nil {
			t.Fatalf("OnChange: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the cache did not stop within 30 s of its context ending")
		}
	})
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := c.WaitForSync(sctx); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	return c
}

func TestReadsOnlyWhatTheSelectorHolds(t *testing.T) {
	_, w, ns := writer(t)
	ctx := t.Context()
	for _, d := range []*appsv1.Deployment{
		deployment(ns, "a", map[string]string{"owned": "yes", "tier": "web"}),
		deployment(ns, "b", map[string]string{"owned": "yes", "tier": "db"}),
		deployment(ns, "other", map[string]string{"owned": "no"}),
	} {
		if err := w.Create(ctx, d, "test"); err != nil {
			t.Fatalf("creating %s: %v", d.Name, err)
		}
	}
	seen := &events{}
	c := start(t, seen)
	key := func(name string) kclient.Key { return kclient.Key{Namespace: ns, Name: name} }

	testutil.Eventually(t, "the cache to hold Deployments a and b", 15*time.Second, func() error {
		for _, n := range []string{"a", "b"} {
			if err := c.Get(ctx, key(n), &appsv1.Deployment{}); err != nil {
				return err
			}
		}
		return nil
	})

	// Typed: a deep copy, with its kind.
	var a appsv1.Deployment
	if err := c.Get(ctx, key("a"), &a); err != nil {
		t.Fatalf("Get a: %v", err)
	}
	if a.Kind != "Deployment" || a.APIVersion != "apps/v1" || a.Labels["tier"] != "web" || a.UID == "" {
		t.Errorf("Get a = kind %q apiVersion %q labels %v uid %q; want a Deployment of apps/v1 labelled tier=web with a UID", a.Kind, a.APIVersion, a.Labels, a.UID)
	}
	a.Labels["tier"] = "changed by the reader"
	var again appsv1.Deployment
	if err := c.Get(ctx, key("a"), &again); err != nil {
		t.Fatal(err)
	}
	if again.Labels["tier"] != "web" {
		t.Errorf("changing a read object changed the cache: tier = %q", again.Labels["tier"])
	}

	// Unstructured, converted from the typed copy.
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	if err := c.Get(ctx, key("b"), u); err != nil {
		t.Fatalf("unstructured Get b: %v", err)
	}
	if img, _, _ := unstructured.NestedString(u.Object, "spec", "template", "spec", "containers", "0", "image"); u.GetLabels()["tier"] != "db" || u.GetKind() != "Deployment" {
		t.Errorf("unstructured b = kind %q labels %v (image %q); want a Deployment labelled tier=db", u.GetKind(), u.GetLabels(), img)
	}
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 || containers[0].(map[string]any)["image"] != "busybox:1" {
		t.Errorf("unstructured b's containers = %v; want one with image busybox:1", containers)
	}

	// Not selected: NotFound, both ways; then selected by a relabel.
	if err := c.Get(ctx, key("other"), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get of an unselected Deployment = %v; want NotFound", err)
	}
	if err := c.Get(ctx, key("missing"), u); !apierrors.IsNotFound(err) {
		t.Errorf("unstructured Get of a missing Deployment = %v; want NotFound", err)
	}
	if err := w.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}}, types.MergePatchType, []byte(`{"metadata":{"labels":{"owned":"yes"}}}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the relabelled Deployment to enter the cache", 15*time.Second, func() error {
		return c.Get(ctx, key("other"), &appsv1.Deployment{})
	})

	// Lists: labels, namespace, limit, order; typed and unstructured.
	var web appsv1.DeploymentList
	if err := c.List(ctx, &web, kclient.MatchingLabels(ns, map[string]string{"tier": "web"})); err != nil {
		t.Fatal(err)
	}
	if len(web.Items) != 1 || web.Items[0].Name != "a" {
		t.Errorf("List tier=web = %v; want [a]", names(web.Items))
	}
	var all appsv1.DeploymentList
	if err := c.List(ctx, &all, kclient.ListOptions{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if got := names(all.Items); !slices.Equal(got, []string{"a", "b", "other"}) {
		t.Errorf("List in %s = %v; want [a b other], sorted", ns, got)
	}
	var one appsv1.DeploymentList
	if err := c.List(ctx, &one, kclient.ListOptions{Namespace: ns, Limit: 1}); err != nil || len(one.Items) != 1 {
		t.Errorf("List with Limit 1 = %d items, %v; want 1", len(one.Items), err)
	}
	var elsewhere appsv1.DeploymentList
	if err := c.List(ctx, &elsewhere, kclient.ListOptions{Namespace: ns + "-none"}); err != nil || len(elsewhere.Items) != 0 {
		t.Errorf("List in another namespace = %v, %v; want none", names(elsewhere.Items), err)
	}
	for _, kind := range []string{"DeploymentList", "Deployment"} {
		ul := &unstructured.UnstructuredList{}
		ul.SetAPIVersion("apps/v1")
		ul.SetKind(kind)
		if err := c.List(ctx, ul, kclient.MatchingLabels(ns, map[string]string{"owned": "yes"})); err != nil {
			t.Fatalf("unstructured List (kind %s): %v", kind, err)
		}
		if len(ul.Items) != 3 || ul.Items[0].GetKind() != "Deployment" || ul.Items[0].GetName() != "a" {
			t.Errorf("unstructured List (kind %s) = %d items, first %s %s; want 3, the first Deployment a", kind, len(ul.Items), ul.Items[0].GetKind(), ul.Items[0].GetName())
		}
	}

	// Refused: a kind not held, a field selector, a continue token.
	var nf *informer.NotCachedError
	if err := c.Get(ctx, key("x"), &corev1.Secret{}); !errors.As(err, &nf) || nf.Kind.Kind != "Secret" {
		t.Errorf("Get of a Secret = %v; want a NotCachedError naming Secret", err)
	}
	if err := c.List(ctx, &appsv1.DeploymentList{}, kclient.ListOptions{Fields: fields.OneTermEqualSelector("metadata.name", "a")}); err == nil {
		t.Error("List with a field selector succeeded; want it refused")
	}
	if err := c.List(ctx, &appsv1.DeploymentList{}, kclient.ListOptions{Continue: "x"}); err == nil {
		t.Error("List with a continue token succeeded; want it refused")
	}

	// OnChange saw a and b added; an update and a delete reach it too.
	testutil.Eventually(t, "OnChange to see Deployments a and b added", 15*time.Second, func() error {
		if seen.count(ns+"/a@") == 0 || seen.count(ns+"/b@") == 0 {
			return fmt.Errorf("OnChange saw %v; want a and b", seen.snapshot())
		}
		return nil
	})
	before := seen.count(ns + "/b@")
	if err := w.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"}}, types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "OnChange to see Deployment b's update (old and new)", 15*time.Second, func() error {
		if n := seen.count(ns + "/b@"); n < before+2 {
			return fmt.Errorf("%d events of b, want at least %d", n, before+2)
		}
		return nil
	})
	if err := w.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}, kclient.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "Deployment a to leave the cache", 15*time.Second, func() error {
		if err := c.Get(ctx, key("a"), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Get a = %v, want NotFound", err)
		}
		return nil
	})
	// The store is updated before handlers are told, so the delete may reach
	// OnChange a moment after Get reports NotFound.
	testutil.Eventually(t, "OnChange to see Deployment a's delete", 15*time.Second, func() error {
		if n := seen.count(ns + "/a@"); n < 2 {
			return fmt.Errorf("OnChange saw a %d times; want its add and its delete", n)
		}
		return nil
	})
}

// writer returns the shared apiserver's config, a direct client on it and
// a namespace of the test's own.
func writer(t *testing.T) (*rest.Config, *direct.Client, string) {
	t.Helper()
	cfg := sharedEnv.Config(t)
	w, err := direct.New(cfg, scheme(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, w, namespace(t, w)
}

// run builds a cache of kinds, runs it until the test ends and waits for
// its sync; ctx is the context it runs in.
func run(t *testing.T, cfg *rest.Config, kinds []informer.Kind) (c *informer.Cache, ctx context.Context) {
	t.Helper()
	c, err := informer.New(cfg, scheme(t), kinds)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := c.WaitForSync(sctx); err != nil {
		t.Fatal(err)
	}
	return c, ctx
}

func TestClusterScopedAndUnselectedKinds(t *testing.T) {
	cfg, w, ns := writer(t)
	ctx := t.Context()
	if err := w.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, Data: map[string]string{"k": "v"}}, "test"); err != nil {
		t.Fatal(err)
	}
	c, cctx := run(t, cfg, []informer.Kind{{Object: &corev1.ConfigMap{}}, {Object: &corev1.Namespace{}}})
	testutil.Eventually(t, "the ConfigMap and its namespace in the cache", 15*time.Second, func() error {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "plain"}, &cm); err != nil {
			return err
		}
		if cm.Data["k"] != "v" {
			return fmt.Errorf("data %v", cm.Data)
		}
		return c.Get(ctx, kclient.Key{Name: ns}, &corev1.Namespace{})
	})
	if err := c.Start(cctx); err == nil {
		t.Error("a second Start succeeded; want it refused")
	}
}

func TestNewRefusesUnknownAndRepeatedKinds(t *testing.T) {
	cfg := sharedEnv.Config(t)
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if _, err := informer.New(cfg, s, []informer.Kind{{Object: &appsv1.Deployment{}}}); err == nil {
		t.Error("New with a kind the scheme does not know succeeded")
	}
	if _, err := informer.New(cfg, s, []informer.Kind{{Object: &corev1.Pod{}}, {Object: &corev1.Pod{}}}); err == nil {
		t.Error("New with a kind given twice succeeded")
	}
}

func TestWaitForSyncNamesWhatDidNotSync(t *testing.T) {
	cfg := sharedEnv.Config(t)
	// A kind the apiserver does not serve never lists.
	s := scheme(t)
	c, err := informer.New(cfg, s, []informer.Kind{{Object: &corev1.ConfigMap{}}, {Object: &appsv1.Deployment{}, Resource: "nosuchresources"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = c.Start(ctx) }()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	err = c.WaitForSync(sctx)
	if err == nil || !strings.Contains(err.Error(), "Deployment") || strings.Contains(err.Error(), "ConfigMap") {
		t.Errorf("WaitForSync = %v; want an error naming Deployment only", err)
	}
}

func names(ds []appsv1.Deployment) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

// TestDropManagedFields: a kind with DropManagedFields is held without
// its managedFields, typed and unstructured; another kind keeps them.
func TestDropManagedFields(t *testing.T) {
	cfg, w, ns := writer(t)
	ctx := t.Context()
	if err := w.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kept"}, Data: map[string]string{"k": "v"}}, "test"); err != nil {
		t.Fatal(err)
	}
	if err := w.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dropped"}, StringData: map[string]string{"k": "v"}}, "test"); err != nil {
		t.Fatal(err)
	}
	c, _ := run(t, cfg, []informer.Kind{{Object: &corev1.ConfigMap{}}, {Object: &corev1.Secret{}, DropManagedFields: true}})
	var cm corev1.ConfigMap
	var sec corev1.Secret
	testutil.Eventually(t, "the ConfigMap and the Secret in the cache", 15*time.Second, func() error {
		if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "kept"}, &cm); err != nil {
			return err
		}
		return c.Get(ctx, kclient.Key{Namespace: ns, Name: "dropped"}, &sec)
	})
	if len(cm.ManagedFields) == 0 {
		t.Error("the ConfigMap, of a kind without DropManagedFields, was held without its managedFields")
	}
	if len(sec.ManagedFields) != 0 {
		t.Errorf("the Secret, of a kind with DropManagedFields, was held with managedFields %v", sec.ManagedFields)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Secret")
	if err := c.Get(ctx, kclient.Key{Namespace: ns, Name: "dropped"}, u); err != nil || len(u.GetManagedFields()) != 0 {
		t.Errorf("the Secret read unstructured: %v, managedFields %v; want none", err, u.GetManagedFields())
	}
}
