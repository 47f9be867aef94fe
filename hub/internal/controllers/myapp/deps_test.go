package myapp

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
)

// fakeReader serves objects by kind/namespace/name and counts Gets.
type fakeReader struct {
	objs map[string]client.Object
	gets int
}

func (r *fakeReader) key(kind string, k client.ObjectKey) string {
	return kind + "/" + k.Namespace + "/" + k.Name
}

func (r *fakeReader) Get(_ context.Context, k client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.gets++
	var kind string
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		kind = o.Kind
	case *corev1.ConfigMap:
		kind = render.KindConfigMap
	case *corev1.Secret:
		kind = render.KindSecret
	default:
		kind = render.KindServiceAccount
	}
	src, ok := r.objs[r.key(kind, k)]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: kind}, k.Name)
	}
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		o.ObjectMeta = *src.(metav1.ObjectMetaAccessor).GetObjectMeta().(*metav1.ObjectMeta)
	case *corev1.ConfigMap:
		*o = *src.(*corev1.ConfigMap).DeepCopy()
	case *corev1.Secret:
		*o = *src.(*corev1.Secret).DeepCopy()
	}
	return nil
}

func (r *fakeReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// TestHubDependenciesReadContentOnlyWhenItChanged: the hub reads a
// dependency's content once per resourceVersion the metadata cache shows,
// answers nil for a missing one (and forgets what it had), and reads again
// after a change.
func TestHubDependenciesReadContentOnlyWhenItChanged(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cfg", ResourceVersion: "5"}, Data: map[string]string{"k": "v1"}}
	meta := &fakeReader{objs: map[string]client.Object{"ConfigMap/shop/cfg": cm}}
	content := &fakeReader{objs: map[string]client.Object{"ConfigMap/shop/cfg": cm}}
	cache := &depCache{}
	src := &hubDependencies{ctx: t.Context(), metadata: meta, content: content, cache: cache, namespace: "shop"}

	for i := 0; i < 3; i++ {
		got, err := src.Dependency(render.KindConfigMap, "cfg")
		if err != nil || got == nil || got.(*corev1.ConfigMap).Data["k"] != "v1" {
			t.Fatalf("read %d: %v, %v", i, got, err)
		}
	}
	if content.gets != 1 {
		t.Errorf("content read %d times for one resourceVersion, want 1", content.gets)
	}

	changed := cm.DeepCopy()
	changed.ResourceVersion, changed.Data["k"] = "6", "v2"
	meta.objs["ConfigMap/shop/cfg"], content.objs["ConfigMap/shop/cfg"] = changed, changed
	got, err := src.Dependency(render.KindConfigMap, "cfg")
	if err != nil || got.(*corev1.ConfigMap).Data["k"] != "v2" || content.gets != 2 {
		t.Errorf("after a change: %v (%v), %d content reads, want v2 and 2 reads", got, err, content.gets)
	}

	delete(meta.objs, "ConfigMap/shop/cfg")
	if got, err := src.Dependency(render.KindConfigMap, "cfg"); err != nil || got != nil {
		t.Errorf("a deleted ConfigMap: %v, %v; want nil, nil", got, err)
	}
	if cache.get(depKey{kind: render.KindConfigMap, NamespacedName: client.ObjectKey{Namespace: "shop", Name: "cfg"}}) != nil {
		t.Errorf("the deleted ConfigMap is still cached")
	}
	// Another namespace's object of the same name is never read.
	other := &fakeReader{objs: map[string]client.Object{"Secret/other/db": &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db", ResourceVersion: "1"}}}}
	src = &hubDependencies{ctx: t.Context(), metadata: other, content: other, cache: cache, namespace: "shop"}
	if got, err := src.Dependency(render.KindSecret, "db"); err != nil || got != nil {
		t.Errorf("Secret db of namespace other, asked for from shop: %v, %v; want nil", got, err)
	}
}

// TestDependencyKeys: the index names what the pods use in the template,
// in the first version's env, and what override patches add, once each.
func TestDependencyKeys(t *testing.T) {
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: flotillav1.MyAppSpec{
		Image: "nginx:1.27",
		Template: &flotillav1.PodTemplate{Spec: &corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}},
			Volumes:    []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}},
		}},
		Overrides: []flotillav1.ClusterOverride{{Name: "eu", Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchAdd,
			Path:  "/spec/template/spec/imagePullSecrets",
			Value: &apiextensionsv1.JSON{Raw: []byte(`[{"name":"eu-registry"}]`)}}}}},
	}}
	got := dependencyKeys(app)
	want := []string{"ConfigMap/cfg", "Secret/eu-registry"}
	if !slices.Equal(got, want) {
		t.Errorf("dependencyKeys = %v, want %v", got, want)
	}

	legacy := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "old"}, Spec: flotillav1.MyAppSpec{
		Image: "nginx:1.27",
		Template: &flotillav1.PodTemplate{Env: []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "p"}}}}},
	}}
	if got := dependencyKeys(legacy); !slices.Equal(got, []string{"Secret/db"}) {
		t.Errorf("dependencyKeys of the short form = %v, want [Secret/db]", got)
	}
	if got := dependencyKeys(&corev1.ConfigMap{}); got != nil {
		t.Errorf("dependencyKeys of a non-MyApp = %v", got)
	}
}
