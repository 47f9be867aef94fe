package render

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func newApp(opts ...func(*flotillav1.MyApp)) *flotillav1.MyApp {
	a := &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       flotillav1.MyAppSpec{Image: "registry.example.com/team/web:1.0", Replicas: ptr.To[int32](3)},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

func withOverrides(os ...flotillav1.ClusterOverride) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) { a.Spec.Overrides = os }
}

func member(name, region string, labels map[string]string) *flotillav1.MemberCluster {
	return &flotillav1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       flotillav1.MemberClusterSpec{Region: region},
	}
}

func env(kv ...string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i := 0; i < len(kv); i += 2 {
		out = append(out, corev1.EnvVar{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

func TestOverridesFor(t *testing.T) {
	eu := member("eu-1", "eu-west", map[string]string{"tier": "gold"})
	everyCluster := flotillav1.ClusterAffinity{}
	euRegion := flotillav1.ClusterAffinity{FieldSelector: &flotillav1.FieldSelector{MatchExpressions: []flotillav1.FieldSelectorRequirement{
		{Key: flotillav1.ClusterFieldRegion, Operator: corev1.NodeSelectorOpIn, Values: []string{"eu-west"}},
	}}}
	gold := flotillav1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}
	otherCluster := flotillav1.ClusterAffinity{ClusterNames: []string{"us-1"}}

	tests := []struct {
		name      string
		overrides []flotillav1.ClusterOverride
		mc        *flotillav1.MemberCluster
		want      ClusterOverrides
		wantErr   string
	}{{
		name: "no overrides",
		mc:   eu,
	}, {
		name: "a cluster the hub does not know gets no overrides",
		overrides: []flotillav1.ClusterOverride{
			{Name: "all", TargetCluster: everyCluster, Replicas: ptr.To[int32](1)},
		},
	}, {
		name: "an override that selects other clusters does not apply",
		overrides: []flotillav1.ClusterOverride{
			{Name: "us", TargetCluster: otherCluster, Replicas: ptr.To[int32](1), Env: env("A", "1"), Image: &flotillav1.ImageOverride{Tag: "x"}},
		},
		mc: eu,
	}, {
		name: "one override by region",
		overrides: []flotillav1.ClusterOverride{
			{Name: "eu", TargetCluster: euRegion, Image: &flotillav1.ImageOverride{Registry: "mirror.eu:5000"}, Replicas: ptr.To[int32](4), Env: env("REGION", "eu")},
		},
		mc:   eu,
		want: ClusterOverrides{image: &flotillav1.ImageOverride{Registry: "mirror.eu:5000"}, replicas: ptr.To[int32](4), env: env("REGION", "eu")},
	}, {
		name: "several overrides apply in list order: image parts merge, later parts, replicas and env values win, env keeps first-set order",
		overrides: []flotillav1.ClusterOverride{
			{Name: "all", TargetCluster: everyCluster, Image: &flotillav1.ImageOverride{Registry: "mirror.example.com", Tag: "1.1"}, Replicas: ptr.To[int32](2), Env: env("A", "all", "B", "all")},
			{Name: "us-only", TargetCluster: otherCluster, Image: &flotillav1.ImageOverride{Tag: "us"}, Replicas: ptr.To[int32](9), Env: env("A", "us")},
			{Name: "eu", TargetCluster: euRegion, Image: &flotillav1.ImageOverride{Repository: "team/web-eu"}, Env: env("B", "eu", "C", "eu")},
			{Name: "gold", TargetCluster: gold, Image: &flotillav1.ImageOverride{Tag: "1.2"}, Replicas: ptr.To[int32](5), Env: env("A", "gold")},
		},
		mc: eu,
		want: ClusterOverrides{
			image:    &flotillav1.ImageOverride{Registry: "mirror.example.com", Repository: "team/web-eu", Tag: "1.2"},
			replicas: ptr.To[int32](5),
			env:      env("A", "gold", "B", "eu", "C", "eu"),
		},
	}, {
		name: "a later override without replicas keeps an earlier one's, and replicas 0 is an override",
		overrides: []flotillav1.ClusterOverride{
			{Name: "zero", TargetCluster: everyCluster, Replicas: ptr.To[int32](0)},
			{Name: "env", TargetCluster: everyCluster, Env: env("A", "1")},
		},
		mc:   eu,
		want: ClusterOverrides{replicas: ptr.To[int32](0), env: env("A", "1")},
	}, {
		name: "node selectors merge with later values winning; tolerations add up, each once",
		overrides: []flotillav1.ClusterOverride{
			{Name: "all", TargetCluster: everyCluster, NodeSelector: map[string]string{"pool": "general", "arch": "amd64"},
				Tolerations: []corev1.Toleration{{Key: "team", Value: "shop"}}},
			{Name: "us", TargetCluster: otherCluster, NodeSelector: map[string]string{"pool": "us"}, Tolerations: []corev1.Toleration{{Key: "us"}}},
			{Name: "gold", TargetCluster: gold, NodeSelector: map[string]string{"pool": "gpu"},
				Tolerations: []corev1.Toleration{{Key: "team", Value: "shop"}, {Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}},
		},
		mc: eu,
		want: ClusterOverrides{
			nodeSelector: map[string]string{"pool": "gpu", "arch": "amd64"},
			tolerations:  []corev1.Toleration{{Key: "team", Value: "shop"}, {Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}, {
		name: "an invalid selector is an error naming the override",
		overrides: []flotillav1.ClusterOverride{
			{Name: "ok", TargetCluster: everyCluster, Replicas: ptr.To[int32](1)},
			{Name: "broken", TargetCluster: flotillav1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}}, Replicas: ptr.To[int32](1)},
		},
		mc:      eu,
		wantErr: "spec.overrides[1] (broken)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newApp(withOverrides(tt.overrides...))
			before := a.DeepCopy()
			got, err := OverridesFor(a, tt.mc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.image, tt.want.image) {
				t.Errorf("image = %+v, want %+v", got.image, tt.want.image)
			}
			if !equality.Semantic.DeepEqual(got.replicas, tt.want.replicas) {
				t.Errorf("replicas = %v, want %v", ptr.Deref(got.replicas, -1), ptr.Deref(tt.want.replicas, -1))
			}
			if !equality.Semantic.DeepEqual(got.env, tt.want.env) {
				t.Errorf("env = %v, want %v", got.env, tt.want.env)
			}
			if !equality.Semantic.DeepEqual(got.nodeSelector, tt.want.nodeSelector) || !equality.Semantic.DeepEqual(got.tolerations, tt.want.tolerations) {
				t.Errorf("nodeSelector %v, tolerations %v; want %v, %v", got.nodeSelector, got.tolerations, tt.want.nodeSelector, tt.want.tolerations)
			}
			if !equality.Semantic.DeepEqual(a, before) {
				t.Error("OverridesFor changed the MyApp")
			}
		})
	}
}

func TestSplitImage(t *testing.T) {
	tests := []struct {
		image                             string
		registry, repository, tag, digest string
	}{
		{"nginx", "", "nginx", "", ""},
		{"nginx:1.25", "", "nginx", "1.25", ""},
		{"library/nginx:1.25-alpine", "", "library/nginx", "1.25-alpine", ""},
		{"registry.example.com/team/web:1.2", "registry.example.com", "team/web", "1.2", ""},
		{"registry.example.com:5000/team/web:1.2", "registry.example.com:5000", "team/web", "1.2", ""},
		{"registry.example.com:5000/team/web", "registry.example.com:5000", "team/web", "", ""},
		{"registry:5000/web", "registry:5000", "web", "", ""},
		{"localhost/web", "localhost", "web", "", ""},
		{"localhost:5000/web:dev", "localhost:5000", "web", "dev", ""},
		{"web@" + digest, "", "web", "", digest},
		{"registry.example.com:5000/team/web:1.2@" + digest, "registry.example.com:5000", "team/web", "1.2", digest},
		{"10.0.0.1:5000/web:1", "10.0.0.1:5000", "web", "1", ""},
		{"a.b.c/d/e/f:g", "a.b.c", "d/e/f", "g", ""},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			r, repo, tag, d := splitImage(tt.image)
			if r != tt.registry || repo != tt.repository || tag != tt.tag || d != tt.digest {
				t.Errorf("got %q %q %q %q, want %q %q %q %q", r, repo, tag, d, tt.registry, tt.repository, tt.tag, tt.digest)
			}
		})
	}
}

func TestOverrideImage(t *testing.T) {
	tests := []struct {
		name  string
		image string
		o     *flotillav1.ImageOverride
		want  string
	}{
		{"no override", "registry.example.com/team/web:1.0", nil, "registry.example.com/team/web:1.0"},
		{"an empty override changes nothing", "registry.example.com:5000/team/web:1.0@" + digest, &flotillav1.ImageOverride{}, "registry.example.com:5000/team/web:1.0@" + digest},
		{"registry added to an image without one", "nginx:1.25", &flotillav1.ImageOverride{Registry: "mirror.example.com"}, "mirror.example.com/nginx:1.25"},
		{"registry with a port replaces one with a port", "registry.example.com:5000/team/web:1.0", &flotillav1.ImageOverride{Registry: "mirror.example.com:6000"}, "mirror.example.com:6000/team/web:1.0"},
		{"registry replaces localhost", "localhost:5000/web:dev", &flotillav1.ImageOverride{Registry: "mirror.example.com"}, "mirror.example.com/web:dev"},
		{"registry override keeps the digest", "registry.example.com/web@" + digest, &flotillav1.ImageOverride{Registry: "mirror.example.com"}, "mirror.example.com/web@" + digest},
		{"repository keeps registry and tag", "registry.example.com:5000/team/web:1.0", &flotillav1.ImageOverride{Repository: "other/app"}, "registry.example.com:5000/other/app:1.0"},
		{"tag added to an image without one", "registry.example.com:5000/team/web", &flotillav1.ImageOverride{Tag: "2.0"}, "registry.example.com:5000/team/web:2.0"},
		{"tag replaces the tag", "localhost:5000/web:dev", &flotillav1.ImageOverride{Tag: "prod"}, "localhost:5000/web:prod"},
		{"tag override drops the digest", "registry.example.com/team/web:1.0@" + digest, &flotillav1.ImageOverride{Tag: "2.0"}, "registry.example.com/team/web:2.0"},
		{"tag override drops a digest without a tag", "web@" + digest, &flotillav1.ImageOverride{Tag: "2.0"}, "web:2.0"},
		{"all three", "nginx", &flotillav1.ImageOverride{Registry: "mirror.example.com:5000", Repository: "library/nginx", Tag: "1.27"}, "mirror.example.com:5000/library/nginx:1.27"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OverrideImage(tt.image, tt.o); got != tt.want {
				t.Errorf("OverrideImage(%q, %+v) = %q, want %q", tt.image, tt.o, got, tt.want)
			}
		})
	}
}

func TestDeployment(t *testing.T) {
	template := &flotillav1.PodTemplate{
		Labels:      map[string]string{"team": "shop", flotillav1.LabelMyAppName: "spoofed", flotillav1.LabelMyAppNamespace: "spoofed"},
		Annotations: map[string]string{"prometheus.io/scrape": "true"},
		Command:     []string{"/web"},
		Args:        []string{"--port=8080"},
		Ports:       []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		Env:         env("A", "1", "B", "2"),
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
		}},
	}
	selector := map[string]string{flotillav1.LabelMyAppNamespace: "shop", flotillav1.LabelMyAppName: "web"}

	t.Run("selector labels win over user labels of the same keys, other user labels stay", func(t *testing.T) {
		d := mustDeployment(t, newApp(func(a *flotillav1.MyApp) { a.Spec.Template = template }), 3, ClusterOverrides{})
		if !maps.Equal(d.Spec.Selector.MatchLabels, selector) {
			t.Errorf("selector = %v, want %v", d.Spec.Selector.MatchLabels, selector)
		}
		want := map[string]string{"team": "shop", flotillav1.LabelMyAppNamespace: "shop", flotillav1.LabelMyAppName: "web"}
		if !maps.Equal(d.Spec.Template.Labels, want) {
			t.Errorf("pod labels = %v, want %v", d.Spec.Template.Labels, want)
		}
		if template.Labels[flotillav1.LabelMyAppName] != "spoofed" {
			t.Error("rendering changed the MyApp's template labels")
		}
		wantLabels := map[string]string{"app.kubernetes.io/name": "web", "app.kubernetes.io/managed-by": "flotilla",
			flotillav1.LabelMyAppNamespace: "shop", flotillav1.LabelMyAppName: "web"}
		if !maps.Equal(d.Labels, wantLabels) {
			t.Errorf("Deployment labels = %v, want %v", d.Labels, wantLabels)
		}
	})

	t.Run("the template is copied into one container named app", func(t *testing.T) {
		d := mustDeployment(t, newApp(func(a *flotillav1.MyApp) { a.Spec.Template = template }), 3, ClusterOverrides{})
		if d.APIVersion != "apps/v1" || d.Kind != "Deployment" || d.Name != "web" || d.Namespace != "shop" {
			t.Errorf("object is %s %s %s/%s", d.APIVersion, d.Kind, d.Namespace, d.Name)
		}
		if n := len(d.Spec.Template.Spec.Containers); n != 1 {
			t.Fatalf("%d containers, want 1", n)
		}
		c := d.Spec.Template.Spec.Containers[0]
		want := corev1.Container{Name: ContainerName, Image: "registry.example.com/team/web:1.0", Command: template.Command, Args: template.Args,
			Ports: template.Ports, Env: template.Env, Resources: template.Resources}
		if !equality.Semantic.DeepEqual(c, want) {
			t.Errorf("container = %+v, want %+v", c, want)
		}
		if !maps.Equal(d.Spec.Template.Annotations, template.Annotations) {
			t.Errorf("pod annotations = %v", d.Spec.Template.Annotations)
		}
		if *d.Spec.Replicas != 3 {
			t.Errorf("replicas = %d, want the scheduled 3", *d.Spec.Replicas)
		}
	})

	t.Run("without a template: no annotations, no env, the selector labels only", func(t *testing.T) {
		d := mustDeployment(t, newApp(), 0, ClusterOverrides{})
		if d.Spec.Template.Annotations != nil {
			t.Errorf("annotations = %v, want none", d.Spec.Template.Annotations)
		}
		if !maps.Equal(d.Spec.Template.Labels, selector) {
			t.Errorf("pod labels = %v, want %v", d.Spec.Template.Labels, selector)
		}
		if c := d.Spec.Template.Spec.Containers[0]; len(c.Env) != 0 || c.Image != "registry.example.com/team/web:1.0" {
			t.Errorf("container = %+v", c)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			t.Errorf("replicas = %v, want 0 (scaled to zero, not unset)", d.Spec.Replicas)
		}
	})

	t.Run("override env replaces variables in place and appends new ones after the template's", func(t *testing.T) {
		d := mustDeployment(t, newApp(func(a *flotillav1.MyApp) { a.Spec.Template = template }), 3, ClusterOverrides{env: env("C", "3", "A", "override")})
		want := env("A", "override", "B", "2", "C", "3")
		if got := d.Spec.Template.Spec.Containers[0].Env; !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("env = %v, want %v", got, want)
		}
		if template.Env[0].Value != "1" {
			t.Error("rendering changed the MyApp's template env")
		}
	})

	t.Run("replicas and image overrides win over the scheduled replicas and spec.image", func(t *testing.T) {
		d := mustDeployment(t, newApp(), 3, ClusterOverrides{replicas: ptr.To[int32](7), image: &flotillav1.ImageOverride{Tag: "2.0"}})
		if *d.Spec.Replicas != 7 {
			t.Errorf("replicas = %d, want the override's 7", *d.Spec.Replicas)
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.example.com/team/web:2.0" {
			t.Errorf("image = %s", img)
		}
	})

	t.Run("strategy, minReadySeconds, progressDeadlineSeconds and revisionHistoryLimit pass through, copied", func(t *testing.T) {
		strategy := &appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromString("50%")),
		}}
		app := newApp(func(a *flotillav1.MyApp) {
			a.Spec.Strategy = strategy
			a.Spec.MinReadySeconds = ptr.To[int32](5)
			a.Spec.ProgressDeadlineSeconds = ptr.To[int32](120)
			a.Spec.RevisionHistoryLimit = ptr.To[int32](2)
		})
		d := mustDeployment(t, app, 3, ClusterOverrides{})
		if !equality.Semantic.DeepEqual(d.Spec.Strategy, *strategy) {
			t.Errorf("strategy = %+v, want %+v", d.Spec.Strategy, *strategy)
		}
		if d.Spec.MinReadySeconds != 5 || ptr.Deref(d.Spec.ProgressDeadlineSeconds, 0) != 120 || ptr.Deref(d.Spec.RevisionHistoryLimit, 0) != 2 {
			t.Errorf("minReadySeconds %d, progressDeadlineSeconds %v, revisionHistoryLimit %v; want 5, 120, 2",
				d.Spec.MinReadySeconds, d.Spec.ProgressDeadlineSeconds, d.Spec.RevisionHistoryLimit)
		}
		d.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(9))
		*d.Spec.RevisionHistoryLimit = 9
		if app.Spec.Strategy.RollingUpdate.MaxSurge.IntValue() != 0 || *app.Spec.RevisionHistoryLimit != 2 {
			t.Error("the rendered Deployment shares the MyApp's strategy or limits")
		}
	})

	t.Run("override node selector and tolerations reach the pod spec, copied", func(t *testing.T) {
		ov := ClusterOverrides{nodeSelector: map[string]string{"pool": "gpu"},
			tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)}}}
		d := mustDeployment(t, newApp(), 1, ov)
		spec := d.Spec.Template.Spec
		if !maps.Equal(spec.NodeSelector, ov.nodeSelector) || !equality.Semantic.DeepEqual(spec.Tolerations, ov.tolerations) {
			t.Errorf("nodeSelector %v, tolerations %v; want the override's", spec.NodeSelector, spec.Tolerations)
		}
		spec.NodeSelector["pool"] = "changed"
		spec.Tolerations[0].Key = "changed"
		if ov.nodeSelector["pool"] != "gpu" || ov.tolerations[0].Key != "gpu" {
			t.Error("the rendered pod spec shares the overrides' maps or slices")
		}
		if plain := mustDeployment(t, newApp(), 1, ClusterOverrides{}).Spec.Template.Spec; plain.NodeSelector != nil || plain.Tolerations != nil {
			t.Errorf("without overrides: nodeSelector %v, tolerations %v; want none", plain.NodeSelector, plain.Tolerations)
		}
	})

	t.Run("unset knobs stay unset: the member's apiserver defaults them", func(t *testing.T) {
		d := mustDeployment(t, newApp(), 3, ClusterOverrides{})
		if !equality.Semantic.DeepEqual(d.Spec.Strategy, appsv1.DeploymentStrategy{}) || d.Spec.MinReadySeconds != 0 ||
			d.Spec.ProgressDeadlineSeconds != nil || d.Spec.RevisionHistoryLimit != nil {
			t.Errorf("strategy %+v, minReadySeconds %d, progressDeadlineSeconds %v, revisionHistoryLimit %v; want all unset",
				d.Spec.Strategy, d.Spec.MinReadySeconds, d.Spec.ProgressDeadlineSeconds, d.Spec.RevisionHistoryLimit)
		}
		raw, err := manifestJSON(d)
		if err != nil {
			t.Fatal(err)
		}
		// (An empty "strategy": {} was always there: a struct is never
		// omitted; the member defaults it.)
		for _, field := range []string{"minReadySeconds", "progressDeadlineSeconds", "revisionHistoryLimit"} {
			if strings.Contains(string(raw), `"`+field+`"`) {
				t.Errorf("the manifest of an app without %s carries it: %s", field, raw)
			}
		}
	})

	t.Run("targetNamespace places the Deployment; the selector still names the MyApp's namespace", func(t *testing.T) {
		d := mustDeployment(t, newApp(func(a *flotillav1.MyApp) { a.Spec.TargetNamespace = "prod" }), 1, ClusterOverrides{})
		if d.Namespace != "prod" || d.Spec.Selector.MatchLabels[flotillav1.LabelMyAppNamespace] != "shop" {
			t.Errorf("namespace %s, selector %v", d.Namespace, d.Spec.Selector.MatchLabels)
		}
	})
}

