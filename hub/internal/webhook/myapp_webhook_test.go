package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func validApp(opts ...func(*flotillav1.MyApp)) *flotillav1.MyApp {
	a := &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       flotillav1.MyAppSpec{Image: "registry.example.com/team/web:1.0", Replicas: ptr.To[int32](3)},
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

// badSelector is a label selector metav1 refuses.
func badSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near", Values: []string{"x"}}}}
}

func names(ns ...string) flotillav1.ClusterAffinity {
	return flotillav1.ClusterAffinity{ClusterNames: ns}
}

func divided(a *flotillav1.MyApp) {
	a.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided, ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
	}
}

func staticWeights(targets ...flotillav1.ClusterAffinity) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) {
		divided(a)
		var list []flotillav1.StaticClusterWeight
		for _, t := range targets {
			list = append(list, flotillav1.StaticClusterWeight{TargetCluster: t, Weight: 1})
		}
		a.Spec.Placement.ReplicaScheduling.WeightPreference = &flotillav1.ClusterPreferences{StaticWeightList: list}
	}
}

func affinity(a flotillav1.ClusterAffinity) func(*flotillav1.MyApp) {
	return func(app *flotillav1.MyApp) { app.Spec.Placement.ClusterAffinity = &a }
}

func tolerations(ts ...corev1.Toleration) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) { a.Spec.Placement.ClusterTolerations = ts }
}

func overrides(os ...flotillav1.ClusterOverride) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) { a.Spec.Overrides = os }
}

func image(s string) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) { a.Spec.Image = s }
}

func resources(requests, limits corev1.ResourceList) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) {
		a.Spec.Template = &flotillav1.PodTemplate{Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}
	}
}

