//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// ScaleToZeroInput is what scaleToZeroAndBack needs beyond the SpecInput:
// the placement and the replica count the app runs at, and what each
// member runs then (nil: what status.placement says once it places every
// replica, and after scaling back only members it ran in before).
type ScaleToZeroInput struct {
	SpecInput
	Placement flotillav1.Placement
	Template  *flotillav1.PodTemplate
	Replicas  int32
	Running   map[string]int32
}

// ScaleToZeroSpec: a MyApp Divided by static weights 1:1:1 of 6 replicas
// scaled to 0 keeps its Works and member Deployments, at 0 replicas, in
// the three members (the same objects), and is Ready (ScaledToZero, 0/0
// replicas, Applied, Available); scaled back to 6 the same Deployments run
// 2/2/2 and the app is Ready again.
func ScaleToZeroSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	m := in.Members[:3]
	scaleToZeroAndBack(t, ScaleToZeroInput{SpecInput: in, Placement: staticWeights(m, 1, 1, 1), Replicas: 6,
		Running: map[string]int32{m[0]: 2, m[1]: 2, m[2]: 2}})
}

// ScaleToZeroDuplicatedSpec: the same for a Duplicated MyApp of 2
// replicas: every member keeps its Deployment at 0, then runs 2 again.
func ScaleToZeroDuplicatedSpec(t *testing.T, in SpecInput) {
	scaleToZeroAndBack(t, ScaleToZeroInput{SpecInput: in, Placement: duplicated(), Replicas: 2, Running: each(in.Members, 2)})
}

// ScaleToZeroDynamicSpec: the same for 6 replicas Divided by dynamic
// weights (spare capacity): the members it ran in keep their Deployments at
// 0, and scaling back places the 6 replicas in those members again, on the
// same Deployments. It starts once the hub's view of spare capacity is
// current (settledSpareCPU).
func ScaleToZeroDynamicSpec(t *testing.T, in SpecInput) {
	settledSpareCPU(t, in)
	scaleToZeroAndBack(t, ScaleToZeroInput{SpecInput: in, Replicas: 6,
		Placement: flotillav1.Placement{ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
			ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
			ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
			WeightPreference:          &flotillav1.ClusterPreferences{DynamicWeight: flotillav1.DynamicWeightAvailableReplicas},
		}},
		Template: &flotillav1.PodTemplate{Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
		}},
	})
}

// placedAll waits until status.placement places every replica and returns
// the members with replicas.
func placedAll(t *testing.T, in SpecInput, name string, replicas int32) map[string]int32 {
	t.Helper()
	var running map[string]int32
	eventually(t, fmt.Sprintf("status.placement placing %d replicas", replicas), convergeTimeout, func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		if app.Status.Placement == nil || app.Status.Placement.ScheduledGeneration != app.Generation {
			return fmt.Errorf("no placement for generation %d yet", app.Generation)
		}
		running = map[string]int32{}
		var sum int32
		for m, n := range placementOf(app) {
			if n > 0 {
				running[m] = n
				sum += n
			}
		}
		if sum != replicas {
			return fmt.Errorf("status.placement %v places %d replicas, want %d", running, sum, replicas)
		}
		return nil
	})
	return running
}