func TestWork(t *testing.T) {
	a := newApp(withOverrides(flotillav1.ClusterOverride{
		Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}}, Replicas: ptr.To[int32](5),
	}))
	tests := []struct {
		name         string
		cluster      string
		mc           *flotillav1.MemberCluster
		wantReplicas int32
	}{
		{"an overridden cluster asks for the override's replicas", "eu-1", member("eu-1", "", nil), 5},
		{"another cluster asks for the scheduled replicas", "us-1", member("us-1", "", nil), 2},
		{"a cluster the hub no longer knows gets no override", "eu-1", nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, replicas, err := Work(a, tt.cluster, tt.mc, 2, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if replicas != tt.wantReplicas {
				t.Errorf("replicas = %d, want %d", replicas, tt.wantReplicas)
			}
			if w.Name != "shop.web" || w.Namespace != "flotilla-cluster-"+tt.cluster || w.APIVersion != "flotilla.dev/v1alpha1" || w.Kind != "Work" {
				t.Errorf("Work is %s %s %s/%s", w.APIVersion, w.Kind, w.Namespace, w.Name)
			}
			wantLabels := map[string]string{flotillav1.LabelMyAppNamespace: "shop", flotillav1.LabelMyAppName: "web", flotillav1.LabelCluster: tt.cluster}
			if !maps.Equal(w.Labels, wantLabels) {
				t.Errorf("labels = %v, want %v", w.Labels, wantLabels)
			}
			if len(w.Spec.Manifests) != 1 {
				t.Fatalf("%d manifests, want 1", len(w.Spec.Manifests))
			}
			var d appsv1.Deployment
			if err := json.Unmarshal(w.Spec.Manifests[0].Raw, &d); err != nil {
				t.Fatal(err)
			}
			if d.Kind != "Deployment" || d.APIVersion != "apps/v1" || *d.Spec.Replicas != tt.wantReplicas {
				t.Errorf("manifest is %s %s with %d replicas", d.APIVersion, d.Kind, *d.Spec.Replicas)
			}
			if w.Spec.PodSecurity != "" {
				t.Errorf("podSecurity = %q without a level, want empty (the agent's default)", w.Spec.PodSecurity)
			}
		})
	}

	t.Run("the Pod Security level is rendered into the Work", func(t *testing.T) {
		w, _, err := Work(a, "us-1", member("us-1", "", nil), 1, flotillav1.PodSecurityRestricted, nil)
		if err != nil {
			t.Fatal(err)
		}
		if w.Spec.PodSecurity != flotillav1.PodSecurityRestricted {
			t.Errorf("podSecurity = %q, want restricted", w.Spec.PodSecurity)
		}
	})

	t.Run("an invalid override selector is an error", func(t *testing.T) {
		bad := newApp(withOverrides(flotillav1.ClusterOverride{Name: "bad", TargetCluster: flotillav1.ClusterAffinity{
			FieldSelector: &flotillav1.FieldSelector{MatchExpressions: []flotillav1.FieldSelectorRequirement{{Key: "color", Operator: corev1.NodeSelectorOpExists}}},
		}, Replicas: ptr.To[int32](1)}))
		if _, _, err := Work(bad, "eu-1", member("eu-1", "", nil), 1, "", nil); err == nil || !strings.Contains(err.Error(), "spec.overrides[0] (bad)") {
			t.Errorf("error = %v", err)
		}
	})
}

