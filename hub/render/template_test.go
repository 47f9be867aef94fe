package render

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// rl builds a ResourceList from name, quantity pairs.
func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// fullTemplate is a pod template with a full spec: the main container
// "web" (no image: spec.image goes there) first, a sidecar "proxy" with an
// image of its own, an init container, a volume, probes, a service
// account, a pull secret, a node selector and a toleration.
func fullTemplate() *flotillav1.PodTemplate {
	return &flotillav1.PodTemplate{
		Metadata: &flotillav1.PodTemplateMetadata{
			Labels:      map[string]string{"team": "shop", "tier": "web"},
			Annotations: map[string]string{"prometheus.io/scrape": "true"},
		},
		Spec: &corev1.PodSpec{
			ServiceAccountName: "web-sa",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
			InitContainers: []corev1.Container{{
				Name: "migrate", Image: "registry.example.com/team/migrate:1", Command: []string{"/migrate"},
				Resources: corev1.ResourceRequirements{Requests: rl("cpu", "500m")},
			}},
			Containers: []corev1.Container{{
				Name:  "web",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:   env("A", "1", "B", "2"),
				Resources: corev1.ResourceRequirements{
					Requests: rl("cpu", "100m", "memory", "64Mi"),
					Limits:   rl("memory", "128Mi"),
				},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstr.FromString("http"),
				}}, PeriodSeconds: 10},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
					Port: intstr.FromInt32(8080),
				}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
			}, {
				Name:      "proxy",
				Image:     "envoyproxy/envoy:v1.30",
				Env:       env("PROXY", "1"),
				Resources: corev1.ResourceRequirements{Requests: rl("cpu", "50m")},
			}},
			Volumes:      []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			NodeSelector: map[string]string{"pool": "general", "arch": "amd64"},
			Tolerations:  []corev1.Toleration{{Key: "team", Operator: corev1.TolerationOpEqual, Value: "shop", Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

// withTemplate sets spec.template, and spec.mainContainer when main is
// given.
func withTemplate(t *flotillav1.PodTemplate, main ...string) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) {
		a.Spec.Template = t
		if len(main) > 0 {
			a.Spec.MainContainer = main[0]
		}
	}
}

