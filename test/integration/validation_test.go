package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// startHub starts a testbed hub (etcd, kube-apiserver,
// kube-controller-manager) with Flotilla's CRDs installed, and stops it when
// the test ends.
func startHub(t *testing.T) client.Client {
	t.Helper()
	c, _ := startHubWithConfig(t)
	return c
}

// startHubWithConfig is startHub that also returns the admin rest config.
func startHubWithConfig(t *testing.T) (client.Client, *rest.Config) {
	t.Helper()
	c, cfg, _ := startTestbedHub(t)
	return c, cfg
}

// startTestbedHub is startHub that also returns the testbed cluster, for
// its kubeconfig.
func startTestbedHub(t *testing.T) (client.Client, *rest.Config, *testbed.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tb, err := testbed.Start(ctx, testbed.Config{Dir: t.TempDir(), Hub: &testbed.ClusterSpec{Name: "hub"}})
	if err != nil {
		t.Fatalf("starting the testbed hub: %v", err)
	}
	t.Cleanup(func() {
		if err := tb.Stop(); err != nil {
			t.Errorf("stopping the testbed hub: %v", err)
		}
	})
	cfg, err := tb.Hub.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := installCRDs(cfg); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, cfg, tb.Hub
}

func validApp(name string) *flotillav1.MyApp {
	return &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: flotillav1.MyAppSpec{
			Image:    "registry.example.com/team/web:1.2",
			Replicas: ptr.To[int32](6),
		},
	}
}

func divided(pref flotillav1.ReplicaDivisionPreference, w *flotillav1.ClusterPreferences) *flotillav1.ReplicaSchedulingStrategy {
	return &flotillav1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
		ReplicaDivisionPreference: pref,
		WeightPreference:          w,
	}
}

