// Package deploy carries the kustomize bases deploy/hub and deploy/agent
// inside the binaries that install them (`kubectl flotilla init` and
// `join`), so the CLI installs exactly the files a kustomize user applies:
// the objects each kustomization's resources list names, with its images
// override. Generators (the agent's configMapGenerator) are not rendered:
// the CLI writes what they stand for itself.
package deploy

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

//go:embed hub agent
var files embed.FS

// The bases.
const (
	Hub   = "hub"
	Agent = "agent"
)

// Default images of the bases (their Deployments name them; the
// kustomizations pin the tag).
const (
	HubImage   = "ghcr.io/flotilla-dev/flotilla-hub"
	AgentImage = "ghcr.io/flotilla-dev/flotilla-agent"
)

// kustomization is the part of a kustomization.yaml the CLI honours.
type kustomization struct {
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// Objects returns the objects of base (Hub or Agent) in the order its
// kustomization lists them. image, when not empty, replaces every
// container image of the base's own image (whatever the kustomization's
// images override says); empty keeps the kustomization's override.
func Objects(base, image string) ([]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile(path.Join(base, "kustomization.yaml"))
	if err != nil {
		return nil, fmt.Errorf("base %q: %w", base, err)
	}
	var k kustomization
	if err := yaml.Unmarshal(raw, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", base, err)
	}
	images := map[string]string{}
	for _, im := range k.Images {
		name := im.Name
		if im.NewName != "" {
			name = im.NewName
		}
		if im.NewTag != "" {
			name += ":" + im.NewTag
		}
		images[im.Name] = name
		if image != "" {
			images[im.Name] = image
		}
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		objs, err := decode(path.Join(base, r))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if err := setImages(o, images); err != nil {
				return nil, fmt.Errorf("%s/%s: %w", base, r, err)
			}
		}
		out = append(out, objs...)
	}
	return out, nil
}

// decode reads the objects of one YAML file (several documents allowed).
func decode(name string) ([]*unstructured.Unstructured, error) {
	raw, err := files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%s: an object without kind or name", name)
		}
		out = append(out, u)
	}
}

// setImages rewrites the images of a workload's containers as kustomize's
// images override does: a container image whose name (before any tag or
// digest) is a key of images becomes its value.
func setImages(o *unstructured.Unstructured, images map[string]string) error {
	for _, field := range []string{"containers", "initContainers"} {
		cs, found, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
		if err != nil || !found {
			continue
		}
		changed := false
		for i, c := range cs {
			m, ok := c.(map[string]any)
			if !ok {
				continue
			}
			img, _ := m["image"].(string)
			if to, ok := images[imageName(img)]; ok {
				m["image"] = to
				cs[i], changed = m, true
			}
		}
		if changed {
			if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", field); err != nil {
				return err
			}
		}
	}
	return nil
}

// imageName is an image reference without its tag or digest.
func imageName(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	// A colon after the last slash starts a tag; one before it is a
	// registry's port.
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}