// TestDeploymentFullTemplate renders a full pod template and compares the
// whole pod spec with the template's own, changed only where the case
// says: spec.image and the image, env and resources overrides reach the
// main container and nothing else; node selector and tolerations
// overrides merge with the template's.
func TestDeploymentFullTemplate(t *testing.T) {
	const image = "registry.example.com/team/web:1.0"
	tests := []struct {
		name string
		// tmpl changes fullTemplate() before rendering.
		tmpl func(*flotillav1.PodTemplate)
		main string
		ov   ClusterOverrides
		// want changes the template's spec into the rendered one.
		want func(*corev1.PodSpec)
	}{{
		name: "as given, with spec.image on the first container by default",
		want: func(s *corev1.PodSpec) { s.Containers[0].Image = image },
	}, {
		name: "spec.mainContainer naming the first container is the default",
		main: "web",
		want: func(s *corev1.PodSpec) { s.Containers[0].Image = image },
	}, {
		name: "spec.mainContainer names the second container: spec.image goes there, the first keeps its own",
		tmpl: func(p *flotillav1.PodTemplate) {
			p.Spec.Containers[0].Image = "registry.example.com/team/web:0.9"
			p.Spec.Containers[1].Image = ""
		},
		main: "proxy",
		want: func(s *corev1.PodSpec) { s.Containers[1].Image = image },
	}, {
		name: "an image override changes the main container only",
		ov:   ClusterOverrides{image: &flotillav1.ImageOverride{Registry: "mirror.eu", Tag: "2.0"}},
		want: func(s *corev1.PodSpec) { s.Containers[0].Image = "mirror.eu/team/web:2.0" },
	}, {
		name: "an image override changes the named main container only",
		tmpl: func(p *flotillav1.PodTemplate) {
			p.Spec.Containers[0].Image = "registry.example.com/team/web:0.9"
			p.Spec.Containers[1].Image = ""
		},
		main: "proxy",
		ov:   ClusterOverrides{image: &flotillav1.ImageOverride{Tag: "2.0"}},
		want: func(s *corev1.PodSpec) { s.Containers[1].Image = "registry.example.com/team/web:2.0" },
	}, {
		name: "an env override replaces and appends on the main container only",
		ov:   ClusterOverrides{env: env("C", "3", "A", "override", "PROXY", "main")},
		want: func(s *corev1.PodSpec) {
			s.Containers[0].Image = image
			s.Containers[0].Env = env("A", "override", "B", "2", "C", "3", "PROXY", "main")
		},
	}, {
		name: "a resources override replaces per resource name on the main container only",
		ov: ClusterOverrides{resources: &corev1.ResourceRequirements{
			Requests: rl("cpu", "250m"),
			Limits:   rl("memory", "256Mi", "cpu", "1"),
		}},
		want: func(s *corev1.PodSpec) {
			s.Containers[0].Image = image
			s.Containers[0].Resources = corev1.ResourceRequirements{
				Requests: rl("cpu", "250m", "memory", "64Mi"),
				Limits:   rl("memory", "256Mi", "cpu", "1"),
			}
		},
	}, {
		name: "a resources override on a main container without resources sets them",
		tmpl: func(p *flotillav1.PodTemplate) { p.Spec.Containers[0].Resources = corev1.ResourceRequirements{} },
		ov:   ClusterOverrides{resources: &corev1.ResourceRequirements{Requests: rl("memory", "1Gi")}},
		want: func(s *corev1.PodSpec) {
			s.Containers[0].Image = image
			s.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("memory", "1Gi")}
		},
	}, {
		name: "a resources override reaches the named main container only",
		tmpl: func(p *flotillav1.PodTemplate) {
			p.Spec.Containers[0].Image = "registry.example.com/team/web:0.9"
			p.Spec.Containers[1].Image = ""
		},
		main: "proxy",
		ov:   ClusterOverrides{resources: &corev1.ResourceRequirements{Requests: rl("cpu", "75m")}},
		want: func(s *corev1.PodSpec) {
			s.Containers[1].Image = image
			s.Containers[1].Resources = corev1.ResourceRequirements{Requests: rl("cpu", "75m")}
		},
	}, {
		name: "an override node selector merges with the template's, the override winning per key",
		ov:   ClusterOverrides{nodeSelector: map[string]string{"pool": "gpu", "gpu": "a100"}},
		want: func(s *corev1.PodSpec) {
			s.Containers[0].Image = image
			s.NodeSelector = map[string]string{"pool": "gpu", "arch": "amd64", "gpu": "a100"}
		},
	}, {
		name: "override tolerations add to the template's, one the template has is not repeated",
		ov: ClusterOverrides{tolerations: []corev1.Toleration{
			{Key: "team", Operator: corev1.TolerationOpEqual, Value: "shop", Effect: corev1.TaintEffectNoSchedule},
			{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		}},
		want: func(s *corev1.PodSpec) {
			s.Containers[0].Image = image
			s.Tolerations = []corev1.Toleration{
				{Key: "team", Operator: corev1.TolerationOpEqual, Value: "shop", Effect: corev1.TaintEffectNoSchedule},
				{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			}
		},
	}, {
		name: "a node selector and tolerations override on a template without either sets them",
		tmpl: func(p *flotillav1.PodTemplate) { p.Spec.NodeSelector, p.Spec.Tolerations = nil, nil },
		ov: ClusterOverrides{nodeSelector: map[string]string{"pool": "gpu"},
			tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}},
		want: func(s *corev1.PodSpec) {
			s.Containers[0].Image = image
			s.NodeSelector = map[string]string{"pool": "gpu"}
			s.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}
		},
	}, {
		name: "replicas and every typed override together",
		ov: ClusterOverrides{
			replicas:     ptr.To[int32](9),
			image:        &flotillav1.ImageOverride{Tag: "3.0"},
			env:          env("B", "eu"),
			resources:    &corev1.ResourceRequirements{Limits: rl("memory", "512Mi")},
			nodeSelector: map[string]string{"arch": "arm64"},
			tolerations:  []corev1.Toleration{{Key: "arm", Operator: corev1.TolerationOpExists}},
		},
		want: func(s *corev1.PodSpec) {
			s.Containers[0].Image = "registry.example.com/team/web:3.0"
			s.Containers[0].Env = env("A", "1", "B", "eu")
			s.Containers[0].Resources.Limits = rl("memory", "512Mi")
			s.NodeSelector = map[string]string{"pool": "general", "arch": "arm64"}
			s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: "arm", Operator: corev1.TolerationOpExists})
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := fullTemplate()
			if tt.tmpl != nil {
				tt.tmpl(tmpl)
			}
			want := tmpl.Spec.DeepCopy()
			tt.want(want)
			app := newApp(withTemplate(tmpl, tt.main))
			d := mustDeployment(t, app, 3, tt.ov)
			got := d.Spec.Template.Spec
			if !equality.Semantic.DeepEqual(got, *want) {
				t.Errorf("pod spec differs from the expected one:\n got %+v\nwant %+v", got, *want)
			}
			// The fields the template carries through, named one by one
			// (the comparison above covers them; these say what broke).
			if got.ServiceAccountName != "web-sa" {
				t.Errorf("serviceAccountName = %q, want web-sa", got.ServiceAccountName)
			}
			if len(got.ImagePullSecrets) != 1 || got.ImagePullSecrets[0].Name != "regcred" {
				t.Errorf("imagePullSecrets = %v, want regcred", got.ImagePullSecrets)
			}
			if len(got.InitContainers) != 1 || got.InitContainers[0].Name != "migrate" || got.InitContainers[0].Image != "registry.example.com/team/migrate:1" {
				t.Errorf("initContainers = %+v, want migrate with its own image", got.InitContainers)
			}
			if len(got.Volumes) != 1 || got.Volumes[0].Name != "cache" || got.Volumes[0].EmptyDir == nil {
				t.Errorf("volumes = %+v, want the emptyDir cache", got.Volumes)
			}
			if n := len(got.Containers); n != 2 {
				t.Fatalf("%d containers, want 2", n)
			}
			if p := got.Containers[0].LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.PeriodSeconds != 10 {
				t.Errorf("web livenessProbe = %+v, want GET /healthz every 10s", p)
			}
			if p := got.Containers[0].ReadinessProbe; p == nil || p.TCPSocket == nil || p.TCPSocket.Port.IntValue() != 8080 {
				t.Errorf("web readinessProbe = %+v, want tcp 8080", p)
			}
			if got.Containers[0].Name != "web" || got.Containers[1].Name != "proxy" {
				t.Errorf("container names = %s, %s; want web, proxy (in the template's order)", got.Containers[0].Name, got.Containers[1].Name)
			}
			if *d.Spec.Replicas != ptr.Deref(tt.ov.replicas, 3) {
				t.Errorf("replicas = %d, want %d", *d.Spec.Replicas, ptr.Deref(tt.ov.replicas, 3))
			}
		})
	}
}