func spread(scs ...flotillav1.SpreadConstraint) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) { a.Spec.Placement.SpreadConstraints = scs }
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func TestValidateMyApp(t *testing.T) {
	tests := []struct {
		name string
		opts []func(*flotillav1.MyApp)
		// wantFields are the fields the errors name, in order; every
		// error is of type Invalid.
		wantFields []string
		// wantWarnings are substrings, one per expected warning.
		wantWarnings []string
	}{{
		name: "a valid app has no errors and no warnings",
	}, {
		name: "a full valid app has no errors and no warnings",
		opts: []func(*flotillav1.MyApp){
			image("localhost:5000/team/web:dev@" + digest),
			resources(corev1.ResourceList{corev1.ResourceCPU: q("500m")}, corev1.ResourceList{corev1.ResourceCPU: q("500m"), corev1.ResourceMemory: q("1Gi")}),
			affinity(flotillav1.ClusterAffinity{ClusterNames: []string{"a", "b", "c"}, ExcludeClusters: []string{"c"},
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}),
			staticWeights(names("a"), names("b")),
			spread(flotillav1.SpreadConstraint{SpreadByField: flotillav1.SpreadByFieldCluster, MinGroups: ptr.To[int32](2)}),
			tolerations(
				corev1.Toleration{Operator: corev1.TolerationOpExists},
				corev1.Toleration{Key: flotillav1.TaintClusterUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
				corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
			),
			overrides(flotillav1.ClusterOverride{Name: "eu", TargetCluster: names("a"), Image: &flotillav1.ImageOverride{Registry: "mirror.example.com", Tag: "1.1"}},
				flotillav1.ClusterOverride{Name: "gpu", TargetCluster: names("b"),
					NodeSelector: map[string]string{"nvidia.com/gpu.present": "true", "pool": ""},
					Tolerations: []corev1.Toleration{
						{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "dedicated", Value: "ml"},
						{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](60)},
					},
					Patches: []flotillav1.JSONPatch{
						{Op: flotillav1.JSONPatchAdd, Path: "/spec/template/spec/containers/0/readinessProbe", Value: &apiextensionsv1.JSON{Raw: []byte(`{"httpGet":{"path":"/ready","port":8080}}`)}},
						{Op: flotillav1.JSONPatchAdd, Path: "/spec/template/spec/priorityClassName", Value: &apiextensionsv1.JSON{Raw: []byte(`"high"`)}},
					}}),
		},
	}, {
		name: "an override patch outside what a patch may touch names its path",
		opts: []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "p", TargetCluster: names("a"), Patches: []flotillav1.JSONPatch{
			{Op: flotillav1.JSONPatchAdd, Path: "/spec/template/spec/priorityClassName", Value: &apiextensionsv1.JSON{Raw: []byte(`"high"`)}},
			{Op: flotillav1.JSONPatchReplace, Path: "/spec/replicas", Value: &apiextensionsv1.JSON{Raw: []byte(`5`)}},
			{Op: flotillav1.JSONPatchRemove, Path: "/spec/selector"},
		}})},
		wantFields: []string{"spec.overrides[0].patches[1].path", "spec.overrides[0].patches[2].path"},
	}, {
		name: "an override patch that does not apply to the rendered Deployment names its path",
		opts: []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "p", TargetCluster: names("a"), Patches: []flotillav1.JSONPatch{
			{Op: flotillav1.JSONPatchReplace, Path: "/spec/template/spec/nodeSelector/pool", Value: &apiextensionsv1.JSON{Raw: []byte(`"gpu"`)}},
		}})},
		wantFields: []string{"spec.overrides[0].patches[0].path"},
	}, {
		name: "an override patch that leaves no Deployment names its value",
		opts: []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "p", TargetCluster: names("a"), Patches: []flotillav1.JSONPatch{
			{Op: flotillav1.JSONPatchAdd, Path: "/spec/template/spec/nodeSelector", Value: &apiextensionsv1.JSON{Raw: []byte(`["not", "a", "map"]`)}},
		}})},
		wantFields: []string{"spec.overrides[0].patches[0].value"},
	}, {
		name: "override nodeSelector keys and values are checked as a pod's would be",
		opts: []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "gpu", TargetCluster: names("a"),
			NodeSelector: map[string]string{"bad key!": "x"}})},
		wantFields: []string{"spec.overrides[0].nodeSelector[bad key!]"},
	}, {
		name: "an override nodeSelector value that is no label value",
		opts: []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "gpu", TargetCluster: names("a"),
			NodeSelector: map[string]string{"pool": "not a value"}})},
		wantFields: []string{"spec.overrides[0].nodeSelector[pool]"},
	}, {
		name: "override tolerations are checked as a pod's would be",
		opts: []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "gpu", TargetCluster: names("a"),
			Tolerations: []corev1.Toleration{
				{Key: "a", Operator: corev1.TolerationOpExists, Value: "x"},
				{Value: "x"},
				{Key: "b", Operator: "Like"},
				{Key: "c", Effect: "NoRun"},
				{Key: "d", Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr.To[int64](5)},
			}})},
		wantFields: []string{
			"spec.overrides[0].tolerations[0].value",
			"spec.overrides[0].tolerations[1].operator",
			"spec.overrides[0].tolerations[2].operator",
			"spec.overrides[0].tolerations[3].effect",
			"spec.overrides[0].tolerations[4].tolerationSeconds",
		},
	}, {
		name:       "an upper-case repository is spec.image",
		opts:       []func(*flotillav1.MyApp){image("registry.example.com/Team/web:1.0")},
		wantFields: []string{"spec.image"},
	}, {
		name:       "white space in the image is spec.image",
		opts:       []func(*flotillav1.MyApp){image("web :1.0")},
		wantFields: []string{"spec.image"},
	}, {
		name:       "an empty image is spec.image",
		opts:       []func(*flotillav1.MyApp){image("")},
		wantFields: []string{"spec.image"},
	}, {
		name:       "an image longer than 512 bytes is spec.image",
		opts:       []func(*flotillav1.MyApp){image("r.io/" + strings.Repeat("a", 508))},
		wantFields: []string{"spec.image"},
	}, {
		name:       "a request over its limit names the resource",
		opts:       []func(*flotillav1.MyApp){resources(corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("2Gi")}, corev1.ResourceList{corev1.ResourceMemory: q("1Gi")})},
		wantFields: []string{"spec.template.resources.requests[memory]"},
	}, {
		name:       "an invalid clusterAffinity selector",
		opts:       []func(*flotillav1.MyApp){affinity(flotillav1.ClusterAffinity{LabelSelector: badSelector()})},
		wantFields: []string{"spec.placement.clusterAffinity.labelSelector"},
	}, {
		name: "an invalid selector in a clusterAffinities term names its index",
		opts: []func(*flotillav1.MyApp){func(a *flotillav1.MyApp) {
			a.Spec.Placement.ClusterAffinities = []flotillav1.ClusterAffinityTerm{
				{AffinityName: "primary", ClusterAffinity: names("a")},
				{AffinityName: "backup", ClusterAffinity: flotillav1.ClusterAffinity{LabelSelector: badSelector()}},
			}
		}},
		wantFields: []string{"spec.placement.clusterAffinities[1].labelSelector"},
	}, {
		name:       "a toleration with operator Exists and a value",
		opts:       []func(*flotillav1.MyApp){tolerations(corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"})},
		wantFields: []string{"spec.placement.clusterTolerations[0].value"},
	}, {
		name:       "a toleration without a key must be Exists",
		opts:       []func(*flotillav1.MyApp){tolerations(corev1.Toleration{Operator: corev1.TolerationOpExists}, corev1.Toleration{Operator: corev1.TolerationOpEqual, Value: "v"})},
		wantFields: []string{"spec.placement.clusterTolerations[1].operator"},
	}, {
		name:       "a toleration without a key or operator (Equal by default) must be Exists",
		opts:       []func(*flotillav1.MyApp){tolerations(corev1.Toleration{})},
		wantFields: []string{"spec.placement.clusterTolerations[0].operator"},
	}, {
		name: "tolerationSeconds without effect NoExecute",
		opts: []func(*flotillav1.MyApp){tolerations(
			corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr.To[int64](5)},
			corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, TolerationSeconds: ptr.To[int64](5)},
		)},
		wantFields: []string{"spec.placement.clusterTolerations[0].tolerationSeconds", "spec.placement.clusterTolerations[1].tolerationSeconds"},
	}, {
		name:       "an invalid static weight selector",
		opts:       []func(*flotillav1.MyApp){staticWeights(names("a"), flotillav1.ClusterAffinity{LabelSelector: badSelector()})},
		wantFields: []string{"spec.placement.replicaScheduling.weightPreference.staticWeightList[1].targetCluster.labelSelector"},
	}, {
		name:       "a static weight for an excluded cluster names the cluster's index",
		opts:       []func(*flotillav1.MyApp){affinity(flotillav1.ClusterAffinity{ExcludeClusters: []string{"b"}}), staticWeights(names("a", "b"))},
		wantFields: []string{"spec.placement.replicaScheduling.weightPreference.staticWeightList[0].targetCluster.clusterNames[1]"},
	}, {
		name:       "a static weight for a cluster outside clusterNames",
		opts:       []func(*flotillav1.MyApp){affinity(names("a", "b")), staticWeights(names("a"), names("c"))},
		wantFields: []string{"spec.placement.replicaScheduling.weightPreference.staticWeightList[1].targetCluster.clusterNames[0]"},
	}, {
		name:       "a static weight for a cluster both named and excluded",
		opts:       []func(*flotillav1.MyApp){affinity(flotillav1.ClusterAffinity{ClusterNames: []string{"a", "b"}, ExcludeClusters: []string{"b"}}), staticWeights(names("b"))},
		wantFields: []string{"spec.placement.replicaScheduling.weightPreference.staticWeightList[0].targetCluster.clusterNames[0]"},
	}, {
		name:       "static weights by label only are not checked against clusterNames",
		opts:       []func(*flotillav1.MyApp){affinity(names("a")), staticWeights(flotillav1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": "y"}}})},
		wantFields: nil,
	}, {
		name: "more cluster groups than clusterNames allows",
		opts: []func(*flotillav1.MyApp){
			affinity(flotillav1.ClusterAffinity{ClusterNames: []string{"a", "b", "c"}, ExcludeClusters: []string{"c"}}),
			spread(
				flotillav1.SpreadConstraint{SpreadByField: flotillav1.SpreadByFieldRegion, MinGroups: ptr.To[int32](5)},
				flotillav1.SpreadConstraint{SpreadByField: flotillav1.SpreadByFieldCluster, MinGroups: ptr.To[int32](3)},
			),
		},
		wantFields: []string{"spec.placement.spreadConstraints[1].minGroups"},
	}, {
		name:       "minGroups by cluster without clusterNames is not checked",
		opts:       []func(*flotillav1.MyApp){spread(flotillav1.SpreadConstraint{SpreadByField: flotillav1.SpreadByFieldCluster, MinGroups: ptr.To[int32](50)})},
		wantFields: nil,
	}, {
		name: "an invalid override selector",
		opts: []func(*flotillav1.MyApp){overrides(
			flotillav1.ClusterOverride{Name: "ok", TargetCluster: names("a"), Replicas: ptr.To[int32](1)},
			flotillav1.ClusterOverride{Name: "bad", TargetCluster: flotillav1.ClusterAffinity{LabelSelector: badSelector()}, Replicas: ptr.To[int32](1)},
		)},
		wantFields: []string{"spec.overrides[1].targetCluster.labelSelector"},
	}, {
		name:       "an override that makes the image invalid",
		opts:       []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "up", TargetCluster: names("a"), Image: &flotillav1.ImageOverride{Repository: "Team/Web"}})},
		wantFields: []string{"spec.overrides[0].image"},
	}, {
		name:       "an override of an invalid image is not blamed for it",
		opts:       []func(*flotillav1.MyApp){image("Web"), overrides(flotillav1.ClusterOverride{Name: "tag", TargetCluster: names("a"), Image: &flotillav1.ImageOverride{Tag: "2"}})},
		wantFields: []string{"spec.image"},
	}, {
		name: "every error is reported, in spec order",
		opts: []func(*flotillav1.MyApp){
			image("BAD"),
			resources(corev1.ResourceList{corev1.ResourceCPU: q("2")}, corev1.ResourceList{corev1.ResourceCPU: q("1")}),
			affinity(flotillav1.ClusterAffinity{LabelSelector: badSelector()}),
			tolerations(corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"}),
			overrides(flotillav1.ClusterOverride{Name: "bad", TargetCluster: flotillav1.ClusterAffinity{LabelSelector: badSelector()}, Env: []corev1.EnvVar{{Name: "A"}}}),
		},
		wantFields: []string{"spec.image", "spec.template.resources.requests[cpu]", "spec.placement.clusterAffinity.labelSelector",
			"spec.placement.clusterTolerations[0].value", "spec.overrides[0].targetCluster.labelSelector"},
	}, {
		name:         "a replicas override with Divided scheduling warns that the total may differ",
		opts:         []func(*flotillav1.MyApp){divided, overrides(flotillav1.ClusterOverride{Name: "a", TargetCluster: names("a"), Replicas: ptr.To[int32](1)}, flotillav1.ClusterOverride{Name: "b", TargetCluster: names("b"), Replicas: ptr.To[int32](2)})},
		wantWarnings: []string{"spec.overrides[0].replicas replaces the scheduler's share", "spec.overrides[1].replicas replaces the scheduler's share"},
	}, {
		name: "a replicas override with Duplicated scheduling does not warn",
		opts: []func(*flotillav1.MyApp){
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{ReplicaSchedulingType: flotillav1.ReplicaSchedulingDuplicated}
			},
			overrides(flotillav1.ClusterOverride{Name: "a", TargetCluster: names("a"), Replicas: ptr.To[int32](1)}),
		},
	}, {
		name: "a replicas override without a scheduling strategy (Duplicated) does not warn",
		opts: []func(*flotillav1.MyApp){overrides(flotillav1.ClusterOverride{Name: "a", TargetCluster: names("a"), Replicas: ptr.To[int32](1)})},
	}, {
		name: "a Divided app's override without replicas does not warn",
		opts: []func(*flotillav1.MyApp){divided, overrides(flotillav1.ClusterOverride{Name: "a", TargetCluster: names("a"), Env: []corev1.EnvVar{{Name: "A", Value: "1"}}})},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs, warnings := ValidateMyApp(validApp(tt.opts...))
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
				if e.Type != field.ErrorTypeInvalid || e.Detail == "" {
					t.Errorf("error %q is of type %s with detail %q, want Invalid with a detail", e.Field, e.Type, e.Detail)
				}
			}
			if !slices.Equal(fields, tt.wantFields) {
				t.Errorf("errors name %q, want %q\n%v", fields, tt.wantFields, errs)
			}
			if len(warnings) != len(tt.wantWarnings) {
				t.Fatalf("warnings = %q, want %d", warnings, len(tt.wantWarnings))
			}
			for i, w := range tt.wantWarnings {
				if !strings.Contains(warnings[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, warnings[i], w)
				}
			}
		})
	}
}

