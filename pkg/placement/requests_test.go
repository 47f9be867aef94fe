package placement

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// sameList says whether two resource lists name the same resources with
// equal quantities (a missing name is not a zero).
func sameList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		o, ok := b[name]
		if !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}

// fmtList formats a list as "cpu=100m memory=64Mi", sorted by name.
func fmtList(l corev1.ResourceList) string {
	parts := make([]string, 0, len(l))
	for name, q := range l {
		parts = append(parts, string(name)+"="+q.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func req(requests, limits corev1.ResourceList) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: requests, Limits: limits}
}

func ctr(name string, r corev1.ResourceRequirements) corev1.Container {
	return corev1.Container{Name: name, Resources: r}
}

func sidecar(name string, r corev1.ResourceRequirements) corev1.Container {
	c := ctr(name, r)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

// shorthandSpec is a first-version spec: one container with r.
func shorthandSpec(r corev1.ResourceRequirements) *v1alpha1.MyAppSpec {
	return &v1alpha1.MyAppSpec{Image: "web:1", Template: &v1alpha1.PodTemplate{Resources: r}}
}

// podSpec is a spec with a full pod spec.
func podSpec(main string, ps corev1.PodSpec) *v1alpha1.MyAppSpec {
	return &v1alpha1.MyAppSpec{Image: "web:1", MainContainer: main, Template: &v1alpha1.PodTemplate{Spec: &ps}}
}

func TestPodRequests(t *testing.T) {
	tests := []struct {
		name string
		spec *v1alpha1.MyAppSpec
		main *corev1.ResourceRequirements
		want corev1.ResourceList
	}{
		// The first version's one container.
		{name: "no template requests nothing", spec: &v1alpha1.MyAppSpec{Image: "web:1"}, want: list()},
		{name: "a template without resources requests nothing", spec: shorthandSpec(req(nil, nil)), want: list()},
		{name: "shorthand requests", spec: shorthandSpec(req(list("cpu", "100m", "memory", "64Mi"), nil)),
			want: list("cpu", "100m", "memory", "64Mi")},
		{name: "shorthand limits default the requests they lack",
			spec: shorthandSpec(req(list("cpu", "500m"), list("cpu", "2", "memory", "1Gi", "nvidia.com/gpu", "1"))),
			want: list("cpu", "500m", "memory", "1Gi", "nvidia.com/gpu", "1")},
		{name: "shorthand with a main override: per resource name",
			spec: shorthandSpec(req(list("cpu", "100m", "memory", "64Mi"), nil)),
			main: &corev1.ResourceRequirements{Requests: list("cpu", "300m")},
			want: list("cpu", "300m", "memory", "64Mi")},
		{name: "shorthand with a main override of limits only: the template's request stays, a new limit defaults its request",
			spec: shorthandSpec(req(list("cpu", "100m"), nil)),
			main: &corev1.ResourceRequirements{Limits: list("cpu", "1", "memory", "1Gi")},
			want: list("cpu", "100m", "memory", "1Gi")},
		{name: "no template with a main override", spec: &v1alpha1.MyAppSpec{Image: "web:1"},
			main: &corev1.ResourceRequirements{Requests: list("cpu", "1")}, want: list("cpu", "1")},

		// A full pod spec.
		{name: "the containers add up",
			spec: podSpec("", corev1.PodSpec{Containers: []corev1.Container{
				ctr("web", req(list("cpu", "100m", "memory", "64Mi"), nil)),
				ctr("proxy", req(list("cpu", "50m", "memory", "32Mi"), nil)),
				ctr("idle", req(nil, nil)),
			}}),
			want: list("cpu", "150m", "memory", "96Mi")},
		{name: "each container's limits default its own requests",
			spec: podSpec("", corev1.PodSpec{Containers: []corev1.Container{
				ctr("web", req(nil, list("cpu", "200m"))),
				ctr("proxy", req(list("cpu", "50m"), list("cpu", "1"))),
			}}),
			want: list("cpu", "250m")},
		{name: "a sidecar init container (restartPolicy Always) adds",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{sidecar("log", req(list("cpu", "50m", "memory", "16Mi"), nil))},
				Containers:     []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			want: list("cpu", "150m", "memory", "16Mi")},
		{name: "a plain init container larger than the containers: its request",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("migrate", req(list("cpu", "500m"), nil))},
				Containers:     []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			want: list("cpu", "500m")},
		{name: "a plain init container smaller than the containers: theirs",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("migrate", req(list("cpu", "50m"), nil))},
				Containers:     []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			want: list("cpu", "100m")},
		{name: "the largest of several plain init containers, not their sum",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{
					ctr("a", req(list("cpu", "300m"), nil)),
					ctr("b", req(list("cpu", "400m"), nil)),
				},
				Containers: []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			want: list("cpu", "400m")},
		{name: "a plain init container runs beside the sidecars started before it: max(100m+50m, 500m+50m)",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{
					sidecar("log", req(list("cpu", "50m"), nil)),
					ctr("migrate", req(list("cpu", "500m"), nil)),
				},
				Containers: []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			want: list("cpu", "550m")},
		{name: "a sidecar started after the plain init container does not run beside it: max(100m+50m, 500m)",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{
					ctr("migrate", req(list("cpu", "500m"), nil)),
					sidecar("log", req(list("cpu", "50m"), nil)),
				},
				Containers: []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			want: list("cpu", "500m")},
		{name: "the maximum is per resource name",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("migrate", req(list("cpu", "500m", "memory", "64Mi"), nil))},
				Containers:     []corev1.Container{ctr("web", req(list("cpu", "100m", "memory", "1Gi"), nil))},
			}),
			want: list("cpu", "500m", "memory", "1Gi")},
		{name: "an init container's limits default its requests too",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("migrate", req(nil, list("memory", "2Gi")))},
				Containers:     []corev1.Container{ctr("web", req(list("memory", "1Gi"), nil))},
			}),
			want: list("memory", "2Gi")},
		{name: "the overhead adds, after the init maximum",
			spec: podSpec("", corev1.PodSpec{
				Overhead:       list("cpu", "10m", "memory", "16Mi"),
				InitContainers: []corev1.Container{ctr("migrate", req(list("cpu", "500m"), nil))},
				Containers:     []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			want: list("cpu", "510m", "memory", "16Mi")},
		{name: "a main override replaces the first container's value only, per resource name",
			spec: podSpec("", corev1.PodSpec{Containers: []corev1.Container{
				ctr("web", req(list("cpu", "100m", "memory", "64Mi"), nil)),
				ctr("proxy", req(list("cpu", "50m", "memory", "32Mi"), nil)),
			}}),
			main: &corev1.ResourceRequirements{Requests: list("cpu", "400m")},
			want: list("cpu", "450m", "memory", "96Mi")},
		{name: "a main override replaces the named main container's value only",
			spec: podSpec("proxy", corev1.PodSpec{Containers: []corev1.Container{
				ctr("web", req(list("cpu", "100m", "memory", "64Mi"), nil)),
				ctr("proxy", req(list("cpu", "50m", "memory", "32Mi"), nil)),
			}}),
			main: &corev1.ResourceRequirements{Requests: list("cpu", "400m", "memory", "256Mi")},
			want: list("cpu", "500m", "memory", "320Mi")},
		{name: "a main override adds a resource the main container did not ask for",
			spec: podSpec("", corev1.PodSpec{Containers: []corev1.Container{
				ctr("web", req(list("cpu", "100m"), nil)),
				ctr("proxy", req(list("cpu", "50m"), nil)),
			}}),
			main: &corev1.ResourceRequirements{Limits: list("nvidia.com/gpu", "1")},
			want: list("cpu", "150m", "nvidia.com/gpu", "1")},
		{name: "a main override does not touch the init containers",
			spec: podSpec("", corev1.PodSpec{
				InitContainers: []corev1.Container{ctr("migrate", req(list("cpu", "500m"), nil))},
				Containers:     []corev1.Container{ctr("web", req(list("cpu", "100m"), nil))},
			}),
			main: &corev1.ResourceRequirements{Requests: list("cpu", "800m")},
			want: list("cpu", "800m")},
		{name: "an unrenderable spec (mainContainer names no container) counts the containers it has, without the override",
			spec: podSpec("nope", corev1.PodSpec{Containers: []corev1.Container{
				ctr("web", req(list("cpu", "100m"), nil)),
				ctr("proxy", req(list("cpu", "50m"), nil)),
			}}),
			main: &corev1.ResourceRequirements{Requests: list("cpu", "4")},
			want: list("cpu", "150m")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.spec.DeepCopy()
			var mainBefore *corev1.ResourceRequirements
			if tt.main != nil {
				mainBefore = tt.main.DeepCopy()
			}
			got := PodRequests(tt.spec, tt.main)
			if !sameList(got, tt.want) {
				t.Errorf("PodRequests = %s, want %s", fmtList(got), fmtList(tt.want))
			}
			if !equality.Semantic.DeepEqual(tt.spec, before) || !equality.Semantic.DeepEqual(tt.main, mainBefore) {
				t.Error("PodRequests changed its input")
			}
		})
	}
}

