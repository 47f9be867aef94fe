package deploy

import (
	"testing"
)

func TestObjectsFollowTheKustomization(t *testing.T) {
	for _, tc := range []struct {
		base, image, wantImage string
		wantKinds              []string
	}{
		{Hub, "", HubImage + ":latest", []string{"CustomResourceDefinition", "Namespace", "Deployment", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "PodDisruptionBudget", "ClusterRole"}},
		{Hub, "registry.local:5000/hub:v1", "registry.local:5000/hub:v1", nil},
		{Agent, "", AgentImage + ":latest", []string{"Namespace", "ServiceAccount", "Deployment", "PodDisruptionBudget"}},
		{Agent, "example.com/agent@sha256:abc", "example.com/agent@sha256:abc", nil},
	} {
		objs, err := Objects(tc.base, tc.image)
		if err != nil {
			t.Fatalf("Objects(%s, %q): %v", tc.base, tc.image, err)
		}
		kinds := map[string]int{}
		deployments := 0
		for _, o := range objs {
			kinds[o.GetKind()]++
			if o.GetKind() != "Deployment" {
				continue
			}
			deployments++
			cs, _, _ := unstructuredContainers(o.Object)
			for _, img := range cs {
				if img != tc.wantImage {
					t.Errorf("%s: image %q, want %q", tc.base, img, tc.wantImage)
				}
			}
		}
		if deployments != 1 {
			t.Errorf("%s: %d Deployments, want 1", tc.base, deployments)
		}
		for _, k := range tc.wantKinds {
			if kinds[k] == 0 {
				t.Errorf("%s: no %s among %v", tc.base, k, kinds)
			}
		}
	}
	if _, err := Objects("nope", ""); err == nil {
		t.Error("Objects of an unknown base: no error")
	}
}

func unstructuredContainers(o map[string]any) ([]string, bool, error) {
	spec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	var out []string
	for _, c := range spec["containers"].([]any) {
		out = append(out, c.(map[string]any)["image"].(string))
	}
	return out, true, nil
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/a/b:latest":       "ghcr.io/a/b",
		"ghcr.io/a/b":              "ghcr.io/a/b",
		"localhost:5000/b:v1":      "localhost:5000/b",
		"localhost:5000/b":         "localhost:5000/b",
		"ghcr.io/a/b@sha256:0123":  "ghcr.io/a/b",
		"ghcr.io/a/b:v1@sha256:01": "ghcr.io/a/b",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
}