// TestDeploymentOverridesForResources goes from the MyApp's overrides to
// the rendered main container: resources overrides selecting a cluster
// merge in list order per resource name; one selecting another cluster
// does not count.
func TestDeploymentOverridesForResources(t *testing.T) {
	eu := member("eu-1", "eu-west", map[string]string{"tier": "gold"})
	all := flotillav1.ClusterAffinity{}
	gold := flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}}
	us := flotillav1.ClusterAffinity{ClusterNames: []string{"us-1"}}
	tests := []struct {
		name      string
		overrides []flotillav1.ClusterOverride
		wantOv    *corev1.ResourceRequirements
		want      corev1.ResourceRequirements // of the main container
	}{{
		name: "no resources override keeps the template's",
		overrides: []flotillav1.ClusterOverride{
			{Name: "env", TargetCluster: all, Env: env("X", "1")},
		},
		want: corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("memory", "128Mi")},
	}, {
		name: "later overrides win per resource name, other names stay",
		overrides: []flotillav1.ClusterOverride{
			{Name: "all", TargetCluster: all, Resources: &corev1.ResourceRequirements{Requests: rl("cpu", "200m", "memory", "96Mi")}},
			{Name: "us", TargetCluster: us, Resources: &corev1.ResourceRequirements{Requests: rl("cpu", "8")}},
			{Name: "gold", TargetCluster: gold, Resources: &corev1.ResourceRequirements{Requests: rl("cpu", "400m"), Limits: rl("memory", "1Gi")}},
		},
		wantOv: &corev1.ResourceRequirements{Requests: rl("cpu", "400m", "memory", "96Mi"), Limits: rl("memory", "1Gi")},
		want:   corev1.ResourceRequirements{Requests: rl("cpu", "400m", "memory", "96Mi"), Limits: rl("memory", "1Gi")},
	}, {
		name: "an override of another cluster only changes nothing",
		overrides: []flotillav1.ClusterOverride{
			{Name: "us", TargetCluster: us, Resources: &corev1.ResourceRequirements{Requests: rl("cpu", "8")}},
		},
		want: corev1.ResourceRequirements{Requests: rl("cpu", "100m", "memory", "64Mi"), Limits: rl("memory", "128Mi")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := newApp(withTemplate(fullTemplate()), withOverrides(tt.overrides...))
			before := app.DeepCopy()
			ov, err := OverridesFor(app, eu)
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(ov.resources, tt.wantOv) {
				t.Errorf("overrides' resources = %+v, want %+v", ov.resources, tt.wantOv)
			}
			d := mustDeployment(t, app, 1, ov)
			if got := d.Spec.Template.Spec.Containers[0].Resources; !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("main container resources = %+v, want %+v", got, tt.want)
			}
			if got := d.Spec.Template.Spec.Containers[1].Resources; !equality.Semantic.DeepEqual(got, corev1.ResourceRequirements{Requests: rl("cpu", "50m")}) {
				t.Errorf("sidecar resources = %+v, want its own cpu 50m", got)
			}
			if !equality.Semantic.DeepEqual(app, before) {
				t.Error("OverridesFor or Deployment changed the MyApp")
			}
		})
	}
}

