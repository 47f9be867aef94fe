package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

func divided12(weights map[string]int64) flotillav1.Placement {
	var list []flotillav1.StaticClusterWeight
	for _, n := range []string{"member-1", "member-2", "member-3"} {
		if w, ok := weights[n]; ok {
			list = append(list, flotillav1.StaticClusterWeight{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{n}}, Weight: w})
		}
	}
	return flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
		ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
		ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
		WeightPreference:          &flotillav1.ClusterPreferences{StaticWeightList: list},
	}}
}

func newApp(name string, replicas int32, p flotillav1.Placement) *flotillav1.MyApp {
	return &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: flotillav1.MyAppSpec{
			Image:     "registry.example.com/team/web:1.0",
			Replicas:  ptr.To(replicas),
			Placement: p,
		},
	}
}

// TestHubPlacesWorksForEverySchedulingMode runs the hub's MyApp controller
// against a real hub apiserver with three Ready members and checks the Works
// (and the Deployments they carry) for each scheduling mode, overrides,
// scaling, an image change and deletion.
func TestHubPlacesWorksForEverySchedulingMode(t *testing.T) {
	env := newHubEnv(t, nil)
	ctx := context.Background()
	hb := startHeartbeats(t, env.hub.Tracker)
	createMembers(t, env.c, "member-1", "member-2", "member-3")
	// Capacity for 6, 12 and 18 replicas of a 1-cpu / 1Gi pod.
	hb.connect("member-1", capacity("6", "64Gi", 110))
	hb.connect("member-2", capacity("12", "64Gi", 110))
	hb.connect("member-3", capacity("18", "64Gi", 110))
	waitReady(t, env.c, "member-1", "member-2", "member-3")
	// The dynamic case reads capacity from MemberCluster status.
	eventually(t, "member-3's resource summary in its status", 20*time.Second, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := env.c.Get(ctx, client.ObjectKey{Name: "member-3"}, mc); err != nil {
			return err
		}
		if mc.Status.Resources == nil {
			return fmt.Errorf("no resources yet")
		}
		return nil
	})

	cases := []struct {
		name      string
		replicas  int32
		placement flotillav1.Placement
		template  *flotillav1.PodTemplate
		want      map[string]int32
	}{
		{"duplicated", 3, flotillav1.Placement{}, nil, map[string]int32{"member-1": 3, "member-2": 3, "member-3": 3}},
		{"static-weights", 12, divided12(map[string]int64{"member-1": 1, "member-2": 2, "member-3": 3}), nil,
			map[string]int32{"member-1": 2, "member-2": 4, "member-3": 6}},
		{"dynamic-weights", 12, flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
			ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided, ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
			WeightPreference: &flotillav1.ClusterPreferences{DynamicWeight: flotillav1.DynamicWeightAvailableReplicas}}},
			&flotillav1.PodTemplate{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resourceQty("1"), corev1.ResourceMemory: resourceQty("1Gi")}}},
			map[string]int32{"member-1": 2, "member-2": 4, "member-3": 6}},
		{"aggregated", 10, flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
			ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided, ReplicaDivisionPreference: flotillav1.ReplicaDivisionAggregated}},
			&flotillav1.PodTemplate{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resourceQty("1")}}},
			map[string]int32{"member-3": 10}},
		{"affinity-by-name", 2, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-3"}}}, nil,
			map[string]int32{"member-1": 2, "member-3": 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			app := newApp(tc.name, tc.replicas, tc.placement)
			app.Spec.Template = tc.template
			if err := env.c.Create(ctx, app); err != nil {
				t.Fatalf("creating MyApp: %v", err)
			}
			eventually(t, "Works of "+tc.name, 20*time.Second, func() error {
				got, err := replicasByCluster(env.c, app)
				if err != nil {
					return err
				}
				return equalReplicas(got, tc.want)
			})
			eventually(t, "status.placement and Scheduled of "+tc.name, 10*time.Second, func() error {
				got := &flotillav1.MyApp{}
				if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
					return err
				}
				if got.Status.Placement == nil || len(got.Status.Placement.Clusters) != len(tc.want) {
					return fmt.Errorf("placement %+v", got.Status.Placement)
				}
				c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionScheduled)
				if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
					return fmt.Errorf("Scheduled condition %+v", c)
				}
				return nil
			})
		})
	}

	t.Run("overrides apply to their clusters only", func(t *testing.T) {
		app := newApp("overridden", 2, flotillav1.Placement{})
		app.Spec.Overrides = []flotillav1.ClusterOverride{{
			Name:          "eu-mirror",
			TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
			Image:         &flotillav1.ImageOverride{Registry: "mirror.eu.example.com", Tag: "1.0-eu"},
			Replicas:      ptr.To[int32](5),
			Env:           []corev1.EnvVar{{Name: "REGION", Value: "eu"}},
		}}
		if err := env.c.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
		eventually(t, "overridden Works", 20*time.Second, func() error {
			deps, err := workDeployments(env.c, app)
			if err != nil {
				return err
			}
			if len(deps) != 3 {
				return fmt.Errorf("%d Works, want 3", len(deps))
			}
			eu := deps["member-1"].Spec.Template.Spec.Containers[0]
			if eu.Image != "mirror.eu.example.com/team/web:1.0-eu" || *deps["member-1"].Spec.Replicas != 5 || len(eu.Env) != 1 || eu.Env[0].Value != "eu" {
				return fmt.Errorf("member-1 got image %s, replicas %d, env %v", eu.Image, *deps["member-1"].Spec.Replicas, eu.Env)
			}
			for _, n := range []string{"member-2", "member-3"} {
				c := deps[n].Spec.Template.Spec.Containers[0]
				if c.Image != "registry.example.com/team/web:1.0" || *deps[n].Spec.Replicas != 2 || len(c.Env) != 0 {
					return fmt.Errorf("%s got image %s, replicas %d, env %v: the override leaked", n, c.Image, *deps[n].Spec.Replicas, c.Env)
				}
			}
			return nil
		})
	})

	t.Run("scale and image change update the Works", func(t *testing.T) {
		app := &flotillav1.MyApp{}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "static-weights"}, app); err != nil {
			t.Fatal(err)
		}
		uids := map[string]string{}
		var works flotillav1.WorkList
		if err := env.c.List(ctx, &works, client.MatchingLabels{flotillav1.LabelMyAppName: app.Name}); err != nil {
			t.Fatal(err)
		}
		for _, w := range works.Items {
			uids[w.Namespace] = string(w.UID)
		}
		// The controller writes the MyApp's status meanwhile: retry on a
		// conflict.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
				return err
			}
			app.Spec.Replicas = ptr.To[int32](24)
			app.Spec.Image = "registry.example.com/team/web:2.0"
			return env.c.Update(ctx, app)
		}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "Works scaled to 4/8/12 with image 2.0", 20*time.Second, func() error {
			deps, err := workDeployments(env.c, app)
			if err != nil {
				return err
			}
			want := map[string]int32{"member-1": 4, "member-2": 8, "member-3": 12}
			for n, r := range want {
				d := deps[n]
				if d == nil || *d.Spec.Replicas != r || d.Spec.Template.Spec.Containers[0].Image != "registry.example.com/team/web:2.0" {
					return fmt.Errorf("%s: %+v", n, d)
				}
			}
			return nil
		})
		if err := env.c.List(ctx, &works, client.MatchingLabels{flotillav1.LabelMyAppName: app.Name}); err != nil {
			t.Fatal(err)
		}
		for _, w := range works.Items {
			if uids[w.Namespace] != string(w.UID) {
				t.Errorf("Work in %s was recreated instead of updated", w.Namespace)
			}
		}
	})

	t.Run("deleting a MyApp removes every Work", func(t *testing.T) {
		app := &flotillav1.MyApp{}
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "duplicated"}, app); err != nil {
			t.Fatal(err)
		}
		if !containsString(app.Finalizers, flotillav1.MyAppFinalizer) {
			t.Fatalf("MyApp has no %s finalizer: %v", flotillav1.MyAppFinalizer, app.Finalizers)
		}
		if err := env.c.Delete(ctx, app); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the MyApp and its Works gone", 20*time.Second, func() error {
			got, err := replicasByCluster(env.c, app)
			if err != nil {
				return err
			}
			if len(got) > 0 {
				return fmt.Errorf("Works left: %v", got)
			}
			err = env.c.Get(ctx, client.ObjectKeyFromObject(app), &flotillav1.MyApp{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("MyApp still there (err %v)", err)
			}
			return nil
		})
	})
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// reportWork feeds a status report through the sync server's status sink,
// as an agent's report would arrive.
func reportWork(t *testing.T, env *hubEnv, cluster string, app *flotillav1.MyApp, ready int32, degraded *metav1.Condition) {
	t.Helper()
	work := &flotillav1.Work{}
	key := client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: flotillav1.WorkName(app.Namespace, app.Name)}
	eventually(t, "Work "+key.String()+" exists", 10*time.Second, func() error { return env.c.Get(context.Background(), key, work) })
	d, err := workDeployments(env.c, app)
	if err != nil {
		t.Fatal(err)
	}
	want := *d[cluster].Spec.Replicas
	st := &flotillav1.WorkStatus{
		ObservedGeneration: work.Generation,
		Manifests: []flotillav1.ManifestStatus{{
			ResourceIdentifier: flotillav1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "default", Name: app.Name},
			Workload:           &flotillav1.WorkloadStatus{Replicas: want, ReadyReplicas: ready, AvailableReplicas: ready, UpdatedReplicas: want},
		}},
	}
	cond := func(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: work.Generation, LastTransitionTime: metav1.Now()}
	}
	st.Conditions = []metav1.Condition{cond(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, "")}
	if degraded != nil {
		degraded.ObservedGeneration, degraded.LastTransitionTime = work.Generation, metav1.Now()
		st.Conditions = append(st.Conditions, *degraded)
	} else {
		st.Conditions = append(st.Conditions, cond(flotillav1.ConditionDegraded, metav1.ConditionFalse, flotillav1.ReasonAsExpected, ""))
	}
	env.hub.StatusWriter.WorkStatus(context.Background(), cluster, key.Name, st)
}