// TestMyAppValidation creates MyApps with bad specs against a real hub
// apiserver and checks each is refused with a message naming the field,
// while a valid one is accepted with its defaults filled in.
func TestMyAppValidation(t *testing.T) {
	if _, err := os.Stat(testbed.DefaultBinDir() + "/kube-apiserver"); err != nil {
		t.Fatalf("kube-apiserver missing in %s: run `make testbed-bin`", testbed.DefaultBinDir())
	}
	c := startHub(t)
	ctx := context.Background()

	cases := []struct {
		name   string
		mutate func(*flotillav1.MyApp)
		// field and message must both appear in the apiserver's error.
		field, message string
	}{
		{"empty image", func(a *flotillav1.MyApp) { a.Spec.Image = "" },
			"spec.image", "should be at least 1 chars long"},
		{"image with white space", func(a *flotillav1.MyApp) { a.Spec.Image = "nginx :1.2" },
			"spec.image", "must not contain white space"},
		{"negative replicas", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](-1) },
			"spec.replicas", "should be greater than or equal to 0"},
		{"zero static weight", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ReplicaScheduling = divided(flotillav1.ReplicaDivisionWeighted, &flotillav1.ClusterPreferences{
				StaticWeightList: []flotillav1.StaticClusterWeight{{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}, Weight: 0}},
			})
		}, "spec.placement.replicaScheduling.weightPreference.staticWeightList[0].weight", "should be greater than or equal to 1"},
		{"minGroups above maxGroups", func(a *flotillav1.MyApp) {
			a.Spec.Placement.SpreadConstraints = []flotillav1.SpreadConstraint{{SpreadByField: flotillav1.SpreadByFieldRegion, MinGroups: ptr.To[int32](3), MaxGroups: ptr.To[int32](2)}}
		}, "spec.placement.spreadConstraints[0]", "minGroups must be less than or equal to maxGroups"},
		{"invalid cluster name", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: []string{"Member_1"}}
		}, "spec.placement.clusterAffinity.clusterNames[0]", "should match"},
		{"division preference with Duplicated", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{
				ReplicaSchedulingType: flotillav1.ReplicaSchedulingDuplicated, ReplicaDivisionPreference: flotillav1.ReplicaDivisionAggregated}
		}, "spec.placement.replicaScheduling", "replicaDivisionPreference is only valid when replicaSchedulingType is Divided"},
		{"static and dynamic weights together", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ReplicaScheduling = divided(flotillav1.ReplicaDivisionWeighted, &flotillav1.ClusterPreferences{
				StaticWeightList: []flotillav1.StaticClusterWeight{{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}, Weight: 1}},
				DynamicWeight:    flotillav1.DynamicWeightAvailableReplicas,
			})
		}, "spec.placement.replicaScheduling.weightPreference", "exactly one of staticWeightList and dynamicWeight must be set"},
		{"weights with Aggregated", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ReplicaScheduling = divided(flotillav1.ReplicaDivisionAggregated, &flotillav1.ClusterPreferences{DynamicWeight: flotillav1.DynamicWeightAvailableReplicas})
		}, "spec.placement.replicaScheduling", "weightPreference is only valid when replicaDivisionPreference is Weighted"},
		{"affinity and fallback affinities together", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}
			a.Spec.Placement.ClusterAffinities = []flotillav1.ClusterAffinityTerm{{AffinityName: "primary"}}
		}, "spec.placement", "clusterAffinity and clusterAffinities are mutually exclusive"},
		{"unknown spread field", func(a *flotillav1.MyApp) {
			a.Spec.Placement.SpreadConstraints = []flotillav1.SpreadConstraint{{SpreadByField: "rack"}}
		}, "spec.placement.spreadConstraints[0].spreadByField", "Unsupported value"},
		{"unknown field selector key", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{FieldSelector: &flotillav1.FieldSelector{
				MatchExpressions: []flotillav1.FieldSelectorRequirement{{Key: "rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}}}}}
		}, "spec.placement.clusterAffinity.fieldSelector.matchExpressions[0].key", "Unsupported value"},
		{"In without values", func(a *flotillav1.MyApp) {
			a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{FieldSelector: &flotillav1.FieldSelector{
				MatchExpressions: []flotillav1.FieldSelectorRequirement{{Key: flotillav1.ClusterFieldRegion, Operator: corev1.NodeSelectorOpIn}}}}
		}, "spec.placement.clusterAffinity.fieldSelector.matchExpressions[0]", "values must be non-empty for In and NotIn"},
		{"negative failover toleration", func(a *flotillav1.MyApp) {
			a.Spec.Failover = &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{TolerationSeconds: ptr.To[int32](-5)}}
		}, "spec.failover.clusterUnreachable.tolerationSeconds", "should be greater than or equal to 0"},
		{"unknown purge mode", func(a *flotillav1.MyApp) {
			a.Spec.Failover = &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{PurgeMode: "Eventually"}}
		}, "spec.failover.clusterUnreachable.purgeMode", "Unsupported value"},
		{"empty override", func(a *flotillav1.MyApp) {
			a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "eu"}}
		}, "spec.overrides[0]", "an override must set at least one of image, replicas, env, resources, nodeSelector, tolerations and patches"},
		{"bad override tag", func(a *flotillav1.MyApp) {
			a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "eu", Image: &flotillav1.ImageOverride{Tag: "bad tag!"}}}
		}, "spec.overrides[0].image.tag", "should match"},
		{"duplicate override names", func(a *flotillav1.MyApp) {
			a.Spec.Overrides = []flotillav1.ClusterOverride{
				{Name: "eu", Replicas: ptr.To[int32](1)}, {Name: "eu", Replicas: ptr.To[int32](2)}}
		}, "spec.overrides[1]", "Duplicate value"},
		{"unknown patch op", func(a *flotillav1.MyApp) {
			a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "p", Patches: []flotillav1.JSONPatch{{Op: "move", Path: "/spec/paused"}}}}
		}, "spec.overrides[0].patches[0].op", "Unsupported value"},
		{"patch path not a JSON pointer", func(a *flotillav1.MyApp) {
			a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "p", Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchRemove, Path: "spec.paused"}}}}
		}, "spec.overrides[0].patches[0].path", "should match"},
		{"negative failback window", func(a *flotillav1.MyApp) {
			a.Spec.Failover = &flotillav1.FailoverPolicy{Failback: &flotillav1.FailbackPolicy{StabilizationWindowSeconds: ptr.To[int32](-1)}}
		}, "spec.failover.failback.stabilizationWindowSeconds", "should be greater than or equal to 0"},
		{"unknown rollout strategy", func(a *flotillav1.MyApp) {
			a.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: "Canary"}
		}, "spec.rollout.strategy", "Unsupported value"},
		{"zero rollout concurrency", func(a *flotillav1.MyApp) {
			a.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: &flotillav1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromInt32(0))}}
		}, "spec.rollout.progressive.maxConcurrency", "must be a count of at least 1 or a percentage from 1% to 100%"},
		{"rollout concurrency above 100%", func(a *flotillav1.MyApp) {
			a.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: &flotillav1.ProgressiveRollout{MaxConcurrency: ptr.To(intstr.FromString("150%"))}}
		}, "spec.rollout.progressive.maxConcurrency", "must be a count of at least 1 or a percentage from 1% to 100%"},
		{"unknown Deployment strategy", func(a *flotillav1.MyApp) {
			a.Spec.Strategy = &appsv1.DeploymentStrategy{Type: "BlueGreen"}
		}, "spec.strategy", "type must be RollingUpdate or Recreate"},
		{"rollingUpdate with Recreate", func(a *flotillav1.MyApp) {
			a.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1))}}
		}, "spec.strategy", "rollingUpdate may not be set when type is Recreate"},
		{"negative maxSurge", func(a *flotillav1.MyApp) {
			a.Spec.Strategy = &appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(-1))}}
		}, "spec.strategy", "rollingUpdate.maxSurge must be a count of at least 0 or a percentage"},
		{"maxUnavailable above 100%", func(a *flotillav1.MyApp) {
			a.Spec.Strategy = &appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromString("120%"))}}
		}, "spec.strategy", "rollingUpdate.maxUnavailable must be a count of at least 0 or a percentage from 0% to 100%"},
		{"maxSurge and maxUnavailable both 0", func(a *flotillav1.MyApp) {
			a.Spec.Strategy = &appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromString("0%")), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
		}, "spec.strategy", "rollingUpdate.maxSurge and rollingUpdate.maxUnavailable may not both be 0"},
		{"negative minReadySeconds", func(a *flotillav1.MyApp) { a.Spec.MinReadySeconds = ptr.To[int32](-1) },
			"spec.minReadySeconds", "should be greater than or equal to 0"},
		{"zero progressDeadlineSeconds", func(a *flotillav1.MyApp) { a.Spec.ProgressDeadlineSeconds = ptr.To[int32](0) },
			"spec.progressDeadlineSeconds", "should be greater than or equal to 1"},
		{"progress deadline within minReadySeconds", func(a *flotillav1.MyApp) {
			a.Spec.MinReadySeconds = ptr.To[int32](30)
			a.Spec.ProgressDeadlineSeconds = ptr.To[int32](30)
		}, "spec", "progressDeadlineSeconds must be greater than minReadySeconds"},
		{"negative revisionHistoryLimit", func(a *flotillav1.MyApp) { a.Spec.RevisionHistoryLimit = ptr.To[int32](-1) },
			"spec.revisionHistoryLimit", "should be greater than or equal to 0"},
		{"first-version container fields beside a pod spec", func(a *flotillav1.MyApp) {
			a.Spec.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}}, Args: []string{"--debug"}}
		}, "spec.template", "command, args, ports and env describe the one container of a template without spec"},
		{"pod spec without containers", func(a *flotillav1.MyApp) {
			a.Spec.Template = &flotillav1.PodTemplate{Spec: &corev1.PodSpec{}}
		}, "spec.template.spec.containers", "Required value"},
		{"main container name not a DNS label", func(a *flotillav1.MyApp) { a.Spec.MainContainer = "Main_1" },
			"spec.mainContainer", "should match"},
		{"Service without ports", func(a *flotillav1.MyApp) { a.Spec.Service = &flotillav1.ServiceSpec{} },
			"spec.service.ports", "Required value"},
		{"Service of an unknown type", func(a *flotillav1.MyApp) {
			a.Spec.Service = &flotillav1.ServiceSpec{Type: "ExternalName", Ports: []flotillav1.ServicePort{{Port: 80}}}
		}, "spec.service.type", "Unsupported value"},
		{"Service target port 0", func(a *flotillav1.MyApp) {
			a.Spec.Service = &flotillav1.ServiceSpec{Ports: []flotillav1.ServicePort{{Port: 80, TargetPort: ptr.To(intstr.FromInt32(0))}}}
		}, "spec.service.ports[0]", "targetPort must be a port number from 1 to 65535 or a container port's name"},
		{"unknown rollout failure action", func(a *flotillav1.MyApp) {
			a.Spec.Rollout = &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: &flotillav1.ProgressiveRollout{OnFailure: "Explode"}}
		}, "spec.rollout.progressive.onFailure", "Unsupported value"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			app := validApp("bad-" + strings.ReplaceAll(tc.name, " ", "-"))
			tc.mutate(app)
			err := c.Create(ctx, app)
			if err == nil {
				t.Fatalf("case %d (%s): the apiserver accepted an invalid MyApp", i, tc.name)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.message) {
				t.Fatalf("error does not name field %q with %q:\n%s", tc.field, tc.message, msg)
			}
		})
	}

	t.Run("valid app is accepted with defaults", func(t *testing.T) {
		app := validApp("good")
		app.Spec.Replicas = nil
		app.Spec.Failover = &flotillav1.FailoverPolicy{ClusterUnreachable: &flotillav1.ClusterFailover{}, Failback: &flotillav1.FailbackPolicy{}}
		app.Spec.Placement.ReplicaScheduling = divided(flotillav1.ReplicaDivisionWeighted, &flotillav1.ClusterPreferences{
			StaticWeightList: []flotillav1.StaticClusterWeight{{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}, Weight: 2}},
		})
		if err := c.Create(ctx, app); err != nil {
			t.Fatalf("a valid MyApp was refused: %v", err)
		}
		got := &flotillav1.MyApp{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Replicas == nil || *got.Spec.Replicas != 1 {
			t.Errorf("spec.replicas defaulted to %v, want 1", got.Spec.Replicas)
		}
		cu := got.Spec.Failover.ClusterUnreachable
		if cu.TolerationSeconds == nil || *cu.TolerationSeconds != flotillav1.DefaultUnreachableTolerationSeconds || cu.PurgeMode != flotillav1.PurgeGraciously {
			t.Errorf("failover.clusterUnreachable defaulted to %+v, want tolerationSeconds %d and Graciously", cu, flotillav1.DefaultUnreachableTolerationSeconds)
		}
		fb := got.Spec.Failover.Failback
		if fb.Enabled == nil || !*fb.Enabled || fb.StabilizationWindowSeconds == nil || *fb.StabilizationWindowSeconds != 30 {
			t.Errorf("failover.failback defaulted to %+v, want enabled with a 30s window", fb)
		}
	})

	t.Run("the Deployment knobs are accepted and kept as given", func(t *testing.T) {
		for name, strategy := range map[string]*appsv1.DeploymentStrategy{
			"recreate": {Type: appsv1.RecreateDeploymentStrategyType},
			"rolling": {Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromString("100%"))}},
			"rolling-untyped": {RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("30%"))}},
		} {
			app := validApp("knobs-" + name)
			app.Spec.Strategy = strategy
			app.Spec.MinReadySeconds = ptr.To[int32](10)
			app.Spec.ProgressDeadlineSeconds = ptr.To[int32](11)
			app.Spec.RevisionHistoryLimit = ptr.To[int32](0)
			if err := c.Create(ctx, app); err != nil {
				t.Fatalf("%s: a valid MyApp was refused: %v", name, err)
			}
			got := &flotillav1.MyApp{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Spec.Strategy, strategy) || *got.Spec.MinReadySeconds != 10 ||
				*got.Spec.ProgressDeadlineSeconds != 11 || *got.Spec.RevisionHistoryLimit != 0 {
				t.Errorf("%s: stored %+v, %v, %v, %v", name, got.Spec.Strategy, *got.Spec.MinReadySeconds, *got.Spec.ProgressDeadlineSeconds, *got.Spec.RevisionHistoryLimit)
			}
		}
	})

	t.Run("a full pod template is accepted and kept as given", func(t *testing.T) {
		app := validApp("full-template")
		app.Spec.MainContainer = "web"
		app.Spec.Template = fullPodTemplate()
		if err := c.Create(ctx, app); err != nil {
			t.Fatalf("a valid MyApp with a full pod template was refused: %v", err)
		}
		got := &flotillav1.MyApp{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Spec.Template, app.Spec.Template) {
			t.Errorf("the stored template differs from the one created:\n got %+v\nwant %+v", got.Spec.Template, app.Spec.Template)
		}
	})

	t.Run("every example MyApp is accepted", func(t *testing.T) {
		files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no examples found: %v", err)
		}
		apps := 0
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
			for {
				var app flotillav1.MyApp
				if err := dec.Decode(&app); err == io.EOF {
					break
				} else if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				if app.Kind != "MyApp" {
					continue
				}
				app.Namespace = "default"
				app.Name = "example-" + app.Name
				if err := c.Create(ctx, &app); err != nil {
					t.Errorf("%s: MyApp %s refused: %v", f, app.Name, err)
				}
				apps++
			}
		}
		if apps < 5 {
			t.Fatalf("only %d example MyApps found in %d files", apps, len(files))
		}
	})

	t.Run("MyApp name too long for a Deployment label", func(t *testing.T) {
		app := validApp(strings.Repeat("a", 64))
		err := c.Create(ctx, app)
		if err == nil || !strings.Contains(err.Error(), "metadata.name must be a DNS-1123 label of at most 63 characters") {
			t.Fatalf("a MyApp with a 64-character name was not refused for its name: %v", err)
		}
	})

	t.Run("invalid member cluster name", func(t *testing.T) {
		mc := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 47)}}
		err := c.Create(ctx, mc)
		if err == nil || !strings.Contains(err.Error(), "metadata.name must be a DNS-1123 label of at most 46 characters") {
			t.Fatalf("a MemberCluster with a 47-character name was not refused for its name: %v", err)
		}
	})
}

