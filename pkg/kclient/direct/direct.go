// Package direct is a kclient.Client on client-go's dynamic client: every
// read and write goes to the apiserver (no cache), objects travel as JSON,
// and typed objects are converted to and from unstructured content with a
// scheme that knows only the types the caller registers. A typed List is
// the exception: it asks for protobuf (JSON from a kind that has none, a
// custom resource's) and decodes straight into the caller's list, because
// lists are where the bytes are (the agent's capacity summary pages
// through every pod of its member every 10 seconds). Kinds are mapped
// to resources by Mapper, which asks the apiserver's discovery for one
// group version at a time. It links neither controller-runtime nor
// client-go's typed clients and their scheme of every API group, which is
// what an agent without them needs (docs/architecture.md, "Executable
// size").
package direct

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// Client is a kclient.Client that reads and writes through the apiserver.
type Client struct {
	dyn    dynamic.Interface
	scheme *runtime.Scheme
	mapper *Mapper

	// For typed lists: REST clients per group version that decode with
	// the scheme's codecs, sharing dyn's HTTP client.
	base       *rest.Config
	httpClient *http.Client
	codecs     runtime.NegotiatedSerializer
	mu         sync.Mutex
	typed      map[schema.GroupVersion]rest.Interface
}

var _ kclient.Client = (*Client)(nil)

// New returns a Client of the apiserver cfg reaches. scheme names the Go
// types of the typed objects the caller passes (unstructured ones need
// none); a typed object of a type it does not know is an error.
func New(cfg *rest.Config, scheme *runtime.Scheme) (*Client, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the HTTP client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("building the dynamic client: %w", err)
	}
	mapper, err := NewMapper(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{
		dyn: dyn, scheme: scheme, mapper: mapper,
		base: cfg, httpClient: httpClient,
		codecs: serializer.NewCodecFactory(scheme).WithoutConversion(),
		typed:  map[schema.GroupVersion]rest.Interface{},
	}, nil
}

// typedClient returns the REST client of gv that asks for protobuf (then
// JSON) and decodes with the scheme's codecs.
func (c *Client) typedClient(gv schema.GroupVersion) (rest.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc := c.typed[gv]; rc != nil {
		return rc, nil
	}
	rc, err := TypedRESTClient(c.base, c.httpClient, c.codecs, gv)
	if err != nil {
		return nil, err
	}
	c.typed[gv] = rc
	return rc, nil
}

// RESTMapping implements kclient.Client.
func (c *Client) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return c.mapper.RESTMapping(gk, versions...)
}

// kindOf returns obj's kind: an unstructured object's own, a typed one's
// from the scheme.
func (c *Client) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	if u, ok := obj.(runtime.Unstructured); ok {
		gvk := u.GetObjectKind().GroupVersionKind()
		if gvk.Kind == "" || gvk.Version == "" {
			return gvk, fmt.Errorf("unstructured object without apiVersion and kind")
		}
		return gvk, nil
	}
	gvks, _, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return gvks[0], nil
}

// resource returns the dynamic client of gvk's resource in namespace
// (ignored for a cluster-scoped kind).
func (c *Client) resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, error) {
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	r := c.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if namespace == "" {
			return nil, fmt.Errorf("%s is namespaced: a namespace is required", gvk.Kind)
		}
		return r.Namespace(namespace), nil
	}
	return r, nil
}

// resourceOf returns the dynamic client of obj's resource, in obj's
// namespace, and obj's kind.
func (c *Client) resourceOf(obj kclient.Object) (dynamic.ResourceInterface, schema.GroupVersionKind, error) {
	gvk, err := c.kindOf(obj)
	if err != nil {
		return nil, gvk, err
	}
	r, err := c.resource(gvk, obj.GetNamespace())
	return r, gvk, err
}

// toUnstructured returns obj's content with its apiVersion and kind.
func toUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u, nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T to unstructured: %w", obj, err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// store writes the apiserver's answer into obj.
func store(answer *unstructured.Unstructured, obj runtime.Object) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if u != answer {
			u.Object = answer.Object
		}
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(answer.Object, obj); err != nil {
		return fmt.Errorf("converting the answer to %T: %w", obj, err)
	}
	return nil
}

// Get implements kclient.Reader.
func (c *Client) Get(ctx context.Context, key kclient.Key, obj kclient.Object) error {
	gvk, err := c.kindOf(obj)
	if err != nil {
		return err
	}
	r, err := c.resource(gvk, key.Namespace)
	if err != nil {
		return err
	}
	answer, err := r.Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return store(answer, obj)
}

