// Package informer is a cache of a fixed set of typed kinds, each held by
// one of client-go's shared informers and selected by labels, read through
// kclient.Reader. It is the agent's cache without controller-runtime: its
// REST clients know only the caller's scheme (a handful of API groups), so
// nothing here links client-go's scheme of every group or its typed
// clientsets, whose package init keeps their code resident in every
// process that imports them.
//
// What it holds and how it answers, as controller-runtime's cache did for
// the agent:
//   - typed objects (one copy of each; an unstructured copy would be a
//     second informer and could lag behind the typed one's events);
//   - reads return deep copies, typed or converted to unstructured, with
//     their kind set;
//   - an object the informer does not hold is NotFound, and a kind it was
//     not built for is an error naming the kind (there is no informer
//     started on demand: every kind the agent reads is declared up front).
//
// Lists and watches ask for protobuf, the apiserver's cheapest encoding
// for built-in kinds, and accept JSON.
package informer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
)

// Kind is one kind the cache holds.
type Kind struct {
	// Object is an empty typed object of the kind (e.g. &appsv1.Deployment{});
	// the cache's scheme must know it.
	Object kclient.Object
	// Labels selects the objects held (nil: all of them, in every
	// namespace).
	Labels labels.Selector
	// Resource is the kind's resource; empty guesses it from the kind
	// (Deployment: deployments), which is right for every kind the agent
	// holds.
	Resource string
	// DropManagedFields holds the objects without their managedFields,
	// often the largest part of a small object; a reader that needs them
	// reads the object live.
	DropManagedFields bool
}

// Cache holds the objects of its kinds. Build it with New, register
// handlers with OnChange, run it with Start and wait with WaitForSync
// before trusting its reads.
type Cache struct {
	scheme *runtime.Scheme
	kinds  map[schema.GroupVersionKind]*held

	mu      sync.Mutex
	started bool
}

type held struct {
	gvk      schema.GroupVersionKind
	resource schema.GroupResource
	typ      reflect.Type
	informer cache.SharedIndexInformer
}

var _ kclient.Reader = (*Cache)(nil)

// New builds a cache of kinds on the apiserver cfg reaches. scheme must
// know every kind (and its list).
func New(cfg *rest.Config, scheme *runtime.Scheme, kinds []Kind) (*Cache, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("informer: building the HTTP client: %w", err)
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	clients := map[schema.GroupVersion]rest.Interface{}
	c := &Cache{scheme: scheme, kinds: map[schema.GroupVersionKind]*held{}}
	for _, k := range kinds {
		gvk, err := kindOf(scheme, k.Object)
		if err != nil {
			return nil, err
		}
		if _, dup := c.kinds[gvk]; dup {
			return nil, fmt.Errorf("informer: kind %s given twice", gvk)
		}
		rc := clients[gvk.GroupVersion()]
		if rc == nil {
			if rc, err = direct.TypedRESTClient(cfg, httpClient, codecs, gvk.GroupVersion()); err != nil {
				return nil, fmt.Errorf("informer: %w", err)
			}
			clients[gvk.GroupVersion()] = rc
		}
		resource := k.Resource
		if resource == "" {
			plural, _ := meta.UnsafeGuessKindToResource(gvk)
			resource = plural.Resource
		}
		selector := ""
		if k.Labels != nil {
			selector = k.Labels.String()
		}
		lw := cache.NewFilteredListWatchFromClient(rc, resource, metav1.NamespaceAll, func(o *metav1.ListOptions) {
			o.LabelSelector = selector
		})
		inf := cache.NewSharedIndexInformerWithOptions(lw, k.Object, cache.SharedIndexInformerOptions{
			Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			ObjectDescription: gvk.Kind,
		})
		if k.DropManagedFields {
			if err := inf.SetTransform(dropManagedFields); err != nil {
				return nil, fmt.Errorf("informer: %s: %w", gvk.Kind, err)
			}
		}
		c.kinds[gvk] = &held{
			gvk:      gvk,
			resource: schema.GroupResource{Group: gvk.Group, Resource: resource},
			typ:      reflect.TypeOf(k.Object).Elem(),
			informer: inf,
		}
	}
	return c, nil
}

// dropManagedFields is the transform of a Kind with DropManagedFields: it
// runs on each object as it arrives, before the store holds it.
func dropManagedFields(o any) (any, error) {
	if m, ok := o.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return o, nil
}

// kindOf is obj's kind by scheme.
func kindOf(scheme *runtime.Scheme, obj runtime.Object) (schema.GroupVersionKind, error) {
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("informer: %w", err)
	}
	return gvks[0], nil
}

// OnChange calls fn with every object of obj's kind that is added,
// updated (the old and the new object) or deleted (its last known
// state). fn must not block: it runs on the informer's delivery goroutine.
func (c *Cache) OnChange(obj kclient.Object, fn func(kclient.Object)) error {
	h, err := c.heldFor(obj)
	if err != nil {
		return err
	}
	call := func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if ko, ok := o.(kclient.Object); ok {
			fn(ko)
		}
	}
	_, err = h.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: call,
		UpdateFunc: func(old, cur any) {
			call(old)
			call(cur)
		},
		DeleteFunc: call,
	})
	return err
}

// Start runs the informers until ctx ends. It may be called once.
func (c *Cache) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("informer: the cache was started already")
	}
	c.started = true
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range c.kinds {
		wg.Go(func() { h.informer.RunWithContext(ctx) })
	}
	wg.Wait()
	return nil
}