func TestMergeResources(t *testing.T) {
	base := corev1.ResourceRequirements{
		Requests: list("cpu", "100m", "memory", "64Mi"),
		Limits:   list("memory", "128Mi"),
		Claims:   []corev1.ResourceClaim{{Name: "gpu"}},
	}
	o := &corev1.ResourceRequirements{
		Requests: list("cpu", "1"),
		Limits:   list("memory", "1Gi", "cpu", "2"),
		Claims:   []corev1.ResourceClaim{{Name: "gpu"}, {Name: "fpga"}},
	}
	before, oBefore := base.DeepCopy(), o.DeepCopy()
	got := MergeResources(base, o)
	want := corev1.ResourceRequirements{
		Requests: list("cpu", "1", "memory", "64Mi"),
		Limits:   list("memory", "1Gi", "cpu", "2"),
		Claims:   []corev1.ResourceClaim{{Name: "gpu"}, {Name: "fpga"}},
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("MergeResources = %+v, want %+v", got, want)
	}
	if !equality.Semantic.DeepEqual(base, *before) || !equality.Semantic.DeepEqual(o, oBefore) {
		t.Error("MergeResources changed its input")
	}
	got.Requests[corev1.ResourceMemory] = list("memory", "9Gi")[corev1.ResourceMemory]
	if q := base.Requests[corev1.ResourceMemory]; q.String() != "64Mi" {
		t.Errorf("the result shares the base's requests: base memory now %s", q.String())
	}
	if empty := MergeResources(corev1.ResourceRequirements{}, &corev1.ResourceRequirements{Limits: list("cpu", "1")}); !sameList(empty.Limits, list("cpu", "1")) || empty.Requests != nil {
		t.Errorf("onto nothing: %+v, want limits cpu 1 and no requests", empty)
	}
}

