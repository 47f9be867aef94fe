package ssa

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Path is a field path in an object's unstructured content, e.g.
// Path{"metadata", "managedFields"}.
type Path []string

// Paths that apply bodies leave out.
var (
	// Status is the status of an object; Unstructured drops it.
	Status = Path{"status"}
	// Spec is the spec of an object; StatusUnstructured drops it.
	Spec = Path{"spec"}

	// creationTimestamps are written as null when a typed object is
	// converted; only the apiserver sets them.
	creationTimestamps = []Path{
		{"metadata", "creationTimestamp"},
		{"spec", "template", "metadata", "creationTimestamp"},
	}
)

// ServerSetMetadata lists the metadata the apiserver sets and an apply
// body must not carry, for objects that come from a stored manifest rather
// than from a typed object built in code. Do not modify it.
var ServerSetMetadata = []Path{
	{"metadata", "resourceVersion"},
	{"metadata", "uid"},
	{"metadata", "generation"},
	{"metadata", "creationTimestamp"},
	{"metadata", "deletionTimestamp"},
	{"metadata", "deletionGracePeriodSeconds"},
	{"metadata", "managedFields"},
	{"metadata", "selfLink"},
}

// Unstructured returns obj as the body of a server-side apply of the
// object (not of its status subresource): its unstructured content without
// status, without the creationTimestamps of metadata and of
// spec.template.metadata, and without the paths in drop. obj is not
// modified; when it already is an *unstructured.Unstructured, a copy is
// returned.
func Unstructured(obj runtime.Object, drop ...Path) (*unstructured.Unstructured, error) {
	return body(obj, Status, drop)
}

// StatusUnstructured returns obj as the body of a server-side apply of its
// status subresource: like Unstructured, but keeping status and dropping
// spec, which the status subresource ignores and a status writer must not
// claim.
func StatusUnstructured(obj runtime.Object, drop ...Path) (*unstructured.Unstructured, error) {
	return body(obj, Spec, drop)
}

// body converts obj and removes part, the creationTimestamps and drop.
func body(obj runtime.Object, part Path, drop []Path) (*unstructured.Unstructured, error) {
	var u *unstructured.Unstructured
	if in, ok := obj.(*unstructured.Unstructured); ok {
		u = in.DeepCopy()
	} else {
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("converting %T to unstructured: %w", obj, err)
		}
		u = &unstructured.Unstructured{Object: content}
	}
	for _, p := range append(append([]Path{part}, creationTimestamps...), drop...) {
		if len(p) > 0 {
			unstructured.RemoveNestedField(u.Object, p...)
		}
	}
	return u, nil
}
