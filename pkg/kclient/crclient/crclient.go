// Package crclient adapts controller-runtime clients and readers (a
// manager's client, a cache) to pkg/kclient, the client pkg/apply writes
// through.
package crclient

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// Reader returns r as a kclient.Reader; nil stays nil.
func Reader(r client.Reader) kclient.Reader {
	if r == nil {
		return nil
	}
	return reader{r}
}

// Client returns c as a kclient.Client.
func Client(c client.Client) kclient.Client {
	return writer{reader: reader{c}, c: c}
}

type reader struct{ r client.Reader }

func (r reader) Get(ctx context.Context, key kclient.Key, obj kclient.Object) error {
	return r.r.Get(ctx, key, obj)
}

func (r reader) List(ctx context.Context, list kclient.ObjectList, opts kclient.ListOptions) error {
	return r.r.List(ctx, list, listOptions(opts)...)
}

// listOptions translates opts, leaving out what opts leaves unset.
func listOptions(opts kclient.ListOptions) []client.ListOption {
	var out []client.ListOption
	if opts.Namespace != "" {
		out = append(out, client.InNamespace(opts.Namespace))
	}
	if opts.Labels != nil {
		out = append(out, client.MatchingLabelsSelector{Selector: opts.Labels})
	}
	if opts.Fields != nil {
		out = append(out, client.MatchingFieldsSelector{Selector: opts.Fields})
	}
	if opts.Limit > 0 {
		out = append(out, client.Limit(opts.Limit))
	}
	if opts.Continue != "" {
		out = append(out, client.Continue(opts.Continue))
	}
	return out
}

type writer struct {
	reader
	c client.Client
}

func (w writer) Create(ctx context.Context, obj kclient.Object, fieldOwner string) error {
	return w.c.Create(ctx, obj, client.FieldOwner(fieldOwner))
}

func (w writer) Update(ctx context.Context, obj kclient.Object, fieldOwner string) error {
	return w.c.Update(ctx, obj, client.FieldOwner(fieldOwner))
}

func (w writer) Patch(ctx context.Context, obj kclient.Object, pt types.PatchType, data []byte) error {
	return w.c.Patch(ctx, obj, client.RawPatch(pt, data))
}

func (w writer) Delete(ctx context.Context, obj kclient.Object, opts kclient.DeleteOptions) error {
	var o []client.DeleteOption
	if p := opts.Preconditions; p.UID != nil || p.ResourceVersion != nil {
		o = append(o, client.Preconditions(p))
	}
	if opts.Propagation != "" {
		o = append(o, client.PropagationPolicy(opts.Propagation))
	}
	return w.c.Delete(ctx, obj, o...)
}

func (w writer) ForceApply(ctx context.Context, obj *unstructured.Unstructured, fieldOwner string) error {
	return w.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldOwner), client.ForceOwnership)
}

func (w writer) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return w.c.RESTMapper().RESTMapping(gk, versions...)
}
