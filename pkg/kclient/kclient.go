// Package kclient is the narrow Kubernetes client that pkg/apply writes
// through: get, list, create, update, patch, delete and a forced
// server-side apply of typed or unstructured objects, and the mapping of a
// kind to its resource.
//
// It exists so that pkg/apply does not import controller-runtime's client
// package, which links client-go's scheme of every API group (and, through
// it, the types, deep copies and protobuf code of groups Flotilla never
// uses). The hub's Push mode and the agent hand pkg/apply a
// controller-runtime client through crclient; direct, on client-go's
// dynamic client, is the client an agent without controller-runtime will
// pass (docs/architecture.md, "Executable size").
package kclient

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Object is a Kubernetes object: typed or *unstructured.Unstructured. It
// is the same method set as controller-runtime's client.Object, so either
// converts to the other.
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list of objects, typed or
// *unstructured.UnstructuredList.
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// Key names an object: its namespace (empty for a cluster-scoped one) and
// name.
type Key = types.NamespacedName

// KeyOf returns obj's Key.
func KeyOf(obj metav1.Object) Key {
	return Key{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// ListOptions narrow a List.
type ListOptions struct {
	// Namespace lists one namespace; empty lists all (or a
	// cluster-scoped kind).
	Namespace string
	// Labels selects by label; nil selects every object.
	Labels labels.Selector
	// Fields selects by field (those the kind's apiserver supports, such
	// as a pod's status.phase); nil selects every object.
	Fields fields.Selector
	// Limit caps the objects returned; 0 returns all. A list cut short
	// carries a continue token (the list's GetContinue).
	Limit int64
	// Continue asks for the page after the one whose continue token it
	// is.
	Continue string
}

// MatchingLabels returns ListOptions of namespace and the objects whose
// labels include set.
func MatchingLabels(namespace string, set map[string]string) ListOptions {
	return ListOptions{Namespace: namespace, Labels: labels.SelectorFromValidatedSet(set)}
}

// DeleteOptions qualify a Delete.
type DeleteOptions struct {
	// Preconditions the apiserver checks before deleting (a UID, a
	// resourceVersion); the zero value checks none.
	Preconditions metav1.Preconditions
	// Propagation is the deletion's propagation policy; empty leaves the
	// apiserver's default for the kind.
	Propagation metav1.DeletionPropagation
}

// Reader reads objects. The kind of obj (or list) says what is read:
// typed objects by their Go type, unstructured ones by the kind they
// are set to.
type Reader interface {
	// Get reads the object key names into obj; a missing one is a
	// NotFound error (k8s.io/apimachinery/pkg/api/errors).
	Get(ctx context.Context, key Key, obj Object) error
	// List reads the objects opts select into list.
	List(ctx context.Context, list ObjectList, opts ListOptions) error
}

// Client reads and writes objects of one cluster. Each write stores the
// apiserver's answer in obj.
type Client interface {
	Reader
	// Create creates obj, recording fieldOwner as the manager of its
	// fields.
	Create(ctx context.Context, obj Object, fieldOwner string) error
	// Update replaces obj (an optimistic write: its resourceVersion must
	// be current), recording fieldOwner as the manager of its fields.
	Update(ctx context.Context, obj Object, fieldOwner string) error
	// Patch patches obj with data, a patch of type pt.
	Patch(ctx context.Context, obj Object, pt types.PatchType, data []byte) error
	// Delete deletes obj.
	Delete(ctx context.Context, obj Object, opts DeleteOptions) error
	// ForceApply server-side applies obj as fieldOwner, taking ownership
	// of fields other managers set (Flotilla is the source of truth for
	// what it applies).
	ForceApply(ctx context.Context, obj *unstructured.Unstructured, fieldOwner string) error
	// RESTMapping maps a kind, in the first of versions the cluster
	// serves, to its resource and scope. A kind the cluster does not
	// serve is a meta.NoKindMatchError (meta.IsNoMatchError).
	RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error)
}
