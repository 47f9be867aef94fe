package render

import (
	"errors"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func patch(op flotillav1.JSONPatchOp, path, value string) flotillav1.JSONPatch {
	p := flotillav1.JSONPatch{Op: op, Path: path}
	if value != "" {
		p.Value = &apiextensionsv1.JSON{Raw: []byte(value)}
	}
	return p
}

func TestPatch(t *testing.T) {
	t.Run("patches apply in order and reach any field; the input is not changed", func(t *testing.T) {
		d := mustDeployment(t, newApp(), 3, ClusterOverrides{})
		before := d.DeepCopy()
		got, err := Patch(d, []flotillav1.JSONPatch{
			patch(flotillav1.JSONPatchAdd, "/spec/template/spec/nodeSelector", `{"pool":"general"}`),
			patch(flotillav1.JSONPatchReplace, "/spec/template/spec/nodeSelector/pool", `"gpu"`),
			patch(flotillav1.JSONPatchAdd, "/spec/template/spec/containers/0/readinessProbe", `{"httpGet":{"path":"/ready","port":8080}}`),
			patch(flotillav1.JSONPatchAdd, "/metadata/annotations", `{"team":"shop"}`),
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Template.Spec.NodeSelector["pool"] != "gpu" || got.Annotations["team"] != "shop" {
			t.Errorf("nodeSelector %v, annotations %v", got.Spec.Template.Spec.NodeSelector, got.Annotations)
		}
		if p := got.Spec.Template.Spec.Containers[0].ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" {
			t.Errorf("readinessProbe = %+v", p)
		}
		if got.APIVersion != "apps/v1" || got.Kind != "Deployment" || *got.Spec.Replicas != 3 {
			t.Errorf("patched object %s %s with %d replicas", got.APIVersion, got.Kind, *got.Spec.Replicas)
		}
		if !equality.Semantic.DeepEqual(d, before) {
			t.Error("Patch changed its input")
		}
	})

	t.Run("no patches: the same Deployment", func(t *testing.T) {
		d := mustDeployment(t, newApp(), 1, ClusterOverrides{})
		if got, err := Patch(d, nil); err != nil || got != d {
			t.Errorf("Patch(d, nil) = %p, %v; want d itself", got, err)
		}
	})

	refused := []struct {
		name    string
		patches []flotillav1.JSONPatch
		index   int
		field   string
		want    string
	}{
		{"a path outside /spec and the labels and annotations", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchReplace, "/metadata/name", `"other"`)},
			0, "path", "outside /spec"},
		{"the selector", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchAdd, "/spec/template/spec/nodeSelector", `{"a":"b"}`), patch(flotillav1.JSONPatchRemove, "/spec/selector/matchLabels", "")},
			1, "path", "is Flotilla's"},
		{"the replicas", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchReplace, "/spec/replicas", `9`)},
			0, "path", "is the scheduler's"},
		{"a path that does not exist", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchReplace, "/spec/template/spec/nodeSelector/pool", `"gpu"`)},
			0, "path", ""},
		{"add without a value", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchAdd, "/spec/paused", "")},
			0, "value", "is required for add and replace"},
		{"remove with a value", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchRemove, "/spec/template/spec/containers/0/image", `"x"`)},
			0, "value", "not allowed for remove"},
		{"a value of the wrong type", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchAdd, "/spec/minReadySeconds", `"soon"`)},
			0, "value", "no longer a Deployment"},
		{"an unknown field", []flotillav1.JSONPatch{patch(flotillav1.JSONPatchAdd, "/spec/template/spec/gpus", `2`)},
			0, "value", "no longer a Deployment"},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			_, err := Patch(mustDeployment(t, newApp(), 3, ClusterOverrides{}), tc.patches)
			var pe *PatchError
			if !errors.As(err, &pe) {
				t.Fatalf("error = %v, want a PatchError", err)
			}
			if pe.Index != tc.index || pe.Field != tc.field || !strings.Contains(pe.Error(), tc.want) {
				t.Errorf("error = %v (index %d, field %s), want index %d, field %s, containing %q", pe, pe.Index, pe.Field, tc.index, tc.field, tc.want)
			}
		})
	}

	t.Run("refused: taking the selected labels from the pods or the Deployment", func(t *testing.T) {
		for _, path := range []string{"/spec/template/metadata/labels/" + escape(flotillav1.LabelMyAppName), "/metadata/labels/" + escape(flotillav1.LabelMyAppName)} {
			_, err := Patch(mustDeployment(t, newApp(), 3, ClusterOverrides{}), []flotillav1.JSONPatch{patch(flotillav1.JSONPatchRemove, path, "")})
			if err == nil || !strings.Contains(err.Error(), "labels") {
				t.Errorf("removing %s: error = %v, want one about the labels", path, err)
			}
		}
	})
}

// escape writes a label key as a JSON pointer token.
func escape(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

func TestWorkAppliesTheSelectedOverridesPatches(t *testing.T) {
	app := newApp(withOverrides(flotillav1.ClusterOverride{
		Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}},
		Patches: []flotillav1.JSONPatch{patch(flotillav1.JSONPatchAdd, "/spec/template/spec/nodeSelector", `{"pool":"gpu"}`)},
	}))
	for _, tc := range []struct {
		cluster string
		want    map[string]string
	}{{"eu-1", map[string]string{"pool": "gpu"}}, {"us-1", nil}} {
		w, _, err := Work(app, tc.cluster, member(tc.cluster, "r", nil), 2, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := decodeDeployment(w.Spec.Manifests[0].Raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.NodeSelector; !equality.Semantic.DeepEqual(got, tc.want) {
			t.Errorf("%s: nodeSelector %v, want %v", tc.cluster, got, tc.want)
		}
	}
	broken := newApp(withOverrides(flotillav1.ClusterOverride{
		Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}},
		Patches: []flotillav1.JSONPatch{patch(flotillav1.JSONPatchRemove, "/spec/template/spec/hostname", "")},
	}))
	if _, _, err := Work(broken, "eu-1", member("eu-1", "r", nil), 2, "", nil); err == nil || !strings.Contains(err.Error(), "spec.overrides[0] (eu) for eu-1: patches[0].path") {
		t.Errorf("a patch that cannot apply: error = %v, want one naming spec.overrides[0] (eu), the cluster and patches[0].path", err)
	}
}
