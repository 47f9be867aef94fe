package integration

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// hubCerts writes a CA and a hub certificate into a temporary folder.
func hubCerts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(dir, ca, []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHubWebhookRefusesInvalidMyApps runs the hub's admission webhook
// behind a real hub apiserver (which calls it over TLS on loopback) and
// checks that invalid MyApps are refused with messages naming the field, by
// the webhook where CEL cannot say it and by the schema where it can, and
// that a valid one is admitted with the policy in force filled in.
func TestHubWebhookRefusesInvalidMyApps(t *testing.T) {
	certDir := hubCerts(t)
	addr := freeAddr(t)
	env := newHubEnv(t, func(o *setup.Options) {
		o.CertDir = certDir
		o.WebhookAddr = addr
		o.RegisterWebhookURL = "https://" + addr
	})
	ctx := context.Background()
	createMembers(t, env.c, "member-1", "member-2")

	// The webhook answers once the manager serves it; until then the
	// apiserver fails closed.
	eventually(t, "the webhook admitting a valid MyApp", 30*time.Second, func() error {
		err := env.c.Create(ctx, newApp("probe", 1, flotillav1.Placement{}))
		return client.IgnoreAlreadyExists(err)
	})

	staticTo := func(names ...string) *flotillav1.ReplicaSchedulingStrategy {
		var list []flotillav1.StaticClusterWeight
		for _, n := range names {
			list = append(list, flotillav1.StaticClusterWeight{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{n}}, Weight: 1})
		}
		return &flotillav1.ReplicaSchedulingStrategy{ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided,
			ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted, WeightPreference: &flotillav1.ClusterPreferences{StaticWeightList: list}}
	}
	cases := []struct {
		name, field, message string
		mutate               func(*flotillav1.MyApp)
	}{
		{"uppercase repository", "spec.image", "must be an image reference",
			func(a *flotillav1.MyApp) { a.Spec.Image = "registry.example.com/Team/Web:1.0" }},
		{"image with two tags", "spec.image", "must be an image reference",
			func(a *flotillav1.MyApp) { a.Spec.Image = "nginx:1.0:2.0" }},
		{"requests above limits", "spec.template.resources.requests[cpu]", "must be less than or equal to the cpu limit",
			func(a *flotillav1.MyApp) {
				a.Spec.Template = &flotillav1.PodTemplate{Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}
			}},
		{"invalid label selector", "spec.placement.clusterAffinity.labelSelector", "",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{LabelSelector: &metav1.LabelSelector{
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near", Values: []string{"x"}}}}}
			}},
		{"toleration value with Exists", "spec.placement.clusterTolerations[0].value", "must be empty when operator is Exists",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.ClusterTolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"}}
			}},
		{"tolerationSeconds without NoExecute", "spec.placement.clusterTolerations[0].tolerationSeconds", "only valid with effect NoExecute",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.ClusterTolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr.To[int64](5)}}
			}},
		{"weight for a cluster the affinity excludes", "spec.placement.replicaScheduling.weightPreference.staticWeightList[1].targetCluster.clusterNames[0]", "never selects",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ExcludeClusters: []string{"member-2"}}
				a.Spec.Placement.ReplicaScheduling = staticTo("member-1", "member-2")
			}},
		{"weight for a cluster outside clusterNames", "spec.placement.replicaScheduling.weightPreference.staticWeightList[1].targetCluster.clusterNames[0]", "never selects",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}
				a.Spec.Placement.ReplicaScheduling = staticTo("member-1", "member-2")
			}},
		{"minGroups above the named clusters", "spec.placement.spreadConstraints[0].minGroups", "exceeds the 2 clusters",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}
				a.Spec.Placement.SpreadConstraints = []flotillav1.SpreadConstraint{{SpreadByField: flotillav1.SpreadByFieldCluster, MinGroups: ptr.To[int32](3)}}
			}},
		{"override producing an invalid image", "spec.overrides[0].image", "not a valid image reference",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "bad", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
					Image: &flotillav1.ImageOverride{Registry: "mirror..example.com"}}}
			}},
		{"override toleration with a value and Exists", "spec.overrides[0].tolerations[0].value", "must be empty when operator is Exists",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "gpu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
					Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Value: "yes"}}}}
			}},
		{"override node selector key", "spec.overrides[0].nodeSelector[gpu type]", "name part must consist of alphanumeric characters",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "gpu", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
					NodeSelector: map[string]string{"gpu type": "a100"}}}
			}},
		{"override patch on the replicas", "spec.overrides[0].patches[0].path", "is the scheduler's",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "p", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
					Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchReplace, Path: "/spec/replicas", Value: &apiextensionsv1.JSON{Raw: []byte("4")}}}}}
			}},
		{"override patch that does not apply", "spec.overrides[0].patches[0].path", "checked against the app's rendered Deployment",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "p", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
					Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchRemove, Path: "/spec/template/spec/nodeSelector/pool"}}}}
			}},
		{"override patch add without a value", "spec.overrides[0].patches[0].value", "is required for add and replace and not allowed for remove",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "p", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
					Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchAdd, Path: "/spec/paused"}}}}
			}},
		{"main container with an image of its own", "spec.template.spec.containers[0].image", "spec.image is the main container's image",
			func(a *flotillav1.MyApp) {
				a.Spec.Template = fullPodTemplate()
				a.Spec.Template.Spec.Containers[0].Image = "registry.example.com/team/web:9"
			}},
		{"main container that is not there", "spec.mainContainer", "names no container of spec.template.spec.containers",
			func(a *flotillav1.MyApp) {
				a.Spec.Template = fullPodTemplate()
				a.Spec.MainContainer = "api"
			}},
		{"first-version resources beside a pod spec", "spec.template.resources", "with spec.template.spec, set it on the container",
			func(a *flotillav1.MyApp) {
				a.Spec.Template = fullPodTemplate()
				a.Spec.Template.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
			}},
		{"sidecar request above its limit", "spec.template.spec.containers[1].resources.requests[memory]", "must be less than or equal to the memory limit",
			func(a *flotillav1.MyApp) {
				a.Spec.Template = fullPodTemplate()
				a.Spec.Template.Spec.Containers[1].Resources = corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
			}},
		{"resources override request above its limit", "spec.overrides[0].resources.requests[cpu]", "must be less than or equal to the cpu limit",
			func(a *flotillav1.MyApp) {
				a.Spec.Overrides = []flotillav1.ClusterOverride{{Name: "big", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
					Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
			}},
		{"Service ports without names", "spec.service.ports[1].name", "a Service of more than one port needs a name for each",
			func(a *flotillav1.MyApp) {
				a.Spec.Service = &flotillav1.ServiceSpec{Ports: []flotillav1.ServicePort{{Name: "http", Port: 80}, {Port: 443}}}
			}},
		{"Service ports of one name", "spec.service.ports[1].name", "Duplicate value",
			func(a *flotillav1.MyApp) {
				a.Spec.Service = &flotillav1.ServiceSpec{Ports: []flotillav1.ServicePort{{Name: "web", Port: 80}, {Name: "web", Port: 443}}}
			}},
		// The schema still answers first where it can.
		{"negative replicas (schema)", "spec.replicas", "should be greater than or equal to 0",
			func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](-3) }},
		{"minGroups above maxGroups (CEL)", "spec.placement.spreadConstraints[0]", "minGroups must be less than or equal to maxGroups",
			func(a *flotillav1.MyApp) {
				a.Spec.Placement.SpreadConstraints = []flotillav1.SpreadConstraint{{SpreadByField: flotillav1.SpreadByFieldRegion, MinGroups: ptr.To[int32](2), MaxGroups: ptr.To[int32](1)}}
			}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			app := newApp(fmt.Sprintf("bad-%d", i), 2, flotillav1.Placement{})
			tc.mutate(app)
			err := env.c.Create(ctx, app)
			if err == nil {
				t.Fatalf("an invalid MyApp (%s) was admitted", tc.name)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("error does not name %q with %q:\n%v", tc.field, tc.message, err)
			}
		})
	}

	t.Run("valid MyApp is admitted with the policy in force", func(t *testing.T) {
		got := &flotillav1.MyApp{}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "probe"}, got); err != nil {
			t.Fatal(err)
		}
		rs := got.Spec.Placement.ReplicaScheduling
		if rs == nil || rs.ReplicaSchedulingType != flotillav1.ReplicaSchedulingDuplicated {
			t.Errorf("replicaScheduling %+v, want Duplicated filled in", rs)
		}
		f := got.Spec.Failover
		if f == nil || f.ClusterUnreachable == nil || ptr.Deref(f.ClusterUnreachable.TolerationSeconds, -1) != flotillav1.DefaultUnreachableTolerationSeconds ||
			f.Failback == nil || !ptr.Deref(f.Failback.Enabled, false) || ptr.Deref(f.Failback.StabilizationWindowSeconds, -1) != flotillav1.DefaultFailbackWindowSeconds {
			t.Errorf("failover %+v, want the defaults filled in", f)
		}
	})
}
