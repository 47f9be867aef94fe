package crclient

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TypedReader serves pkg/apply's unstructured reads from a cache of typed
// objects. A controller-runtime cache keeps a separate informer for
// unstructured objects; reading status through it while events come from
// the typed one would race (the unstructured copy can lag behind the event
// that woke the reconciler, and a status computed from it would be stale
// until the next event, which may never come). Reading everything through
// the typed informer also keeps one copy of each owned object in memory,
// not two.
type TypedReader struct {
	Cache  client.Reader
	Scheme *runtime.Scheme
}

var _ client.Reader = TypedReader{}

// Get implements client.Reader.
func (r TypedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return r.Cache.Get(ctx, key, obj, opts...)
	}
	gvk := u.GroupVersionKind()
	typed, err := r.Scheme.New(gvk)
	if err != nil {
		return fmt.Errorf("no typed cache for %s: %w", gvk, err)
	}
	tobj, ok := typed.(client.Object)
	if !ok {
		return fmt.Errorf("%s is not an object", gvk)
	}
	if err := r.Cache.Get(ctx, key, tobj, opts...); err != nil {
		return err
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tobj)
	if err != nil {
		return err
	}
	u.SetUnstructuredContent(content)
	u.SetGroupVersionKind(gvk)
	return nil
}

// List implements client.Reader.
func (r TypedReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	ul, ok := list.(*unstructured.UnstructuredList)
	if !ok {
		return r.Cache.List(ctx, list, opts...)
	}
	gvk := ul.GroupVersionKind()
	if !strings.HasSuffix(gvk.Kind, "List") {
		gvk.Kind += "List"
	}
	typed, err := r.Scheme.New(gvk)
	if err != nil {
		return fmt.Errorf("no typed cache for %s: %w", gvk, err)
	}
	tlist, ok := typed.(client.ObjectList)
	if !ok {
		return fmt.Errorf("%s is not a list", gvk)
	}
	if err := r.Cache.List(ctx, tlist, opts...); err != nil {
		return err
	}
	items, err := meta.ExtractList(tlist)
	if err != nil {
		return err
	}
	itemGVK := gvk
	itemGVK.Kind = strings.TrimSuffix(gvk.Kind, "List")
	ul.Items = make([]unstructured.Unstructured, 0, len(items))
	for _, it := range items {
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(it)
		if err != nil {
			return err
		}
		u := unstructured.Unstructured{Object: content}
		u.SetGroupVersionKind(itemGVK)
		ul.Items = append(ul.Items, u)
	}
	return nil
}
