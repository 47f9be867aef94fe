package myapp

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/rollout"
)

// +kubebuilder:rbac:groups="",resources=configmaps;secrets;serviceaccounts,verbs=get;list;watch

// dependencyKinds are the kinds a pod template can depend on, as the
// metadata-only watches see them.
var dependencyKinds = []string{render.KindConfigMap, render.KindSecret, render.KindServiceAccount}

// dependencyIndex indexes MyApps by the dependencies ("Kind/name") their
// pods name (render.AppDependencyRefs), now and at the revisions in use.
const dependencyIndex = "flotilla.dev/dependencies"

// dependencyKeys is the dependencyIndex of o, a MyApp.
func dependencyKeys(o client.Object) []string {
	app, ok := o.(*flotillav1.MyApp)
	if !ok {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(a *flotillav1.MyApp) {
		for _, ref := range render.AppDependencyRefs(a) {
			if k := ref.Kind + "/" + ref.Name; !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	add(app)
	if app.Status.Rollout != nil {
		for i := range app.Status.Rollout.Revisions {
			add(rollout.AppAt(app, &app.Status.Rollout.Revisions[i]))
		}
	}
	return out
}

// dependencyToMyApps maps a ConfigMap, Secret or ServiceAccount (metadata
// only) to the MyApps of its namespace that use it.
func (r *Reconciler) dependencyToMyApps(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var apps flotillav1.MyAppList
		if err := r.Client.List(ctx, &apps, client.InNamespace(o.GetNamespace()),
			client.MatchingFields{dependencyIndex: kind + "/" + o.GetName()}); err != nil {
			return nil
		}
		out := make([]reconcile.Request, len(apps.Items))
		for i := range apps.Items {
			out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&apps.Items[i])}
		}
		return out
	}
}

// metadataOf is an empty PartialObjectMetadata of kind (core/v1).
func metadataOf(kind string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	return m
}

// depCache keeps the last content read of each dependency, by kind,
// namespace and name, with the resourceVersion it was read at, so that a
// reconcile reads a dependency's content only when the metadata cache says
// it changed.
type depCache struct {
	mu   sync.Mutex
	objs map[depKey]client.Object
}

type depKey struct {
	kind string
	types.NamespacedName
}

// hubDependencies is the render.DependencySource of one reconcile: the
// dependencies of namespace, existence and version from the metadata
// cache, content live (through content) when the version is new.
type hubDependencies struct {
	ctx       context.Context
	metadata  client.Reader
	content   client.Reader
	cache     *depCache
	namespace string
}

var _ render.DependencySource = (*hubDependencies)(nil)

// Dependency implements render.DependencySource.
func (h *hubDependencies) Dependency(kind, name string) (client.Object, error) {
	key := depKey{kind: kind, NamespacedName: types.NamespacedName{Namespace: h.namespace, Name: name}}
	m := metadataOf(kind)
	if err := h.metadata.Get(h.ctx, key.NamespacedName, m); err != nil {
		if apierrors.IsNotFound(err) {
			h.cache.drop(key)
			return nil, nil
		}
		return nil, err
	}
	if obj := h.cache.get(key); obj != nil && obj.GetResourceVersion() == m.ResourceVersion {
		return obj, nil
	}
	var obj client.Object
	switch kind {
	case render.KindConfigMap:
		obj = &corev1.ConfigMap{}
	case render.KindSecret:
		obj = &corev1.Secret{}
	default:
		obj = &corev1.ServiceAccount{}
	}
	if err := h.content.Get(h.ctx, key.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			h.cache.drop(key)
			return nil, nil
		}
		return nil, err
	}
	h.cache.put(key, obj)
	return obj, nil
}

func (c *depCache) get(k depKey) client.Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.objs[k]
}

func (c *depCache) put(k depKey, o client.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.objs == nil {
		c.objs = map[depKey]client.Object{}
	}
	c.objs[k] = o
}

func (c *depCache) drop(k depKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.objs, k)
}