// TestDeploymentPodMetadata: template.metadata and the first version's
// labels and annotations merge (metadata wins for a key); the selector
// labels win over both.
func TestDeploymentPodMetadata(t *testing.T) {
	sel := map[string]string{flotillav1.LabelMyAppNamespace: "shop", flotillav1.LabelMyAppName: "web"}
	withSel := func(m map[string]string) map[string]string {
		out := maps.Clone(m)
		maps.Copy(out, sel)
		return out
	}
	spoofed := map[string]string{flotillav1.LabelMyAppNamespace: "other", flotillav1.LabelMyAppName: "other"}
	tests := []struct {
		name            string
		tmpl            *flotillav1.PodTemplate
		wantLabels      map[string]string
		wantAnnotations map[string]string
	}{{
		name:       "no template: the selector labels only, no annotations",
		wantLabels: sel,
	}, {
		name:            "shorthand labels and annotations only",
		tmpl:            &flotillav1.PodTemplate{Labels: map[string]string{"team": "shop"}, Annotations: map[string]string{"a": "1"}},
		wantLabels:      withSel(map[string]string{"team": "shop"}),
		wantAnnotations: map[string]string{"a": "1"},
	}, {
		name: "metadata only, with a full spec",
		tmpl: &flotillav1.PodTemplate{
			Metadata: &flotillav1.PodTemplateMetadata{Labels: map[string]string{"tier": "web"}, Annotations: map[string]string{"b": "2"}},
			Spec:     &corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}},
		},
		wantLabels:      withSel(map[string]string{"tier": "web"}),
		wantAnnotations: map[string]string{"b": "2"},
	}, {
		name: "metadata without a spec works with the first version's one container",
		tmpl: &flotillav1.PodTemplate{
			Metadata: &flotillav1.PodTemplateMetadata{Labels: map[string]string{"tier": "web"}},
			Command:  []string{"/web"},
		},
		wantLabels: withSel(map[string]string{"tier": "web"}),
	}, {
		name: "both merge, metadata winning per key; the selector labels win over both",
		tmpl: &flotillav1.PodTemplate{
			Labels:      withSpoof(map[string]string{"team": "shorthand", "x": "1"}, spoofed),
			Annotations: map[string]string{"a": "shorthand", "c": "3"},
			Metadata: &flotillav1.PodTemplateMetadata{
				Labels:      withSpoof(map[string]string{"team": "metadata", "y": "2"}, spoofed),
				Annotations: map[string]string{"a": "metadata", "d": "4"},
			},
			Spec: &corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}},
		},
		wantLabels:      withSel(map[string]string{"team": "metadata", "x": "1", "y": "2"}),
		wantAnnotations: map[string]string{"a": "metadata", "c": "3", "d": "4"},
	}, {
		name: "metadata with only the selector keys cannot take them",
		tmpl: &flotillav1.PodTemplate{
			Metadata: &flotillav1.PodTemplateMetadata{Labels: spoofed},
			Spec:     &corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}},
		},
		wantLabels: sel,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := newApp(withTemplate(tt.tmpl))
			before := app.DeepCopy()
			d := mustDeployment(t, app, 1, ClusterOverrides{})
			if !maps.Equal(d.Spec.Template.Labels, tt.wantLabels) {
				t.Errorf("pod labels = %v, want %v", d.Spec.Template.Labels, tt.wantLabels)
			}
			if !maps.Equal(d.Spec.Template.Annotations, tt.wantAnnotations) || (tt.wantAnnotations == nil) != (d.Spec.Template.Annotations == nil) {
				t.Errorf("pod annotations = %#v, want %#v", d.Spec.Template.Annotations, tt.wantAnnotations)
			}
			if !maps.Equal(d.Spec.Selector.MatchLabels, sel) {
				t.Errorf("selector = %v, want %v", d.Spec.Selector.MatchLabels, sel)
			}
			if !equality.Semantic.DeepEqual(app, before) {
				t.Error("rendering changed the MyApp's template metadata")
			}
		})
	}
}