// List implements kclient.Reader.
func (c *Client) List(ctx context.Context, list kclient.ObjectList, opts kclient.ListOptions) error {
	gvk, err := c.kindOf(list)
	if err != nil {
		return err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	// Unlike resource, a namespaced kind without a namespace lists all.
	namespace := ""
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		namespace = opts.Namespace
	}
	lo := metav1.ListOptions{Limit: opts.Limit, Continue: opts.Continue}
	if opts.Labels != nil {
		lo.LabelSelector = opts.Labels.String()
	}
	if opts.Fields != nil {
		lo.FieldSelector = opts.Fields.String()
	}
	ul, ok := list.(*unstructured.UnstructuredList)
	if !ok {
		return c.listTyped(ctx, list, gvk, m.Resource, namespace, lo)
	}
	res := c.dyn.Resource(m.Resource)
	var r dynamic.ResourceInterface = res
	if namespace != "" {
		r = res.Namespace(namespace)
	}
	answer, err := r.List(ctx, lo)
	if err != nil {
		return err
	}
	*ul = *answer
	return nil
}

// listTyped lists resource into the typed list through the group
// version's REST client (protobuf where the kind has it): no unstructured
// copy of the answer on the way, which as JSON and maps takes several
// times the bytes of the typed list. Each item gets its apiVersion and
// kind, as a list read as unstructured and converted had.
func (c *Client) listTyped(ctx context.Context, list kclient.ObjectList, item schema.GroupVersionKind, resource schema.GroupVersionResource, namespace string, lo metav1.ListOptions) error {
	rc, err := c.typedClient(resource.GroupVersion())
	if err != nil {
		return err
	}
	req := rc.Get().Resource(resource.Resource).Namespace(namespace)
	if lo.Limit > 0 {
		req = req.Param("limit", strconv.FormatInt(lo.Limit, 10))
	}
	for k, v := range map[string]string{"continue": lo.Continue, "labelSelector": lo.LabelSelector, "fieldSelector": lo.FieldSelector} {
		if v != "" {
			req = req.Param(k, v)
		}
	}
	if err := req.Do(ctx).Into(list); err != nil {
		return err
	}
	return meta.EachListItem(list, func(o runtime.Object) error {
		o.GetObjectKind().SetGroupVersionKind(item)
		return nil
	})
}

// Create implements kclient.Client.
func (c *Client) Create(ctx context.Context, obj kclient.Object, fieldOwner string) error {
	return c.write(ctx, obj, func(r dynamic.ResourceInterface, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldOwner})
	})
}

// Update implements kclient.Client.
func (c *Client) Update(ctx context.Context, obj kclient.Object, fieldOwner string) error {
	return c.write(ctx, obj, func(r dynamic.ResourceInterface, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.Update(ctx, u, metav1.UpdateOptions{FieldManager: fieldOwner})
	})
}

// Patch implements kclient.Client.
func (c *Client) Patch(ctx context.Context, obj kclient.Object, pt types.PatchType, data []byte) error {
	return c.write(ctx, obj, func(r dynamic.ResourceInterface, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.Patch(ctx, u.GetName(), pt, data, metav1.PatchOptions{})
	})
}

// ForceApply implements kclient.Client.
func (c *Client) ForceApply(ctx context.Context, obj *unstructured.Unstructured, fieldOwner string) error {
	return c.write(ctx, obj, func(r dynamic.ResourceInterface, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return r.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: fieldOwner, Force: true})
	})
}

// Delete implements kclient.Client.
func (c *Client) Delete(ctx context.Context, obj kclient.Object, opts kclient.DeleteOptions) error {
	r, _, err := c.resourceOf(obj)
	if err != nil {
		return err
	}
	var do metav1.DeleteOptions
	if p := opts.Preconditions; p.UID != nil || p.ResourceVersion != nil {
		do.Preconditions = &p
	}
	if opts.Propagation != "" {
		do.PropagationPolicy = &opts.Propagation
	}
	return r.Delete(ctx, obj.GetName(), do)
}

// write sends obj through call and stores the answer in obj.
func (c *Client) write(ctx context.Context, obj kclient.Object, call func(dynamic.ResourceInterface, *unstructured.Unstructured) (*unstructured.Unstructured, error)) error {
	r, gvk, err := c.resourceOf(obj)
	if err != nil {
		return err
	}
	u, err := toUnstructured(obj, gvk)
	if err != nil {
		return err
	}
	answer, err := call(r, u)
	if err != nil {
		return err
	}
	return store(answer, obj)
}