func TestManifestJSONLeavesOutServerFields(t *testing.T) {
	d := mustDeployment(t, newApp(), 1, ClusterOverrides{})
	// Fields a typed object always encodes, even when zero.
	d.Status = appsv1.DeploymentStatus{Replicas: 1}
	raw, err := manifestJSON(d)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["status"]; ok {
		t.Error("manifest has status")
	}
	md := m["metadata"].(map[string]any)
	if _, ok := md["creationTimestamp"]; ok {
		t.Error("manifest has metadata.creationTimestamp")
	}
	tmd := m["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
	if _, ok := tmd["creationTimestamp"]; ok {
		t.Error("manifest has spec.template.metadata.creationTimestamp")
	}
	if m["apiVersion"] != "apps/v1" || m["kind"] != "Deployment" || md["name"] != "web" {
		t.Errorf("manifest lost its identity: %s", raw)
	}
	// Rendering the same thing twice gives the same bytes.
	again, _ := manifestJSON(mustDeployment(t, newApp(), 1, ClusterOverrides{}))
	if !SameManifests([]flotillav1.Manifest{{RawExtension: runtime.RawExtension{Raw: raw}}}, []flotillav1.Manifest{{RawExtension: runtime.RawExtension{Raw: again}}}) {
		t.Errorf("two renderings differ:\n%s\n%s", raw, again)
	}
}

func TestSameManifests(t *testing.T) {
	m := func(raw ...string) []flotillav1.Manifest {
		var out []flotillav1.Manifest
		for _, r := range raw {
			out = append(out, flotillav1.Manifest{RawExtension: runtime.RawExtension{Raw: []byte(r)}})
		}
		return out
	}
	tests := []struct {
		name string
		a, b []flotillav1.Manifest
		want bool
	}{
		{"both empty", nil, m(), true},
		{"identical", m(`{"a":1}`), m(`{"a":1}`), true},
		{"key order does not count", m(`{"kind":"Deployment","spec":{"replicas":2,"paused":false}}`), m(`{"spec":{"paused":false,"replicas":2},"kind":"Deployment"}`), true},
		{"white space does not count", m(`{"a": [1, 2]}`), m("{\n  \"a\":[1,2]\n}"), true},
		{"number spelling does not count", m(`{"replicas":2}`), m(`{"replicas":2.0}`), true},
		{"a changed value counts", m(`{"spec":{"replicas":2}}`), m(`{"spec":{"replicas":3}}`), false},
		{"a missing key counts", m(`{"a":1,"b":null}`), m(`{"a":1}`), false},
		{"list order counts", m(`{"a":[1,2]}`), m(`{"a":[2,1]}`), false},
		{"manifest order counts", m(`{"a":1}`, `{"b":1}`), m(`{"b":1}`, `{"a":1}`), false},
		{"a different number of manifests counts", m(`{"a":1}`), m(`{"a":1}`, `{"a":1}`), false},
		{"invalid JSON is never the same, even as the same bytes", m(`{"a":`), m(`{"a":`), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SameManifests(tt.a, tt.b); got != tt.want {
				t.Errorf("SameManifests = %t, want %t", got, tt.want)
			}
			if got := SameManifests(tt.b, tt.a); got != tt.want {
				t.Errorf("SameManifests (swapped) = %t, want %t", got, tt.want)
			}
		})
	}
}