func withSpoof(m, spoof map[string]string) map[string]string {
	out := maps.Clone(m)
	maps.Copy(out, spoof)
	return out
}

// TestDeploymentTemplateErrors: a template the renderer cannot render is
// an error naming the field path.
func TestDeploymentTemplateErrors(t *testing.T) {
	full := func(f func(*flotillav1.PodTemplate)) *flotillav1.PodTemplate {
		p := fullTemplate()
		f(p)
		return p
	}
	tests := []struct {
		name    string
		tmpl    *flotillav1.PodTemplate
		main    string
		wantErr []string
	}{{
		name:    "the default main container with an image of its own",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Spec.Containers[0].Image = "evil:latest" }),
		wantErr: []string{"spec.template.spec.containers[0].image", "evil:latest"},
	}, {
		name:    "the named main container with an image of its own",
		tmpl:    fullTemplate(), // proxy has envoyproxy/envoy:v1.30
		main:    "proxy",
		wantErr: []string{"spec.template.spec.containers[1].image", "envoyproxy/envoy:v1.30"},
	}, {
		name:    "spec.mainContainer naming no container",
		tmpl:    fullTemplate(),
		main:    "sidecar",
		wantErr: []string{"spec.mainContainer", "sidecar", "names no container"},
	}, {
		name:    "spec.mainContainer naming an init container",
		tmpl:    fullTemplate(),
		main:    "migrate",
		wantErr: []string{"spec.mainContainer", "migrate"},
	}, {
		name:    "spec.mainContainer other than app without template.spec",
		tmpl:    &flotillav1.PodTemplate{Command: []string{"/web"}},
		main:    "web",
		wantErr: []string{"spec.mainContainer", "web"},
	}, {
		name:    "spec.mainContainer other than app without any template",
		main:    "web",
		wantErr: []string{"spec.mainContainer"},
	}, {
		name:    "a template spec without containers",
		tmpl:    &flotillav1.PodTemplate{Spec: &corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}}}},
		wantErr: []string{"spec.template.spec.containers"},
	}, {
		name:    "shorthand command with template.spec",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Command = []string{"/web"} }),
		wantErr: []string{"spec.template.command"},
	}, {
		name:    "shorthand args with template.spec",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Args = []string{"-v"} }),
		wantErr: []string{"spec.template.args"},
	}, {
		name:    "shorthand ports with template.spec",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Ports = []corev1.ContainerPort{{ContainerPort: 80}} }),
		wantErr: []string{"spec.template.ports"},
	}, {
		name:    "shorthand env with template.spec",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Env = env("A", "1") }),
		wantErr: []string{"spec.template.env"},
	}, {
		name:    "shorthand resources requests with template.spec",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Resources.Requests = rl("cpu", "1") }),
		wantErr: []string{"spec.template.resources"},
	}, {
		name:    "shorthand resources limits with template.spec",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Resources.Limits = rl("memory", "1Gi") }),
		wantErr: []string{"spec.template.resources"},
	}, {
		name:    "shorthand resources claims with template.spec",
		tmpl:    full(func(p *flotillav1.PodTemplate) { p.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}} }),
		wantErr: []string{"spec.template.resources"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := newApp(withTemplate(tt.tmpl, tt.main))
			before := app.DeepCopy()
			d, err := Deployment(app, 1, ClusterOverrides{})
			if err == nil {
				t.Fatalf("no error; rendered %+v", d.Spec.Template.Spec)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if d != nil {
				t.Errorf("a Deployment with the error: %+v", d)
			}
			// Work reports the same error.
			if _, _, werr := Work(app, "eu-1", member("eu-1", "", nil), 1, "", nil); werr == nil || werr.Error() != err.Error() {
				t.Errorf("Work error = %v, want %v", werr, err)
			}
			if !equality.Semantic.DeepEqual(app, before) {
				t.Error("a failed rendering changed the MyApp")
			}
		})
	}

	t.Run("the shorthand labels and annotations are allowed with template.spec", func(t *testing.T) {
		app := newApp(withTemplate(full(func(p *flotillav1.PodTemplate) {
			p.Labels = map[string]string{"x": "1"}
			p.Annotations = map[string]string{"y": "2"}
		})))
		if _, err := Deployment(app, 1, ClusterOverrides{}); err != nil {
			t.Errorf("error = %v, want none", err)
		}
	})

	t.Run("spec.mainContainer app without template.spec is the one container", func(t *testing.T) {
		d := mustDeployment(t, newApp(withTemplate(&flotillav1.PodTemplate{Command: []string{"/web"}}, ContainerName)), 1, ClusterOverrides{})
		if cs := d.Spec.Template.Spec.Containers; len(cs) != 1 || cs[0].Name != "app" || cs[0].Image != "registry.example.com/team/web:1.0" {
			t.Errorf("containers = %+v, want the one container app with spec.image", cs)
		}
	})
}