// TestHubAggregatesStatus feeds agent reports through the sync server's
// status sink and checks MyApp.status: per-cluster entries, totals, and the
// conditions, including Degraded carrying the member's own message.
func TestHubAggregatesStatus(t *testing.T) {
	env := newHubEnv(t, nil)
	ctx := context.Background()
	hb := startHeartbeats(t, env.hub.Tracker)
	createMembers(t, env.c, "member-1", "member-2", "member-3")
	for _, n := range []string{"member-1", "member-2", "member-3"} {
		hb.connect(n, nil)
	}
	waitReady(t, env.c, "member-1", "member-2", "member-3")
	app := newApp("web", 12, divided12(map[string]int64{"member-1": 1, "member-2": 2, "member-3": 3}))
	if err := env.c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	get := func() *flotillav1.MyApp {
		got := &flotillav1.MyApp{}
		if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	eventually(t, "Applied=Unknown WaitingForMember before any report", 20*time.Second, func() error {
		c := meta.FindStatusCondition(get().Status.Conditions, flotillav1.ConditionApplied)
		if c == nil || c.Status != metav1.ConditionUnknown || c.Reason != flotillav1.ReasonWaitingForMember {
			return fmt.Errorf("Applied %+v", c)
		}
		return nil
	})

	reportWork(t, env, "member-1", app, 2, nil)
	reportWork(t, env, "member-2", app, 4, nil)
	reportWork(t, env, "member-3", app, 3, nil) // 3 of 6 ready
	eventually(t, "partial readiness aggregated", 20*time.Second, func() error {
		got := get()
		if got.Status.ReadyReplicas != 9 || got.Status.DesiredReplicas != 12 || got.Status.ClusterCount != 3 {
			return fmt.Errorf("ready %d desired %d clusters %d", got.Status.ReadyReplicas, got.Status.DesiredReplicas, got.Status.ClusterCount)
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionReady)
		prog := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionProgressing)
		if ready == nil || ready.Status != metav1.ConditionFalse || prog == nil || prog.Status != metav1.ConditionTrue || !strings.Contains(prog.Message, "member-3") {
			return fmt.Errorf("Ready %+v Progressing %+v", ready, prog)
		}
		return nil
	})

	reportWork(t, env, "member-3", app, 6, nil)
	eventually(t, "MyApp Ready with every cluster Available", 20*time.Second, func() error {
		got := get()
		for _, ct := range []string{flotillav1.ConditionReady, flotillav1.ConditionAvailable, flotillav1.ConditionApplied} {
			c := meta.FindStatusCondition(got.Status.Conditions, ct)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation {
				return fmt.Errorf("%s: %+v", ct, c)
			}
		}
		for _, cs := range got.Status.Clusters {
			if cs.Phase != flotillav1.ClusterAppAvailable || cs.ReadyReplicas != cs.Assigned {
				return fmt.Errorf("cluster %+v", cs)
			}
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
		return nil
	})

	msg := `Deployment "web" exceeded its progress deadline`
	reportWork(t, env, "member-2", app, 1, &metav1.Condition{Type: flotillav1.ConditionDegraded, Status: metav1.ConditionTrue,
		Reason: flotillav1.ReasonProgressDeadlineExceeded, Message: msg})
	eventually(t, "Degraded carrying member-2's message", 20*time.Second, func() error {
		got := get()
		c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionDegraded)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != flotillav1.ReasonProgressDeadlineExceeded || !strings.Contains(c.Message, "member-2") || !strings.Contains(c.Message, msg) {
			return fmt.Errorf("Degraded %+v", c)
		}
		for _, cs := range got.Status.Clusters {
			if cs.Name == "member-2" && (cs.Phase != flotillav1.ClusterAppDegraded || !strings.Contains(cs.Message, msg)) {
				return fmt.Errorf("member-2 entry %+v", cs)
			}
		}
		if r := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse {
			return fmt.Errorf("Ready %+v", r)
		}
		return nil
	})
}

