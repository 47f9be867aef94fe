package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// legacySpec is a first-version spec: shorthand template, an image
// override with replicas and a replicas-only override.
func legacySpec() *flotillav1.MyAppSpec {
	return &flotillav1.MyAppSpec{
		Image:    "registry.example.com/team/web:1.0",
		Replicas: ptr.To[int32](4),
		Template: &flotillav1.PodTemplate{
			Labels:    map[string]string{"team": "shop"},
			Command:   []string{"/web"},
			Env:       []corev1.EnvVar{{Name: "A", Value: "1"}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
		},
		Overrides: []flotillav1.ClusterOverride{
			{Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}}, Image: &flotillav1.ImageOverride{Tag: "1.1"}, Replicas: ptr.To[int32](3)},
			{Name: "scale", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"us-1"}}, Replicas: ptr.To[int32](2)},
		},
	}
}

// The revision names of legacySpec and of an image-only spec, recorded
// from the code before spec.mainContainer existed (and unchanged since):
// a hub upgrade must not start a rollout of every MyApp.
const (
	legacyRevision    = "b2d3093b1a"
	imageOnlyRevision = "498c94a37f" // Image "v1"
)

// fullSpec is legacySpec with a full pod template of two containers.
func fullSpec(main string) *flotillav1.MyAppSpec {
	s := legacySpec()
	s.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{Containers: []corev1.Container{
		{Name: "web", Command: []string{"/web"}},
		{Name: "proxy", Image: "envoyproxy/envoy:v1.30"},
	}}}
	s.MainContainer = main
	return s
}

func TestRevisionMainContainer(t *testing.T) {
	tests := []struct {
		name     string
		spec     *flotillav1.MyAppSpec
		wantName string // "" : only compared below
		wantMain string
	}{
		{name: "a first-version spec keeps its revision name", spec: legacySpec(), wantName: legacyRevision},
		{name: "an image-only spec keeps its revision name", spec: &flotillav1.MyAppSpec{Image: "v1"}, wantName: imageOnlyRevision},
		{name: "spec.mainContainer app on a first-version spec", spec: func() *flotillav1.MyAppSpec {
			s := legacySpec()
			s.MainContainer = "app"
			return s
		}(), wantMain: "app"},
		{name: "a full template, main container by default", spec: fullSpec("")},
		{name: "a full template, main container web", spec: fullSpec("web"), wantMain: "web"},
		{name: "a full template, main container proxy", spec: fullSpec("proxy"), wantMain: "proxy"},
	}
	names := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.spec.DeepCopy()
			rt := Revision(tt.spec)
			if tt.wantName != "" && rt.Name != tt.wantName {
				t.Errorf("revision name = %s, want %s", rt.Name, tt.wantName)
			}
			if rt.MainContainer != tt.wantMain {
				t.Errorf("revision mainContainer = %q, want %q", rt.MainContainer, tt.wantMain)
			}
			if again := Revision(tt.spec.DeepCopy()).Name; again != rt.Name {
				t.Errorf("the same spec gave %s then %s", rt.Name, again)
			}
			if other, ok := names[rt.Name]; ok {
				t.Errorf("revision %s is also the name of %q", rt.Name, other)
			}
			names[rt.Name] = tt.name
			if !equality.Semantic.DeepEqual(tt.spec, before) {
				t.Error("Revision changed the spec")
			}
		})
	}
}

// TestRevisionResourcesOverride: an override with only resources changes
// what runs, so it is part of the revision (its replicas are not).
func TestRevisionResourcesOverride(t *testing.T) {
	s := legacySpec()
	s.Overrides = append(s.Overrides, flotillav1.ClusterOverride{
		Name: "big", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}},
		Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		Replicas:  ptr.To[int32](8),
	})
	rt := Revision(s)
	if rt.Name == legacyRevision {
		t.Errorf("a resources override kept the revision %s", rt.Name)
	}
	if len(rt.Overrides) != 2 || rt.Overrides[0].Name != "eu" || rt.Overrides[1].Name != "big" {
		t.Fatalf("revision overrides = %+v, want eu and big (scale only sets replicas)", rt.Overrides)
	}
	if rt.Overrides[1].Resources == nil || rt.Overrides[1].Replicas != nil {
		t.Errorf("big in the revision = %+v, want its resources without its replicas", rt.Overrides[1])
	}
	s.Overrides[2].Replicas = ptr.To[int32](1)
	if got := Revision(s).Name; got != rt.Name {
		t.Errorf("changing the resources override's replicas changed the revision: %s -> %s", rt.Name, got)
	}
	s.Overrides[2].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("2Gi")
	if got := Revision(s).Name; got == rt.Name {
		t.Errorf("changing the resources override's memory kept the revision %s", got)
	}
}