func scaleToZeroAndBack(t *testing.T, in ScaleToZeroInput) {
	ctx := context.Background()
	app := newMyApp(in.SpecInput, "web", in.Replicas, in.Placement)
	app.Spec.Template = in.Template
	createMyApp(t, in.SpecInput, app)
	derived := in.Running == nil
	if derived {
		in.Running = placedAll(t, in.SpecInput, "web", in.Replicas)
		t.Logf("placed: %v", in.Running)
	}
	members := sortedKeys(in.Running)
	eventually(t, fmt.Sprintf("Deployments running %v", in.Running), convergeTimeout, deploymentsRolledOut(in.SpecInput, "web", want(in.Running)))
	eventually(t, fmt.Sprintf("MyApp web Ready with %v", in.Running), convergeTimeout, appReady(in.SpecInput, "web", in.Running))
	deps, err := deploymentIDs(ctx, in.SpecInput, "web", members...)
	if err != nil {
		t.Fatal(err)
	}
	works, err := workIDs(ctx, in.SpecInput, "web")
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string) {
		t.Helper()
		now, err := deploymentIDs(ctx, in.SpecInput, "web", sortedKeys(deps)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameUIDs(deps, now, false); err != nil {
			t.Fatalf("%s: member Deployments recreated: %v", what, err)
		}
		nowWorks, err := workIDs(ctx, in.SpecInput, "web")
		if err != nil {
			t.Fatal(err)
		}
		if err := sameUIDs(works, nowWorks, false); err != nil {
			t.Fatalf("%s: Works recreated: %v", what, err)
		}
	}

	start := time.Now()
	updateMyApp(t, in.SpecInput, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](0) })
	zero := each(members, 0)
	eventually(t, "scaled to 0: MyApp web Ready (ScaledToZero, 0/0 replicas), Applied and Available", convergeTimeout, scaledToZero(in.SpecInput, "web", zero))
	t.Logf("scale to 0: Ready=True ScaledToZero %s after the update", time.Since(start).Round(time.Millisecond))
	eventually(t, "scaled to 0: Works kept in "+fmt.Sprint(members), convergeTimeout, worksOnlyIn(in.SpecInput, "web", members...))
	eventually(t, "scaled to 0: Deployments kept at 0 replicas", convergeTimeout, deploymentsRolledOut(in.SpecInput, "web", want(zero)))
	same("scaled to 0")
	consistently(t, "scaled to 0: stays Ready with the Works kept", 3*time.Second, func() error {
		if err := scaledToZero(in.SpecInput, "web", zero)(); err != nil {
			return err
		}
		return worksOnlyIn(in.SpecInput, "web", members...)()
	})

	start = time.Now()
	updateMyApp(t, in.SpecInput, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To(in.Replicas) })
	if derived {
		back := placedAll(t, in.SpecInput, "web", in.Replicas)
		for m := range back {
			if _, kept := in.Running[m]; !kept {
				t.Fatalf("back to %d: placed %v, in a member it did not run in before (%v)", in.Replicas, back, in.Running)
			}
		}
		t.Logf("placed back: %v", back)
		in.Running = back
		for m := range deps {
			if _, ok := back[m]; !ok {
				// No replica there any more: its Work and Deployment go.
				delete(deps, m)
				delete(works, m)
			}
		}
	}
	eventually(t, fmt.Sprintf("back to %d: Deployments running %v", in.Replicas, in.Running), convergeTimeout, deploymentsRolledOut(in.SpecInput, "web", want(in.Running)))
	eventually(t, fmt.Sprintf("back to %d: MyApp web Ready with %v", in.Replicas, in.Running), convergeTimeout, appReady(in.SpecInput, "web", in.Running))
	t.Logf("scale 0 -> %d: Ready %s after the update", in.Replicas, time.Since(start).Round(time.Millisecond))
	same(fmt.Sprintf("back to %d", in.Replicas))
}

// scaledToZero checks the status of a MyApp at 0 replicas: what appReady
// checks (every kept cluster Available 0/0), Ready with reason
// ScaledToZero and message "0/0 replicas", Applied and Available True, and
// a placement that keeps every cluster at 0 and says so.
func scaledToZero(in SpecInput, name string, kept map[string]int32) func() error {
	ready := appReady(in, name, kept)
	return func() error {
		if err := ready(); err != nil {
			return err
		}
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionReady)
		if c.Reason != flotillav1.ReasonScaledToZero || c.Message != "0/0 replicas" {
			return fmt.Errorf("Ready condition %s, want reason %s and message 0/0 replicas", conditionString(c), flotillav1.ReasonScaledToZero)
		}
		for _, typ := range []string{flotillav1.ConditionApplied, flotillav1.ConditionAvailable} {
			if c := meta.FindStatusCondition(app.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != app.Generation {
				return fmt.Errorf("%s condition %s", typ, conditionString(c))
			}
		}
		if p := app.Status.Placement; p == nil || len(p.Clusters) != len(kept) {
			return fmt.Errorf("status.placement %v, want %v", placementOf(app), kept)
		}
		for _, tc := range app.Status.Placement.Clusters {
			if tc.Replicas != 0 || tc.Reason != flotillav1.TargetReasonKeptAtZero {
				return fmt.Errorf("status.placement cluster %s: %d replicas, reason %q; want 0, %s", tc.Name, tc.Replicas, tc.Reason, flotillav1.TargetReasonKeptAtZero)
			}
		}
		return nil
	}
}

// ScaleToZeroProgressiveSpec: a Progressive MyApp (Divided 1:1:1 of 6,
// minSuccessTime 30s, one cluster at a time) scaled to 0 takes a new
// image in every member at once: the rollout completes in one step (no
// cluster waits in a wave), every Deployment carries the image at 0
// replicas, and the app stays Ready as ScaledToZero.
func ScaleToZeroProgressiveSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	m := in.Members[:3]
	running := map[string]int32{m[0]: 2, m[1]: 2, m[2]: 2}
	app := progressiveApp(in, 6, staticWeights(m, 1, 1, 1), flotillav1.ProgressiveRollout{
		MaxConcurrency: ptr.To(intstr.FromInt32(1)), MinSuccessTime: &metav1.Duration{Duration: 30 * time.Second},
	})
	createMyApp(t, in, app)
	eventually(t, "MyApp web Ready with 2/2/2", convergeTimeout, appReady(in, "web", running))
	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](0) })
	zero := each(m, 0)
	eventually(t, "scaled to 0: MyApp web Ready (ScaledToZero)", convergeTimeout, scaledToZero(in, "web", zero))
	deps, err := deploymentIDs(context.Background(), in, "web", m...)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Image = rolledImage })
	eventually(t, "the rollout of "+rolledImage+" complete on every cluster, none of them in a wave", convergeTimeout,
		rolloutIs(in, "web", flotillav1.RolloutPhaseComplete, allSucceeded(m), func(app *flotillav1.MyApp) error {
			if err := settled(3)(app); err != nil {
				return err
			}
			for _, c := range app.Status.Rollout.Clusters {
				if c.StartTime != nil {
					return fmt.Errorf("cluster %s went through a wave (started %s)", c.Name, c.StartTime)
				}
			}
			return nil
		}))
	rolled := map[string]deployWant{}
	for _, name := range m {
		rolled[name] = deployWant{replicas: 0, image: rolledImage}
	}
	eventually(t, "every Deployment with "+rolledImage+" at 0 replicas", convergeTimeout, deploymentsRolledOut(in, "web", rolled))
	eventually(t, "MyApp web Ready (ScaledToZero) on the new image", convergeTimeout, scaledToZero(in, "web", zero))
	t.Logf("image change at 0: rolled out and Ready %s after the update (minSuccessTime 30s, one cluster at a time)", time.Since(start).Round(time.Millisecond))
	now, err := deploymentIDs(context.Background(), in, "web", m...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(deps, now, false); err != nil {
		t.Fatalf("member Deployments recreated: %v", err)
	}
}