// TestRenderFailureShowsOnTheMyApp: two overrides whose patches each apply
// to the app's rendering, but not together to the cluster both select,
// pass the webhook's check of each override on its own. The hub writes no
// Work for the app, says so on the MyApp (Degraded, RenderFailed, naming
// the patch), and once the spec is fixed writes the Works and clears it.
func TestRenderFailureShowsOnTheMyApp(t *testing.T) {
	env := newHubEnv(t, nil)
	ctx := context.Background()
	connectReady(t, env, "member-1", "member-2")

	app := newApp("clash", 2, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}})
	app.Spec.Template = &flotillav1.PodTemplate{Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}
	one := flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}
	app.Spec.Overrides = []flotillav1.ClusterOverride{
		{Name: "drop-env", TargetCluster: one, Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchRemove, Path: "/spec/template/spec/containers/0/env"}}},
		{Name: "drop-a", TargetCluster: one, Patches: []flotillav1.JSONPatch{{Op: flotillav1.JSONPatchRemove, Path: "/spec/template/spec/containers/0/env/0"}}},
	}
	if err := env.c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitDegraded(t, env.c, app, flotillav1.ReasonRenderFailed, "spec.overrides[1] (drop-a) for member-1: patches[0].path")
	if works, err := worksOf(env.c, app); err != nil || len(works) != 0 {
		t.Fatalf("Works of an app that does not render: %v, %v; want none", works, err)
	}

	updateMyApp(t, env.c, app, func(a *flotillav1.MyApp) { a.Spec.Overrides = a.Spec.Overrides[:1] })
	waitWorksAndCleared(t, env.c, app, 2, flotillav1.ReasonRenderFailed)
}