func TestAppAtMainContainer(t *testing.T) {
	tests := []struct {
		name string
		// at is the spec the revision is taken from; now is the app's
		// current spec.
		at, now *flotillav1.MyAppSpec
	}{
		{"a revision with a main container, the app now without", fullSpec("proxy"), legacySpec()},
		{"a revision without a main container, the app now with one", legacySpec(), fullSpec("proxy")},
		{"a revision with one main container, the app now with another", fullSpec("web"), fullSpec("proxy")},
		{"the same spec", fullSpec("proxy"), fullSpec("proxy")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := Revision(tt.at)
			app := &flotillav1.MyApp{Spec: *tt.now.DeepCopy()}
			app.Name, app.Namespace = "web", "shop"
			before := app.DeepCopy()
			out := AppAt(app, &rt)
			if out.Spec.MainContainer != tt.at.MainContainer {
				t.Errorf("mainContainer = %q, want the revision's %q", out.Spec.MainContainer, tt.at.MainContainer)
			}
			if out.Spec.Image != tt.at.Image || !equality.Semantic.DeepEqual(out.Spec.Template, tt.at.Template) {
				t.Errorf("image %q, template %+v; want the revision's", out.Spec.Image, out.Spec.Template)
			}
			// The app at the revision is the revision: same name back.
			if got := Revision(&out.Spec).Name; got != rt.Name {
				t.Errorf("Revision(AppAt(rt)) = %s, want %s", got, rt.Name)
			}
			if !equality.Semantic.DeepEqual(app, before) {
				t.Error("AppAt changed the MyApp")
			}
		})
	}
}

func TestVerifyMainContainer(t *testing.T) {
	signed := func(main string) flotillav1.RevisionTemplate {
		rt := Revision(fullSpec(main))
		Sign(&rt, testKey)
		return rt
	}
	for _, tc := range []struct {
		name   string
		rt     flotillav1.RevisionTemplate
		change func(*flotillav1.RevisionTemplate)
		want   bool
	}{
		{"signed with a main container", signed("proxy"), func(*flotillav1.RevisionTemplate) {}, true},
		{"signed without a main container", signed(""), func(*flotillav1.RevisionTemplate) {}, true},
		{"main container changed after signing", signed("web"), func(rt *flotillav1.RevisionTemplate) { rt.MainContainer = "proxy" }, false},
		{"main container removed after signing", signed("proxy"), func(rt *flotillav1.RevisionTemplate) { rt.MainContainer = "" }, false},
		{"main container added after signing", signed(""), func(rt *flotillav1.RevisionTemplate) { rt.MainContainer = "proxy" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := tc.rt
			tc.change(&rt)
			if got := Verify(&rt, testKey); got != tc.want {
				t.Errorf("Verify = %v, want %v", got, tc.want)
			}
		})
	}

	// A template signed before spec.mainContainer existed still verifies:
	// its digest is recorded from that code.
	t.Run("a digest from before mainContainer still verifies", func(t *testing.T) {
		rt := Revision(&flotillav1.MyAppSpec{Image: "registry.example.com/team/web:1.0", Template: &flotillav1.PodTemplate{Command: []string{"/web"}}})
		if rt.Name != "855757eb1c" {
			t.Fatalf("revision name = %s, want 855757eb1c", rt.Name)
		}
		rt.Digest = "b8b3401f5aa59bf8b607066fc627f01be63003bc15d825f9c3dfe067232fde7e"
		if !Verify(&rt, testKey) {
			t.Error("the old hub's digest does not verify")
		}
		rt.MainContainer = "app"
		if Verify(&rt, testKey) {
			t.Error("the old digest verifies with a main container added")
		}
	})
}