func TestClusterRequests(t *testing.T) {
	clusters := []v1alpha1.MemberCluster{
		member("a", region("eu"), label("tier", "gold")),
		member("b", region("eu")),
		member("c", region("us")),
	}
	eu := v1alpha1.ClusterAffinity{FieldSelector: &v1alpha1.FieldSelector{MatchExpressions: []v1alpha1.FieldSelectorRequirement{
		{Key: v1alpha1.ClusterFieldRegion, Operator: corev1.NodeSelectorOpIn, Values: []string{"eu"}},
	}}}
	gold := v1alpha1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}
	all := v1alpha1.ClusterAffinity{}
	broken := v1alpha1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Near"}}}}
	shorthand := &v1alpha1.PodTemplate{Resources: req(list("cpu", "100m", "memory", "64Mi"), nil)}
	full := &v1alpha1.PodTemplate{Spec: &corev1.PodSpec{
		InitContainers: []corev1.Container{sidecar("log", req(list("cpu", "20m"), nil))},
		Containers: []corev1.Container{
			ctr("web", req(list("cpu", "100m", "memory", "64Mi"), nil)),
			ctr("proxy", req(list("cpu", "50m"), nil)),
		},
	}}
	rs := func(requests corev1.ResourceList) *corev1.ResourceRequirements {
		return &corev1.ResourceRequirements{Requests: requests}
	}

	tests := []struct {
		name      string
		template  *v1alpha1.PodTemplate
		overrides []v1alpha1.ClusterOverride
		want      map[string]corev1.ResourceList // nil: no entry at all
	}{{
		name:     "no overrides: none",
		template: shorthand,
	}, {
		name:     "overrides without resources: none",
		template: shorthand,
		overrides: []v1alpha1.ClusterOverride{
			{Name: "env", TargetCluster: all, Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
			{Name: "replicas", TargetCluster: eu, Replicas: ptr(int32(2))},
		},
	}, {
		name:     "only the clusters a resources override selects get an entry",
		template: shorthand,
		overrides: []v1alpha1.ClusterOverride{
			{Name: "env", TargetCluster: all, Env: []corev1.EnvVar{{Name: "A", Value: "1"}}},
			{Name: "eu", TargetCluster: eu, Resources: rs(list("cpu", "200m"))},
		},
		want: map[string]corev1.ResourceList{
			"a": list("cpu", "200m", "memory", "64Mi"),
			"b": list("cpu", "200m", "memory", "64Mi"),
		},
	}, {
		name:     "a later override wins per resource name; others stay",
		template: shorthand,
		overrides: []v1alpha1.ClusterOverride{
			{Name: "all", TargetCluster: all, Resources: rs(list("cpu", "200m", "memory", "128Mi"))},
			{Name: "eu", TargetCluster: eu, Resources: rs(list("cpu", "300m"))},
			{Name: "gold", TargetCluster: gold, Resources: &corev1.ResourceRequirements{Requests: list("cpu", "400m"), Limits: list("nvidia.com/gpu", "1")}},
		},
		want: map[string]corev1.ResourceList{
			"a": list("cpu", "400m", "memory", "128Mi", "nvidia.com/gpu", "1"),
			"b": list("cpu", "300m", "memory", "128Mi"),
			"c": list("cpu", "200m", "memory", "128Mi"),
		},
	}, {
		name:     "a later override's value wins even when it is smaller",
		template: shorthand,
		overrides: []v1alpha1.ClusterOverride{
			{Name: "gold", TargetCluster: gold, Resources: rs(list("cpu", "2"))},
			{Name: "eu", TargetCluster: eu, Resources: rs(list("cpu", "10m"))},
		},
		want: map[string]corev1.ResourceList{
			"a": list("cpu", "10m", "memory", "64Mi"),
			"b": list("cpu", "10m", "memory", "64Mi"),
		},
	}, {
		name:     "an override whose selector does not compile selects nothing",
		template: shorthand,
		overrides: []v1alpha1.ClusterOverride{
			{Name: "broken", TargetCluster: broken, Resources: rs(list("cpu", "2"))},
			{Name: "us", TargetCluster: v1alpha1.ClusterAffinity{ClusterNames: []string{"c"}}, Resources: rs(list("memory", "1Gi"))},
		},
		want: map[string]corev1.ResourceList{
			"c": list("cpu", "100m", "memory", "1Gi"),
		},
	}, {
		name:     "a resources override selecting no cluster: an empty map",
		template: shorthand,
		overrides: []v1alpha1.ClusterOverride{
			{Name: "none", TargetCluster: v1alpha1.ClusterAffinity{ClusterNames: []string{"z"}}, Resources: rs(list("cpu", "2"))},
		},
		want: map[string]corev1.ResourceList{},
	}, {
		name:     "with a full pod spec the whole pod is counted, the override on the main container",
		template: full,
		overrides: []v1alpha1.ClusterOverride{
			{Name: "gold", TargetCluster: gold, Resources: rs(list("cpu", "1"))},
		},
		want: map[string]corev1.ResourceList{
			"a": list("cpu", "1070m", "memory", "64Mi"),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := &v1alpha1.MyApp{Spec: v1alpha1.MyAppSpec{Image: "web:1", Template: tt.template.DeepCopy(), Overrides: tt.overrides}}
			before := app.DeepCopy()
			got := clusterRequests(app, clusters)
			if (got == nil) != (tt.want == nil) {
				t.Fatalf("clusterRequests = %v, want %v", got, tt.want)
			}
			gotNames, wantNames := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tt.want))
			if !slices.Equal(gotNames, wantNames) {
				t.Fatalf("entries for %v, want %v", gotNames, wantNames)
			}
			for name, want := range tt.want {
				if !sameList(got[name], want) {
					t.Errorf("%s: %s, want %s", name, fmtList(got[name]), fmtList(want))
				}
			}
			if !equality.Semantic.DeepEqual(app, before) {
				t.Error("clusterRequests changed the MyApp")
			}
			// InputFor carries the same, and the app's own requests.
			in := InputFor(app, clusters, t0)
			if !sameList(in.Requests, PodRequests(&app.Spec, nil)) {
				t.Errorf("InputFor requests = %s, want %s", fmtList(in.Requests), fmtList(PodRequests(&app.Spec, nil)))
			}
			if len(in.ClusterRequests) != len(tt.want) {
				t.Errorf("InputFor cluster requests = %v, want %v", in.ClusterRequests, tt.want)
			}
			for name, want := range tt.want {
				if !sameList(in.ClusterRequests[name], want) {
					t.Errorf("InputFor %s: %s, want %s", name, fmtList(in.ClusterRequests[name]), fmtList(want))
				}
			}
		})
	}
}