// TestWorkTooLargeShowsOnTheMyApp: a hub whose --max-work-bytes is 8 KiB
// and an app whose env override makes member-1's Work larger than that.
// The hub writes no Work of the app at all (member-2's would fit, but an
// app is rendered whole or not at all), says on the MyApp which app,
// cluster and limit (Degraded, WorkTooLarge), and once the override
// shrinks writes both Works and clears it. Another app on the same hub is
// placed as usual meanwhile.
func TestWorkTooLargeShowsOnTheMyApp(t *testing.T) {
	const limit = 8 << 10
	env := newHubEnv(t, func(o *setup.Options) { o.MaxWorkBytes = limit })
	ctx := context.Background()
	connectReady(t, env, "member-1", "member-2")

	both := flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{"member-1", "member-2"}}}
	app := newApp("big", 2, both)
	app.Spec.Overrides = []flotillav1.ClusterOverride{{
		Name: "bulky", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}},
		Env: []corev1.EnvVar{{Name: "BULK", Value: strings.Repeat("x", limit)}},
	}}
	if err := env.c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	other := newApp("small", 2, both)
	if err := env.c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitDegraded(t, env.c, app, flotillav1.ReasonWorkTooLarge,
		"MyApp "+app.Namespace+"/big", "cluster member-1", fmt.Sprintf("limit of %d", limit), "--max-work-bytes")
	if works, err := worksOf(env.c, app); err != nil || len(works) != 0 {
		t.Fatalf("Works of an app over the limit: %v, %v; want none", works, err)
	}
	eventually(t, "both Works of MyApp small written", 30*time.Second, func() error {
		works, err := worksOf(env.c, other)
		if err != nil || len(works) != 2 {
			return fmt.Errorf("%d Works (%v), want 2", len(works), err)
		}
		return nil
	})

	updateMyApp(t, env.c, app, func(a *flotillav1.MyApp) { a.Spec.Overrides[0].Env[0].Value = "small" })
	waitWorksAndCleared(t, env.c, app, 2, flotillav1.ReasonWorkTooLarge)
}