// TestValidateMyAppRejectsOverridesRuntimesReadDifferently: an image
// override must produce a reference that container runtimes read as the
// override says. A registry without a dot or a port that is not localhost
// ("mirror") passes the CRD pattern and ValidImage, but "mirror/team/web"
// is read as docker.io/mirror/team/web: the image would be pulled from a
// Docker Hub namespace instead of the mirror.
func TestValidateMyAppRejectsOverridesRuntimesReadDifferently(t *testing.T) {
	for _, registry := range []string{"mirror", "registry", "internal-registry"} {
		t.Run(registry, func(t *testing.T) {
			errs, _ := ValidateMyApp(validApp(overrides(flotillav1.ClusterOverride{
				Name: "mirror", TargetCluster: names("a"), Image: &flotillav1.ImageOverride{Registry: registry},
			})))
			if len(errs) != 1 || errs[0].Field != "spec.overrides[0].image.registry" {
				t.Errorf("errors = %v, want one for spec.overrides[0].image.registry", errs)
			}
		})
	}
}

func TestValidImage(t *testing.T) {
	tests := []struct {
		image string
		want  bool
	}{
		{"nginx", true},
		{"nginx:1.25", true},
		{"library/nginx:1.25-alpine", true},
		{"registry.example.com/team/web:1.2", true},
		{"Registry.Example.COM/team/web", true}, // host names are case-insensitive
		{"registry.example.com:5000/team/web", true},
		{"localhost/web", true},
		{"localhost:5000/web:dev", true},
		{"10.0.0.1:5000/web", true},
		{"a/b/c/d/e", true},
		{"web_app", true},
		{"web__app", true},
		{"web---app", true},
		{"web.app", true},
		{"web@" + digest, true},
		{"registry.example.com:5000/team/web:1.2@" + digest, true},
		{"web:" + strings.Repeat("t", 128), true},
		{"web:_tag", true},
		{"r.io/" + strings.Repeat("a", 507), true}, // 512 bytes
		{"", false},
		{"r.io/" + strings.Repeat("a", 508), false}, // 513 bytes
		{"Nginx", false},
		{"team/Web", false},
		{" nginx", false},
		{"nginx ", false},
		{"ng inx", false},
		{"nginx\n", false},
		{"nginx\t:1", false},
		{"nginx:", false},
		{":1.0", false},
		{"nginx:-1", false},
		{"nginx:.1", false},
		{"web:" + strings.Repeat("t", 129), false},
		{"nginx:1.0:2.0", false},
		{"/nginx", false},
		{"nginx/", false},
		{"a//b", false},
		{"web..app", false},
		{"web___app", false},
		{"-web", false},
		{"web-", false},
		{"registry.example.com:port/web", false},
		{"-registry.example.com/web", false},
		{"web@sha256", false},
		{"web@sha256:abc", false}, // too short
		{"web@" + digest[:len(digest)-1] + "g", false},
		{"web@:" + digest[7:], false},
		{"web@" + digest + "@" + digest, false},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			if got := ValidImage(tt.image); got != tt.want {
				t.Errorf("ValidImage(%q) = %t, want %t", tt.image, got, tt.want)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	// full is every default but replicas.
	full := func(a *flotillav1.MyApp) {
		a.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{ReplicaSchedulingType: flotillav1.ReplicaSchedulingDuplicated}
		a.Spec.Failover = &flotillav1.FailoverPolicy{
			ClusterUnreachable: &flotillav1.ClusterFailover{
				TolerationSeconds:  ptr.To(flotillav1.DefaultUnreachableTolerationSeconds),
				PurgeMode:          flotillav1.PurgeGraciously,
				GracePeriodSeconds: ptr.To[int32](600),
			},
			Failback: &flotillav1.FailbackPolicy{Enabled: ptr.To(true), StabilizationWindowSeconds: ptr.To(flotillav1.DefaultFailbackWindowSeconds)},
		}
		a.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutAll}
	}
	tests := []struct {
		name string
		in   []func(*flotillav1.MyApp)
		want []func(*flotillav1.MyApp)
	}{{
		name: "an empty spec gets every default",
		in:   []func(*flotillav1.MyApp){func(a *flotillav1.MyApp) { a.Spec = flotillav1.MyAppSpec{Image: "web"} }},
		want: []func(*flotillav1.MyApp){func(a *flotillav1.MyApp) { a.Spec = flotillav1.MyAppSpec{Image: "web", Replicas: ptr.To[int32](1)} }, full},
	}, {
		name: "Divided without a division preference gets Weighted",
		in: []func(*flotillav1.MyApp){func(a *flotillav1.MyApp) {
			divided(a)
			a.Spec.Placement.ReplicaScheduling.ReplicaDivisionPreference = ""
		}},
		want: []func(*flotillav1.MyApp){full, divided},
	}, {
		name: "a Divided app's Aggregated preference is kept",
		in: []func(*flotillav1.MyApp){func(a *flotillav1.MyApp) {
			divided(a)
			a.Spec.Placement.ReplicaScheduling.ReplicaDivisionPreference = flotillav1.ReplicaDivisionAggregated
		}},
		want: []func(*flotillav1.MyApp){full, func(a *flotillav1.MyApp) {
			divided(a)
			a.Spec.Placement.ReplicaScheduling.ReplicaDivisionPreference = flotillav1.ReplicaDivisionAggregated
		}},
	}, {
		name: "zeros and false set by the user are kept, empty structs are filled",
		in: []func(*flotillav1.MyApp){func(a *flotillav1.MyApp) {
			a.Spec.Replicas = ptr.To[int32](0)
			a.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{}
			a.Spec.Failover = &flotillav1.FailoverPolicy{
				ClusterUnreachable: &flotillav1.ClusterFailover{TolerationSeconds: ptr.To[int32](0), GracePeriodSeconds: ptr.To[int32](0), PurgeMode: flotillav1.PurgeNever},
				Failback:           &flotillav1.FailbackPolicy{Enabled: ptr.To(false), StabilizationWindowSeconds: ptr.To[int32](0)},
			}
		}},
		want: []func(*flotillav1.MyApp){full, func(a *flotillav1.MyApp) {
			a.Spec.Replicas = ptr.To[int32](0)
			a.Spec.Failover = &flotillav1.FailoverPolicy{
				ClusterUnreachable: &flotillav1.ClusterFailover{TolerationSeconds: ptr.To[int32](0), GracePeriodSeconds: ptr.To[int32](0), PurgeMode: flotillav1.PurgeNever},
				Failback:           &flotillav1.FailbackPolicy{Enabled: ptr.To(false), StabilizationWindowSeconds: ptr.To[int32](0)},
			}
		}},
	}, {
		name: "a failover policy with only failback gets clusterUnreachable defaults",
		in: []func(*flotillav1.MyApp){func(a *flotillav1.MyApp) {
			a.Spec.Failover = &flotillav1.FailoverPolicy{Failback: &flotillav1.FailbackPolicy{Enabled: ptr.To(false)}}
		}},
		want: []func(*flotillav1.MyApp){full, func(a *flotillav1.MyApp) { a.Spec.Failover.Failback.Enabled = ptr.To(false) }},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := validApp(tt.in...)
			if err := (&MyAppWebhook{}).Default(t.Context(), got); err != nil {
				t.Fatal(err)
			}
			want := validApp(tt.want...)
			if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
				t.Errorf("defaulted spec =\n%s\nwant\n%s", asJSON(got.Spec), asJSON(want.Spec))
			}
			// Idempotent: defaulting again changes nothing.
			again := got.DeepCopy()
			if err := (&MyAppWebhook{}).Default(t.Context(), again); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(again, got) {
				t.Errorf("a second Default changed the app:\n%s\nto\n%s", asJSON(got.Spec), asJSON(again.Spec))
			}
			// What Default fills in is valid.
			if errs, _ := ValidateMyApp(got); len(errs) > 0 {
				t.Errorf("the defaulted app is invalid: %v", errs)
			}
		})
	}
}