// TestDeploymentDoesNotChangeTheMyApp renders apps carrying every kind of
// override, in a cluster every override selects, in one only the first
// selects, and without overrides, and checks the MyApp is what it was,
// and stays so when the rendered Deployment is changed afterwards.
func TestDeploymentDoesNotChangeTheMyApp(t *testing.T) {
	overrides := []flotillav1.ClusterOverride{{
		Name: "all", TargetCluster: flotillav1.ClusterAffinity{},
		Image:        &flotillav1.ImageOverride{Tag: "2.0"},
		Replicas:     ptr.To[int32](4),
		Env:          env("B", "eu", "C", "3"),
		Resources:    &corev1.ResourceRequirements{Requests: rl("cpu", "300m"), Limits: rl("memory", "1Gi")},
		NodeSelector: map[string]string{"pool": "gpu"},
		Tolerations:  []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}},
	}, {
		Name: "more", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}},
		Resources: &corev1.ResourceRequirements{Requests: rl("memory", "2Gi")},
	}}
	shorthand := &flotillav1.PodTemplate{
		Labels: map[string]string{"team": "shop"}, Annotations: map[string]string{"a": "1"},
		Command: []string{"/web"}, Args: []string{"-v"}, Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
		Env:       env("A", "1", "B", "2"),
		Resources: corev1.ResourceRequirements{Requests: rl("cpu", "100m"), Limits: rl("memory", "128Mi")},
	}
	namedMain := fullTemplate()
	namedMain.Spec.Containers[0].Image, namedMain.Spec.Containers[1].Image = "registry.example.com/team/web:0.9", ""
	for _, tc := range []struct {
		name string
		tmpl *flotillav1.PodTemplate
		main string
	}{
		{"full template", fullTemplate(), ""},
		{"full template, named main container", namedMain, "proxy"},
		{"first-version template", shorthand, ""},
	} {
		for _, cl := range []struct {
			cluster   string
			overrides []flotillav1.ClusterOverride
		}{
			{"eu-1", overrides}, // both overrides
			{"us-1", overrides}, // "all" only
			{"eu-1", nil},
		} {
			t.Run(fmt.Sprintf("%s in %s with %d overrides", tc.name, cl.cluster, len(cl.overrides)), func(t *testing.T) {
				app := newApp(withTemplate(tc.tmpl.DeepCopy(), tc.main), withOverrides(cl.overrides...))
				before := app.DeepCopy()
				mc := member(cl.cluster, "", nil)
				ov, err := OverridesFor(app, mc)
				if err != nil {
					t.Fatal(err)
				}
				d := mustDeployment(t, app, 3, ov)
				if !equality.Semantic.DeepEqual(app, before) {
					t.Fatal("rendering changed the MyApp")
				}
				if _, _, err := Work(app, cl.cluster, mc, 3, "", nil); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(app, before) {
					t.Fatal("Work changed the MyApp")
				}
				// Change everything the rendered pod holds in maps and slices.
				pod := &d.Spec.Template
				for _, m := range []map[string]string{pod.Labels, pod.Annotations, pod.Spec.NodeSelector} {
					for k := range m {
						m[k] = "changed"
					}
				}
				for i := range pod.Spec.Tolerations {
					pod.Spec.Tolerations[i].Key = "changed"
				}
				for i := range pod.Spec.Containers {
					c := &pod.Spec.Containers[i]
					for j := range c.Env {
						c.Env[j].Value = "changed"
					}
					for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
						for k := range l {
							l[k] = resource.MustParse("999")
						}
					}
					for j := range c.Command {
						c.Command[j] = "changed"
					}
					for j := range c.Args {
						c.Args[j] = "changed"
					}
					for j := range c.Ports {
						c.Ports[j].ContainerPort = 1
					}
				}
				if !equality.Semantic.DeepEqual(app, before) {
					t.Error("the rendered Deployment shares maps or slices with the MyApp")
				}
			})
		}
	}
}

