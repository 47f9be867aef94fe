package render_test

import (
	"regexp"
	"strings"
	"testing"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/webhook"
	"github.com/flotilla-dev/flotilla/hub/render"
)

// The ImageOverride fields' CRD patterns (api/v1alpha1/myapp_types.go):
// what the apiserver lets into an override.
var (
	registryPattern   = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?(:[0-9]+)?$`)
	repositoryPattern = regexp.MustCompile(`^[a-z0-9]+([._/-][a-z0-9]+)*$`)
	tagPattern        = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
)

const seedDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var imageSeeds = []string{
	"nginx", "nginx:1.25", "library/nginx:1.25-alpine", "registry.example.com/team/web:1.2",
	"registry.example.com:5000/team/web", "localhost/web", "localhost:5000/web:dev",
	"web@" + seedDigest, "registry.example.com:5000/team/web:1.2@" + seedDigest, "10.0.0.1:5000/a/b/c:d",
	"", ":", "@", "/", "a/b:c/d", "a@b@c", "a:b:c", "Upper/web", "a//b", " web",
}

func FuzzSplitImage(f *testing.F) {
	for _, s := range imageSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		registry, repository, tag, digest := render.SplitImage(image)
		if !webhook.ValidImage(image) {
			return
		}
		// A valid reference splits into parts that put it back together.
		joined := repository
		if registry != "" {
			joined = registry + "/" + joined
		}
		if tag != "" {
			joined += ":" + tag
		}
		if digest != "" {
			joined += "@" + digest
		}
		if joined != image {
			t.Errorf("splitImage(%q) = %q %q %q %q, which join to %q", image, registry, repository, tag, digest, joined)
		}
		if repository == "" || strings.ContainsAny(repository, ":@") || strings.ContainsAny(tag, "/:@") {
			t.Errorf("splitImage(%q) = %q %q %q %q: misplaced separators", image, registry, repository, tag, digest)
		}
		if registry != "" && !looksLikeRegistry(registry) {
			t.Errorf("splitImage(%q) took %q for a registry: it has no dot or port and is not localhost", image, registry)
		}
	})
}

func FuzzOverrideImage(f *testing.F) {
	for _, s := range imageSeeds {
		f.Add(s, "", "", "")
		f.Add(s, "mirror.example.com:5000", "", "")
		f.Add(s, "", "team/app", "")
		f.Add(s, "", "", "2.0")
		f.Add(s, "mirror.example.com", "team/app", "v1_x")
		f.Add(s, "localhost", "a.b/c", "")
	}
	f.Fuzz(func(t *testing.T, image, registry, repository, tag string) {
		o := &flotillav1.ImageOverride{Registry: registry, Repository: repository, Tag: tag}
		got := render.OverrideImage(image, o)

		if webhook.ValidImage(image) {
			if same := render.OverrideImage(image, &flotillav1.ImageOverride{}); same != image {
				t.Errorf("OverrideImage(%q, {}) = %q, want it unchanged", image, same)
			}
		}
		if tag != "" {
			if !strings.HasSuffix(got, ":"+tag) {
				t.Errorf("OverrideImage(%q, %+v) = %q, want it to end in :%s", image, o, got, tag)
			}
			if !strings.Contains(registry+repository+tag, "@") && strings.Contains(got, "@") {
				t.Errorf("OverrideImage(%q, %+v) = %q kept a digest although the tag changed", image, o, got)
			}
		}
		// With a valid image and override parts the CRD admits, the
		// result reads back as what the override says. Two kinds of
		// override the CRD admits cannot: a registry a runtime would not
		// take for one (no dot, no port, not localhost) and a repository
		// whose first part looks like a registry when none is set; see
		// TestValidateMyAppRejectsOverridesRuntimesReadDifferently in
		// hub/internal/webhook.
		if !webhook.ValidImage(image) ||
			(registry != "" && !registryPattern.MatchString(registry)) ||
			(repository != "" && !repositoryPattern.MatchString(repository)) ||
			(tag != "" && !tagPattern.MatchString(tag)) ||
			(registry != "" && !looksLikeRegistry(registry)) ||
			(registry == "" && !hasRegistry(image) && strings.Contains(repository, "/") && looksLikeRegistry(strings.SplitN(repository, "/", 2)[0])) {
			return
		}
		r, repo, tg, _ := render.SplitImage(got)
		if (registry != "" && r != registry) || (repository != "" && repo != repository) || (tag != "" && tg != tag) {
			t.Errorf("OverrideImage(%q, %+v) = %q, which reads back as registry %q, repository %q, tag %q", image, o, got, r, repo, tg)
		}
	})
}

// looksLikeRegistry says whether a container runtime takes the first part
// of a reference for a registry host.
func looksLikeRegistry(s string) bool {
	return strings.ContainsAny(s, ".:") || s == "localhost"
}

func hasRegistry(image string) bool {
	registry, _, _, _ := render.SplitImage(image)
	return registry != ""
}