func TestInputForFullTemplate(t *testing.T) {
	app := &v1alpha1.MyApp{Spec: v1alpha1.MyAppSpec{Image: "web:1", Template: &v1alpha1.PodTemplate{Spec: &corev1.PodSpec{
		Overhead:       list("memory", "8Mi"),
		InitContainers: []corev1.Container{sidecar("log", req(list("cpu", "20m"), nil)), ctr("migrate", req(list("cpu", "1"), nil))},
		Containers: []corev1.Container{
			ctr("web", req(list("cpu", "100m"), list("memory", "256Mi"))),
			ctr("proxy", req(list("cpu", "50m", "memory", "32Mi"), nil)),
		},
	}}}}
	in := InputFor(app, abc(), t0)
	// containers 150m + sidecar 20m = 170m; migrate beside the sidecar
	// 1020m wins; memory 256Mi + 32Mi + overhead 8Mi.
	if want := list("cpu", "1020m", "memory", "296Mi"); !sameList(in.Requests, want) {
		t.Errorf("requests = %s, want %s", fmtList(in.Requests), fmtList(want))
	}
	if in.ClusterRequests != nil {
		t.Errorf("cluster requests = %v without resources overrides, want none", in.ClusterRequests)
	}
}

// TestScheduleClusterRequests: dynamic weighting divides each cluster's
// room by the requests its pods make there, so a resources override that
// doubles one cluster's pod cpu request halves its room, and with it its
// weight against the others.
func TestScheduleClusterRequests(t *testing.T) {
	// Every cluster has 10 cpu free: room 20 for a 500m pod.
	clusters := func() []v1alpha1.MemberCluster {
		var out []v1alpha1.MemberCluster
		for _, n := range []string{"a", "b", "c"} {
			out = append(out, member(n, resources(list("cpu", "10", "memory", "64Gi", "pods", "110"), nil)))
		}
		return out
	}
	onB := v1alpha1.ClusterAffinity{ClusterNames: []string{"b"}}
	shorthand := &v1alpha1.PodTemplate{Resources: req(list("cpu", "500m", "memory", "256Mi"), nil)}
	// main 400m + proxy 100m = 500m; main 900m doubles the pod to 1000m.
	full := &v1alpha1.PodTemplate{Spec: &corev1.PodSpec{Containers: []corev1.Container{
		ctr("web", req(list("cpu", "400m", "memory", "128Mi"), nil)),
		ctr("proxy", req(list("cpu", "100m", "memory", "128Mi"), nil)),
	}}}
	tests := []struct {
		name      string
		template  *v1alpha1.PodTemplate
		override  *corev1.ResourceRequirements
		wantRooms []int64 // a, b, c
		want      string
	}{
		{name: "first-version template, no override", template: shorthand,
			wantRooms: []int64{20, 20, 20}, want: "a=5 b=5 c=5"},
		{name: "first-version template, b's cpu request doubled", template: shorthand,
			override:  &corev1.ResourceRequirements{Requests: list("cpu", "1")},
			wantRooms: []int64{20, 10, 20}, want: "a=6 b=3 c=6"},
		{name: "full template, no override", template: full,
			wantRooms: []int64{20, 20, 20}, want: "a=5 b=5 c=5"},
		{name: "full template, b's main container cpu raised so the pod's request doubles", template: full,
			override:  &corev1.ResourceRequirements{Requests: list("cpu", "900m")},
			wantRooms: []int64{20, 10, 20}, want: "a=6 b=3 c=6"},
		{name: "full template, b's memory limit raised: cpu still binds, room unchanged", template: full,
			override:  &corev1.ResourceRequirements{Limits: list("memory", "1Gi")},
			wantRooms: []int64{20, 20, 20}, want: "a=5 b=5 c=5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := &v1alpha1.MyApp{Spec: v1alpha1.MyAppSpec{
				Image: "web:1", Replicas: ptr(int32(15)), Template: tt.template.DeepCopy(),
				Placement: v1alpha1.Placement{ReplicaScheduling: dynamic()},
			}}
			if tt.override != nil {
				app.Spec.Overrides = []v1alpha1.ClusterOverride{{Name: "b", TargetCluster: onB, Resources: tt.override}}
			}
			in := InputFor(app, clusters(), t0)
			scores, err := Scores(in)
			if err != nil {
				t.Fatal(err)
			}
			var rooms []int64
			for _, s := range scores {
				if s.Basis != ScoreAvailableReplicas {
					t.Errorf("%s scored by %s, want %s", s.Name, s.Basis, ScoreAvailableReplicas)
				}
				rooms = append(rooms, s.Score)
			}
			if !slices.Equal(rooms, tt.wantRooms) {
				t.Errorf("rooms of a, b, c = %v, want %v", rooms, tt.wantRooms)
			}
			res, err := Schedule(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := targets(res.Clusters); got != tt.want {
				t.Errorf("placement = %q, want %q", got, tt.want)
			}
			if res.BeyondCapacity != 0 {
				t.Errorf("beyondCapacity = %d, want 0", res.BeyondCapacity)
			}
		})
	}

	t.Run("the same input without ClusterRequests ignores the override", func(t *testing.T) {
		app := &v1alpha1.MyApp{Spec: v1alpha1.MyAppSpec{
			Image: "web:1", Replicas: ptr(int32(15)), Template: shorthand.DeepCopy(),
			Placement: v1alpha1.Placement{ReplicaScheduling: dynamic()},
			Overrides: []v1alpha1.ClusterOverride{{Name: "b", TargetCluster: onB, Resources: &corev1.ResourceRequirements{Requests: list("cpu", "1")}}},
		}}
		in := InputFor(app, clusters(), t0)
		with, err := Schedule(in)
		if err != nil {
			t.Fatal(err)
		}
		in.ClusterRequests = nil
		without, err := Schedule(in)
		if err != nil {
			t.Fatal(err)
		}
		if targets(with.Clusters) != "a=6 b=3 c=6" || targets(without.Clusters) != "a=5 b=5 c=5" {
			t.Errorf("with the override %q, without %q; want a=6 b=3 c=6 and a=5 b=5 c=5", targets(with.Clusters), targets(without.Clusters))
		}
	})
}

// TestMergeResourcesClaimOverrideWins: an override's claim replaces the
// base's claim of the same name, as its requests and limits do.
func TestMergeResourcesClaimOverrideWins(t *testing.T) {
	base := corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu", Request: "small"}, {Name: "fpga"}}}
	got := MergeResources(base, &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu", Request: "large"}}})
	want := []corev1.ResourceClaim{{Name: "gpu", Request: "large"}, {Name: "fpga"}}
	if !equality.Semantic.DeepEqual(got.Claims, want) {
		t.Fatalf("claims %+v, want %+v", got.Claims, want)
	}
	if base.Claims[0].Request != "small" {
		t.Fatalf("the base was changed: %+v", base.Claims)
	}
}