// legacyJSON is the Deployment a first-version MyApp (template shorthand
// only, an image, env, resources and node selector override) renders,
// written out by hand: rendering such an app must stay byte for byte what
// it was, or every member would see a change.
const legacyJSON = `{"apiVersion":"apps/v1","kind":"Deployment",` +
	`"metadata":{"labels":{"app.kubernetes.io/managed-by":"flotilla","app.kubernetes.io/name":"web",` +
	`"flotilla.dev/myapp-name":"web","flotilla.dev/myapp-namespace":"shop"},"name":"web","namespace":"shop"},` +
	`"spec":{"replicas":2,` +
	`"selector":{"matchLabels":{"flotilla.dev/myapp-name":"web","flotilla.dev/myapp-namespace":"shop"}},` +
	`"strategy":{},` +
	`"template":{"metadata":{"annotations":{"prometheus.io/scrape":"true"},` +
	`"labels":{"flotilla.dev/myapp-name":"web","flotilla.dev/myapp-namespace":"shop","team":"shop"}},` +
	`"spec":{"containers":[{"args":["--port=8080"],"command":["/web"],` +
	`"env":[{"name":"A","value":"1"},{"name":"B","value":"eu"}],` +
	`"image":"mirror.eu/team/web:1.0","name":"app",` +
	`"ports":[{"containerPort":8080,"protocol":"TCP"}],` +
	`"resources":{"limits":{"memory":"128Mi"},"requests":{"cpu":"100m"}}}],` +
	`"nodeSelector":{"pool":"eu"}}}}}`

// legacyPlainJSON is the Deployment of the smallest first-version MyApp:
// an image and nothing else.
const legacyPlainJSON = `{"apiVersion":"apps/v1","kind":"Deployment",` +
	`"metadata":{"labels":{"app.kubernetes.io/managed-by":"flotilla","app.kubernetes.io/name":"web",` +
	`"flotilla.dev/myapp-name":"web","flotilla.dev/myapp-namespace":"shop"},"name":"web","namespace":"shop"},` +
	`"spec":{"replicas":3,` +
	`"selector":{"matchLabels":{"flotilla.dev/myapp-name":"web","flotilla.dev/myapp-namespace":"shop"}},` +
	`"strategy":{},` +
	`"template":{"metadata":{"labels":{"flotilla.dev/myapp-name":"web","flotilla.dev/myapp-namespace":"shop"}},` +
	`"spec":{"containers":[{"image":"registry.example.com/team/web:1.0","name":"app","resources":{}}]}}}}`