// connectReady creates MemberClusters names, has them heartbeat until the
// test ends, and waits until they are Ready.
func connectReady(t *testing.T, env *hubEnv, names ...string) {
	t.Helper()
	hb := startHeartbeats(t, env.hub.Tracker)
	createMembers(t, env.c, names...)
	for _, n := range names {
		hb.connect(n, nil)
	}
	waitReady(t, env.c, names...)
}

// waitDegraded waits until app is Degraded with reason and a message that
// says each of wants.
func waitDegraded(t *testing.T, c client.Client, app *flotillav1.MyApp, reason string, wants ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("MyApp %s Degraded with reason %s", app.Name, reason), 30*time.Second, func() error {
		got := &flotillav1.MyApp{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionDegraded)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != reason {
			return fmt.Errorf("Degraded: %+v", cond)
		}
		for _, want := range wants {
			if !strings.Contains(cond.Message, want) {
				return fmt.Errorf("the message does not say %q: %q", want, cond.Message)
			}
		}
		return nil
	})
}

// waitWorksAndCleared waits until app has n Works and is no longer
// Degraded for reason.
func waitWorksAndCleared(t *testing.T, c client.Client, app *flotillav1.MyApp, n int, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d Works of MyApp %s written and %s cleared", n, app.Name, reason), 30*time.Second, func() error {
		works, err := worksOf(c, app)
		if err != nil || len(works) != n {
			return fmt.Errorf("%d Works (%v), want %d", len(works), err, n)
		}
		got := &flotillav1.MyApp{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(app), got); err != nil {
			return err
		}
		if cond := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionDegraded); cond != nil && cond.Reason == reason {
			return fmt.Errorf("still Degraded for %s: %+v", reason, cond)
		}
		return nil
	})
}