// ScaleToZeroFailoverSpec: with a MyApp (Divided 1:1:1, toleration 2s,
// failback window 5s) scaled to 0, member-2's control plane is stopped and
// started again: nothing is evicted or failed back, the placement keeps the
// three members at 0, no FailedOver event is emitted, the app stays Ready
// (ScaledToZero) and never Degraded, and scaling back to 6 runs 2/2/2 on
// the same Deployments, member-2's included.
func ScaleToZeroFailoverSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	m := in.Members[:3]
	lost := m[1]
	running := map[string]int32{m[0]: 2, m[1]: 2, m[2]: 2}
	createMyApp(t, in, failoverApp(in, true))
	eventually(t, "MyApp web Ready with 2/2/2", convergeTimeout, appReady(in, "web", running))
	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](0) })
	eventually(t, "scaled to 0: MyApp web Ready (ScaledToZero)", convergeTimeout, scaledToZero(in, "web", each(m, 0)))
	deps, err := deploymentIDs(ctx, in, "web", m...)
	if err != nil {
		t.Fatal(err)
	}

	restart := stopMember(t, in, lost)
	eventually(t, lost+" tainted unreachable on the hub", convergeTimeout, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: lost}, mc); err != nil {
			return err
		}
		for _, taint := range mc.Spec.Taints {
			if taint.Key == flotillav1.TaintClusterUnreachable && taint.TimeAdded != nil {
				return nil
			}
		}
		return fmt.Errorf("taints %v", mc.Spec.Taints)
	})
	// Well past the 2s toleration.
	consistently(t, "nothing evicted and no alarm while "+lost+" is lost", 10*time.Second, quietAtZero(in, m))
	restart()
	// Well past the 5s failback window.
	consistently(t, "nothing failing back and no alarm after "+lost+" returns", 10*time.Second, quietAtZero(in, m))
	eventually(t, "MyApp web Ready (ScaledToZero) with every member confirming 0", convergeTimeout, scaledToZero(in, "web", each(m, 0)))

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](6) })
	eventually(t, "back to 6: Deployments running 2/2/2", convergeTimeout, deploymentsRolledOut(in, "web", want(running)))
	eventually(t, "back to 6: MyApp web Ready with 2/2/2", convergeTimeout, appReady(in, "web", running))
	now, err := deploymentIDs(ctx, in, "web", m...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(deps, now, false); err != nil {
		t.Fatalf("member Deployments recreated: %v", err)
	}
}

// quietAtZero checks that a MyApp at 0 raises no alarm: Ready True
// (ScaledToZero), Degraded not True, every member kept in the placement at
// 0 with nothing evicted, a Work for each, and no FailedOver event.
func quietAtZero(in SpecInput, members []string) func() error {
	return func() error {
		ctx := context.Background()
		app, err := getMyApp(ctx, in, "web")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != flotillav1.ReasonScaledToZero {
			return fmt.Errorf("Ready condition %s", conditionString(c))
		}
		if c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
			return fmt.Errorf("Degraded condition %s", conditionString(c))
		}
		p := app.Status.Placement
		if p == nil || len(p.Evicted) > 0 || fmt.Sprint(placementOf(app)) != fmt.Sprint(each(members, 0)) {
			return fmt.Errorf("status.placement %+v, want %v kept at 0 and nothing evicted", p, each(members, 0))
		}
		if err := worksOnlyIn(in, "web", members...)(); err != nil {
			return err
		}
		var events eventsv1.EventList
		if err := in.Provider.Hub().List(ctx, &events, client.InNamespace(in.Namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Regarding.Name == "web" && (e.Reason == flotillav1.ReasonFailedOver || e.Reason == "FailedBack") {
				return fmt.Errorf("event %s: %s", e.Reason, e.Note)
			}
		}
		return nil
	}
}