func TestLegacyRenderingIsUnchanged(t *testing.T) {
	legacy := newApp(withTemplate(&flotillav1.PodTemplate{
		Labels:      map[string]string{"team": "shop"},
		Annotations: map[string]string{"prometheus.io/scrape": "true"},
		Command:     []string{"/web"},
		Args:        []string{"--port=8080"},
		Ports:       []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		Env:         env("A", "1"),
		Resources:   corev1.ResourceRequirements{Requests: rl("cpu", "100m"), Limits: rl("memory", "128Mi")},
	}), withOverrides(flotillav1.ClusterOverride{
		Name: "eu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"eu-1"}},
		Image: &flotillav1.ImageOverride{Registry: "mirror.eu"}, Env: env("B", "eu"),
		NodeSelector: map[string]string{"pool": "eu"},
	}))
	for _, tc := range []struct {
		name, cluster string
		app           *flotillav1.MyApp
		replicas      int32
		want          string
	}{
		{"a first-version template with overrides", "eu-1", legacy, 2, legacyJSON},
		{"an image only", "us-1", newApp(), 3, legacyPlainJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ov, err := OverridesFor(tc.app, member(tc.cluster, "", nil))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := manifestJSON(mustDeployment(t, tc.app, tc.replicas, ov))
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tc.want {
				t.Errorf("rendering changed:\n got %s\nwant %s", raw, tc.want)
			}
			w, _, err := Work(tc.app, tc.cluster, member(tc.cluster, "", nil), tc.replicas, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(w.Spec.Manifests[0].Raw); got != tc.want {
				t.Errorf("Work manifest changed:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestShorthandErrorIsStable: with several first-version container fields
// beside a pod spec, the error names the first of them in field order,
// every time (it once came from a map's random order).
func TestShorthandErrorIsStable(t *testing.T) {
	tmpl := fullTemplate()
	tmpl.Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
	tmpl.Command = []string{"/x"}
	app := newApp(withTemplate(tmpl))
	for i := 0; i < 50; i++ {
		_, err := Deployment(app, 1, ClusterOverrides{})
		if err == nil || !strings.HasPrefix(err.Error(), "spec.template.command: Forbidden") {
			t.Fatalf("call %d: %v, want the error to name spec.template.command", i, err)
		}
	}
}

// TestRenderingSharesNoEnvSource: the rendered env's valueFrom, from the
// first-version template and from an env override, are copies: changing
// the rendering leaves the MyApp as it was.
func TestRenderingSharesNoEnvSource(t *testing.T) {
	fieldEnv := func(name string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}
	}
	app := newApp(func(a *flotillav1.MyApp) {
		a.Spec.Template = &flotillav1.PodTemplate{Env: []corev1.EnvVar{fieldEnv("POD")}}
	})
	before := app.DeepCopy()
	d := mustDeployment(t, app, 1, ClusterOverrides{env: []corev1.EnvVar{fieldEnv("OVERRIDE")}})
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		e.ValueFrom.FieldRef.FieldPath = "changed"
	}
	if !equality.Semantic.DeepEqual(app, before) {
		t.Fatalf("changing the rendered env changed the MyApp: %+v", app.Spec.Template.Env)
	}
}

// TestService: no Service without spec.service; with it, one of the
// Deployment's name, namespace and labels selecting its pods, with the
// type and protocol defaulted, a port without targetPort targeting its own
// number, and annotations copied, not shared; the Work carries it after
// the Deployment.
func TestService(t *testing.T) {
	plain := newApp()
	if Service(plain) != nil {
		t.Fatal("a Service rendered for an app without spec.service")
	}
	w, _, err := Work(plain, "a", nil, 1, "", nil)
	if err != nil || len(w.Spec.Manifests) != 1 {
		t.Fatalf("the Work of an app without spec.service has %d manifests (%v), want 1", len(w.Spec.Manifests), err)
	}

	app := newApp(func(a *flotillav1.MyApp) {
		a.Spec.TargetNamespace = "shop"
		a.Spec.Service = &flotillav1.ServiceSpec{
			Annotations: map[string]string{"team": "payments"},
			Ports: []flotillav1.ServicePort{
				{Name: "http", Port: 80, TargetPort: ptr.To(intstr.FromString("http"))},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			},
		}
	})
	svc := Service(app)
	d := mustDeployment(t, app, 1, ClusterOverrides{})
	if svc.Name != d.Name || svc.Namespace != "shop" || !equality.Semantic.DeepEqual(svc.Labels, d.Labels) ||
		!equality.Semantic.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
		t.Fatalf("Service %s/%s labels %v selector %v; want the Deployment's %s/%s, %v, %v",
			svc.Namespace, svc.Name, svc.Labels, svc.Spec.Selector, d.Namespace, d.Name, d.Labels, d.Spec.Selector.MatchLabels)
	}
	want := []corev1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")},
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || !equality.Semantic.DeepEqual(svc.Spec.Ports, want) {
		t.Fatalf("type %s ports %+v; want ClusterIP and %+v", svc.Spec.Type, svc.Spec.Ports, want)
	}
	svc.Annotations["team"] = "changed"
	if app.Spec.Service.Annotations["team"] != "payments" {
		t.Fatal("the rendered Service shares its annotations with the MyApp")
	}
	w, _, err = Work(app, "a", nil, 1, "", nil)
	if err != nil || len(w.Spec.Manifests) != 2 {
		t.Fatalf("the Work has %d manifests (%v), want the Deployment and the Service", len(w.Spec.Manifests), err)
	}
	var kinds []string
	for _, m := range w.Spec.Manifests {
		var obj metav1.TypeMeta
		if err := json.Unmarshal(m.Raw, &obj); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, obj.Kind)
	}
	if !slices.Equal(kinds, []string{"Deployment", "Service"}) {
		t.Fatalf("the Work's manifests are %v, want Deployment then Service", kinds)
	}
}
