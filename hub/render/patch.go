package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// PatchError says which of an override's patches failed and why.
type PatchError struct {
	// Index is the patch's position in the list given to Patch.
	Index int
	// Field is "path" or "value": what the error is about.
	Field string
	Err   error
}

func (e *PatchError) Error() string {
	return fmt.Sprintf("patches[%d].%s: %v", e.Index, e.Field, e.Err)
}

func (e *PatchError) Unwrap() error { return e.Err }

// CheckPatchPath says whether a JSON patch may touch path: inside /spec or
// /metadata/labels or /metadata/annotations, and not in /spec/selector or
// /spec/replicas, which the scheduler and Flotilla's own labels own.
func CheckPatchPath(path string) error {
	under := func(prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }
	switch {
	case under("/spec/selector"):
		return fmt.Errorf("%s is Flotilla's: the Deployment selects its pods by the MyApp's labels", path)
	case under("/spec/replicas"):
		return fmt.Errorf("%s is the scheduler's: set replicas in the override instead", path)
	case under("/spec"), under("/metadata/labels"), under("/metadata/annotations"):
		return nil
	}
	return fmt.Errorf("%s is outside /spec, /metadata/labels and /metadata/annotations", path)
}

// Patch applies patches, in order, to d and returns the patched copy; d is
// not changed. The result must still decode as a Deployment (no unknown
// fields), keep its replicas and selector, and its pods and itself must
// keep the labels the selector names, or the error says which patch broke
// that. A *PatchError names the patch.
func Patch(d *appsv1.Deployment, patches []flotillav1.JSONPatch) (*appsv1.Deployment, error) {
	if len(patches) == 0 {
		return d, nil
	}
	doc, err := manifestJSON(d)
	if err != nil {
		return nil, err
	}
	for i, p := range patches {
		if err := CheckPatchPath(p.Path); err != nil {
			return nil, &PatchError{Index: i, Field: "path", Err: err}
		}
		if (p.Value == nil) != (p.Op == flotillav1.JSONPatchRemove) {
			return nil, &PatchError{Index: i, Field: "value", Err: fmt.Errorf("is required for add and replace and not allowed for remove")}
		}
		op := map[string]any{"op": string(p.Op), "path": p.Path}
		if p.Value != nil {
			op["value"] = json.RawMessage(p.Value.Raw)
		}
		raw, err := json.Marshal([]any{op})
		if err != nil {
			return nil, &PatchError{Index: i, Field: "value", Err: err}
		}
		decoded, err := jsonpatch.DecodePatch(raw)
		if err != nil {
			return nil, &PatchError{Index: i, Field: "path", Err: err}
		}
		if doc, err = decoded.Apply(doc); err != nil {
			return nil, &PatchError{Index: i, Field: "path", Err: err}
		}
		// Each step must leave a Deployment, so the error names the patch
		// that broke it.
		if _, err := decodeDeployment(doc); err != nil {
			return nil, &PatchError{Index: i, Field: "value", Err: err}
		}
	}
	out, err := decodeDeployment(doc)
	if err != nil {
		return nil, err
	}
	sel := d.Spec.Selector.MatchLabels
	switch {
	case !equality.Semantic.DeepEqual(out.Spec.Replicas, d.Spec.Replicas) || !equality.Semantic.DeepEqual(out.Spec.Selector, d.Spec.Selector):
		return nil, fmt.Errorf("the patches change the Deployment's replicas or selector")
	case !containsAll(out.Spec.Template.Labels, sel):
		return nil, fmt.Errorf("the patches take from the pods the labels the Deployment selects (%v)", sel)
	case !containsAll(out.Labels, sel):
		return nil, fmt.Errorf("the patches take from the Deployment the MyApp's labels (%v)", sel)
	}
	return out, nil
}

func decodeDeployment(doc []byte) (*appsv1.Deployment, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	out := &appsv1.Deployment{}
	if err := dec.Decode(out); err != nil {
		return nil, fmt.Errorf("the result is no longer a Deployment: %w", err)
	}
	return out, nil
}

func containsAll(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