// installCRDs installs Flotilla's CRDs and waits until they are served.
func installCRDs(cfg *rest.Config) error {
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{"../../deploy/hub/crds"}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}
	return nil
}

// fullPodTemplate is a pod template that uses what the first version could
// not say: a sidecar, an init container, probes, volumes from a ConfigMap
// and a Secret, a security context, a service account and pull secrets.
// Its main container is "web" and names no image (spec.image is its).
func fullPodTemplate() *flotillav1.PodTemplate {
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 5, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	return &flotillav1.PodTemplate{
		Metadata: &flotillav1.PodTemplateMetadata{Labels: map[string]string{"tier": "web"}, Annotations: map[string]string{"team": "payments"}},
		Spec: &corev1.PodSpec{
			ServiceAccountName: "web",
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry"}},
			SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)},
			InitContainers:     []corev1.Container{{Name: "migrate", Image: "registry.example.com/team/migrate:1", Command: []string{"/migrate"}}},
			Containers: []corev1.Container{
				{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
					ReadinessProbe: probe, LivenessProbe: probe.DeepCopy(),
					Env:          []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}},
					Resources:    corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}},
				{Name: "proxy", Image: "registry.example.com/team/proxy:2", Args: []string{"--upstream=127.0.0.1:8080"}},
			},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}}}},
		},
	}
}
