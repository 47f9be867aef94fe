// Package finalizer removes one finalizer from an object without racing
// other writers of the object.
package finalizer

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RemovePatch is a JSON patch that removes finalizer from obj, as obj
// lists its finalizers, and ok false when obj does not carry it. The patch
// tests that the entry it removes still is finalizer, so it needs no
// resourceVersion: writes of the object's status or other fields meanwhile
// do not make it fail, and a finalizer list changed meanwhile (the entry
// moved) makes it fail with an Invalid error rather than remove another
// finalizer; the caller reads the object again and retries.
func RemovePatch(obj client.Object, finalizer string) (patch client.Patch, ok bool, err error) {
	i := slices.Index(obj.GetFinalizers(), finalizer)
	if i < 0 {
		return nil, false, nil
	}
	path := fmt.Sprintf("/metadata/finalizers/%d", i)
	ops := []map[string]any{
		{"op": "test", "path": path, "value": finalizer},
		{"op": "remove", "path": path},
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, false, err
	}
	return client.RawPatch(types.JSONPatchType, b), true, nil
}