// TestDefaultFillsAnEmptyRolloutPolicy: Default fills empty failover
// structs field by field, but not an empty rollout policy.
func TestDefaultFillsAnEmptyRolloutPolicy(t *testing.T) {
	a := validApp(func(a *flotillav1.MyApp) { a.Spec.Rollout = &flotillav1.RolloutPolicy{} })
	if err := (&MyAppWebhook{}).Default(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if a.Spec.Rollout.Strategy != flotillav1.RolloutAll {
		t.Errorf("rollout strategy = %q, want %q", a.Spec.Rollout.Strategy, flotillav1.RolloutAll)
	}
}

func TestValidateCreateAndUpdateReturnAnInvalidError(t *testing.T) {
	w := &MyAppWebhook{}
	bad := validApp(image("BAD"), divided, overrides(flotillav1.ClusterOverride{Name: "a", TargetCluster: names("a"), Replicas: ptr.To[int32](1)}))
	for name, validate := range map[string]func() ([]string, error){
		"create": func() ([]string, error) { return w.ValidateCreate(context.Background(), bad) },
		"update": func() ([]string, error) { return w.ValidateUpdate(context.Background(), validApp(), bad) },
	} {
		t.Run(name, func(t *testing.T) {
			warnings, err := validate()
			if !apierrors.IsInvalid(err) {
				t.Fatalf("error = %v, want Invalid", err)
			}
			var status apierrors.APIStatus
			if !errors.As(err, &status) || status.Status().Details == nil || len(status.Status().Details.Causes) != 1 ||
				status.Status().Details.Causes[0].Field != "spec.image" || status.Status().Details.Kind != "MyApp" {
				t.Errorf("error details = %+v", err)
			}
			if len(warnings) != 1 {
				t.Errorf("warnings = %q, want the replicas override's", warnings)
			}
		})
	}
	if warnings, err := w.ValidateCreate(context.Background(), validApp()); err != nil || len(warnings) != 0 {
		t.Errorf("valid app: warnings %q, error %v", warnings, err)
	}
	if warnings, err := w.ValidateDelete(context.Background(), bad); err != nil || warnings != nil {
		t.Errorf("delete: warnings %q, error %v; deletion is always allowed", warnings, err)
	}
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func targetNamespace(ns string) func(*flotillav1.MyApp) {
	return func(a *flotillav1.MyApp) { a.Spec.TargetNamespace = ns }
}

func TestValidateTargetNamespace(t *testing.T) {
	grant := flotillav1.FleetNamespacePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-shared"},
		Spec:       flotillav1.FleetNamespacePolicySpec{HubNamespaces: []string{"shop"}, MemberNamespaces: []string{"shared-*"}},
	}
	tests := []struct {
		name     string
		target   string
		policies []flotillav1.FleetNamespacePolicy
		// wantDetail is a substring of the one error's detail; empty
		// means no error.
		wantDetail string
	}{
		{name: "no targetNamespace is the own namespace", target: ""},
		{name: "the own namespace, named", target: "shop"},
		{name: "kube-system without a policy", target: "kube-system", wantDetail: `no FleetNamespacePolicy matches hub namespace "shop"`},
		{name: "another tenant's namespace without a policy", target: "billing", wantDetail: `no FleetNamespacePolicy matches hub namespace "shop"`},
		{name: "a granted namespace", target: "shared-x", policies: []flotillav1.FleetNamespacePolicy{grant}},
		{name: "kube-system beside a grant", target: "kube-system", policies: []flotillav1.FleetNamespacePolicy{grant}, wantDetail: "shop-shared grants shared-*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateTargetNamespace(validApp(targetNamespace(tt.target)), tt.policies)
			if tt.wantDetail == "" {
				if len(errs) != 0 {
					t.Fatalf("errors = %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != "spec.targetNamespace" || errs[0].BadValue != tt.target || !strings.Contains(errs[0].Detail, tt.wantDetail) {
				t.Fatalf("errors = %v, want one on spec.targetNamespace (%q) containing %q", errs, tt.target, tt.wantDetail)
			}
		})
	}
}

// TestValidateUpdateNeverBlocksDeletionOrMetadata: once a MyApp's grant is
// withdrawn (here: no policy reader at all, so only its own namespace is
// allowed), a spec change is refused, but metadata-only updates (the hub
// adding or removing its finalizer) and updates of a MyApp being deleted
// are admitted, and so is its deletion.
func TestValidateUpdateNeverBlocksDeletionOrMetadata(t *testing.T) {
	w := &MyAppWebhook{}
	ctx := context.Background()
	old := validApp(targetNamespace("kube-system"))

	changed := old.DeepCopy()
	changed.Spec.Image = "registry.example.com/team/web:2.0"
	_, err := w.ValidateUpdate(ctx, old, changed)
	if err == nil || !strings.Contains(err.Error(), "spec.targetNamespace") || !strings.Contains(err.Error(), `"kube-system"`) {
		t.Fatalf("a spec change of a MyApp in a namespace no longer allowed: err = %v, want a refusal naming spec.targetNamespace", err)
	}

	moved := changed.DeepCopy()
	moved.Spec.TargetNamespace = ""
	if _, err := w.ValidateUpdate(ctx, old, moved); err != nil {
		t.Fatalf("moving the MyApp back to its own namespace was refused: %v", err)
	}

	finalizer := old.DeepCopy()
	finalizer.Finalizers = []string{flotillav1.MyAppFinalizer}
	finalizer.Labels = map[string]string{"team": "a"}
	if _, err := w.ValidateUpdate(ctx, old, finalizer); err != nil {
		t.Fatalf("a metadata-only update (finalizer, label) was refused: %v", err)
	}

	deleting := changed.DeepCopy()
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	deleting.Finalizers = nil
	if _, err := w.ValidateUpdate(ctx, finalizer, deleting); err != nil {
		t.Fatalf("an update of a MyApp being deleted (finalizer removal) was refused: %v", err)
	}
	if _, err := w.ValidateDelete(ctx, old); err != nil {
		t.Fatalf("deletion was refused: %v", err)
	}
	if _, err := w.ValidateCreate(ctx, old); err == nil {
		t.Fatal("creating a MyApp for kube-system without a policy was admitted")
	}
}