// WaitForSync waits until every informer has listed its kind once, or ctx
// ends (then it returns an error naming the kinds not synced).
func (c *Cache) WaitForSync(ctx context.Context) error {
	synced := make([]cache.InformerSynced, 0, len(c.kinds))
	for _, h := range c.kinds {
		synced = append(synced, h.informer.HasSynced)
	}
	if cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil
	}
	var pending []string
	for _, h := range c.kinds {
		if !h.informer.HasSynced() {
			pending = append(pending, h.gvk.Kind)
		}
	}
	slices.Sort(pending)
	return fmt.Errorf("informer: the caches of %s did not sync: %w", strings.Join(pending, ", "), ctx.Err())
}

// heldFor is the informer of obj's kind (typed, or unstructured with its
// kind set).
func (c *Cache) heldFor(obj runtime.Object) (*held, error) {
	var gvk schema.GroupVersionKind
	if u, ok := obj.(runtime.Unstructured); ok {
		gvk = u.GetObjectKind().GroupVersionKind()
	} else {
		var err error
		if gvk, err = kindOf(c.scheme, obj); err != nil {
			return nil, err
		}
	}
	return c.heldForKind(gvk)
}

func (c *Cache) heldForKind(gvk schema.GroupVersionKind) (*held, error) {
	h := c.kinds[gvk]
	if h == nil {
		return nil, &NotCachedError{Kind: gvk}
	}
	return h, nil
}

// NotCachedError is a read of a kind the cache was not built for.
type NotCachedError struct{ Kind schema.GroupVersionKind }

func (e *NotCachedError) Error() string {
	return fmt.Sprintf("informer: %s is not cached (the cache holds only the kinds it was built with)", e.Kind)
}

// Get implements kclient.Reader: a deep copy of the object named key, typed
// or unstructured as obj is, or NotFound.
func (c *Cache) Get(_ context.Context, key kclient.Key, obj kclient.Object) error {
	h, err := c.heldFor(obj)
	if err != nil {
		return err
	}
	storeKey := key.Name
	if key.Namespace != "" {
		storeKey = key.Namespace + "/" + key.Name
	}
	item, exists, err := h.informer.GetIndexer().GetByKey(storeKey)
	if err != nil {
		return err
	}
	if !exists {
		return apierrors.NewNotFound(h.resource, key.Name)
	}
	return h.copyInto(item, obj)
}

// copyInto sets obj to a deep copy of item, a held object.
func (h *held) copyInto(item any, obj runtime.Object) error {
	src, ok := item.(runtime.Object)
	if !ok {
		return fmt.Errorf("informer: the %s cache holds a %T", h.gvk.Kind, item)
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
		if err != nil {
			return err
		}
		u.SetUnstructuredContent(content)
		u.SetGroupVersionKind(h.gvk)
		return nil
	}
	dst := reflect.ValueOf(obj)
	if dst.Kind() != reflect.Pointer || dst.Elem().Type() != h.typ {
		return fmt.Errorf("informer: cannot read a %s into a %T", h.gvk.Kind, obj)
	}
	dst.Elem().Set(reflect.ValueOf(src.DeepCopyObject()).Elem())
	obj.GetObjectKind().SetGroupVersionKind(h.gvk)
	return nil
}

// List implements kclient.Reader: deep copies of the held objects in
// opts.Namespace (every namespace when empty) that opts.Labels selects,
// sorted by namespace and name. A field selector or a continue token is
// refused (the agent's cached reads use neither); Limit truncates.
func (c *Cache) List(_ context.Context, list kclient.ObjectList, opts kclient.ListOptions) error {
	if opts.Fields != nil && !opts.Fields.Empty() {
		return errors.New("informer: a cached list takes no field selector")
	}
	if opts.Continue != "" {
		return errors.New("informer: a cached list takes no continue token")
	}
	var gvk schema.GroupVersionKind
	ul, unstructuredList := list.(*unstructured.UnstructuredList)
	if unstructuredList {
		gvk = ul.GroupVersionKind()
	} else {
		var err error
		if gvk, err = kindOf(c.scheme, list); err != nil {
			return err
		}
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	h, err := c.heldForKind(gvk)
	if err != nil {
		return err
	}
	var items []any
	if opts.Namespace != "" {
		if items, err = h.informer.GetIndexer().ByIndex(cache.NamespaceIndex, opts.Namespace); err != nil {
			return err
		}
	} else {
		items = h.informer.GetIndexer().List()
	}
	objs := make([]kclient.Object, 0, len(items))
	for _, it := range items {
		o, ok := it.(kclient.Object)
		if !ok {
			continue
		}
		if opts.Labels != nil && !opts.Labels.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		objs = append(objs, o)
	}
	slices.SortFunc(objs, func(x, y kclient.Object) int {
		if n := strings.Compare(x.GetNamespace(), y.GetNamespace()); n != 0 {
			return n
		}
		return strings.Compare(x.GetName(), y.GetName())
	})
	if opts.Limit > 0 && int64(len(objs)) > opts.Limit {
		objs = objs[:opts.Limit]
	}
	if unstructuredList {
		ul.Items = make([]unstructured.Unstructured, len(objs))
		for i, o := range objs {
			if err := h.copyInto(o, &ul.Items[i]); err != nil {
				return err
			}
		}
		return nil
	}
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		cp := o.DeepCopyObject()
		cp.GetObjectKind().SetGroupVersionKind(h.gvk)
		out[i] = cp
	}
	return meta.SetList(list, out)
}
