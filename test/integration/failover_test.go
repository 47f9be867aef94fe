package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
)

// TestHubFailsOverAndBack stops one member's heartbeats and checks that the
// hub marks it not Ready and taints it, that after the toleration its
// replicas move to the other members while its Work is kept until the
// replacements are available, that a member that keeps flapping gets
// nothing back, and that once it stays Ready for the stabilization window
// its replicas fail back.
func TestHubFailsOverAndBack(t *testing.T) {
	env := newHubEnv(t, func(o *setup.Options) { o.HeartbeatGrace = time.Second })
	ctx := context.Background()
	hb := startHeartbeats(t, env.hub.Tracker)
	members := []string{"member-1", "member-2", "member-3"}
	createMembers(t, env.c, members...)
	for _, n := range members {
		hb.connect(n, nil)
	}
	waitReady(t, env.c, members...)

	app := newApp("web", 6, divided12(map[string]int64{"member-1": 1, "member-2": 1, "member-3": 1}))
	app.Spec.Failover = &flotillav1.FailoverPolicy{
		ClusterUnreachable: &flotillav1.ClusterFailover{TolerationSeconds: ptr.To[int32](1), PurgeMode: flotillav1.PurgeGraciously},
		Failback:           &flotillav1.FailbackPolicy{Enabled: ptr.To(true), StabilizationWindowSeconds: ptr.To[int32](5)},
	}
	if err := env.c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	placed := func(want map[string]int32) func() error {
		return func() error {
			got := &flotillav1.MyApp{}
			if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
				return err
			}
			if got.Status.Placement == nil {
				return fmt.Errorf("no placement yet")
			}
			have := map[string]int32{}
			for _, c := range got.Status.Placement.Clusters {
				have[c.Name] = c.Replicas
			}
			return equalReplicas(have, want)
		}
	}
	even := map[string]int32{"member-1": 2, "member-2": 2, "member-3": 2}
	eventually(t, "2/2/2 placement", 20*time.Second, placed(even))
	for _, n := range members {
		reportWork(t, env, n, app, 2, nil)
	}

	// member-2 goes dark.
	hb.pause("member-2")
	eventually(t, "member-2 not Ready and tainted unreachable", 20*time.Second, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := env.c.Get(ctx, client.ObjectKey{Name: "member-2"}, mc); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status == metav1.ConditionTrue {
			return fmt.Errorf("Ready %+v", c)
		}
		for _, taint := range mc.Spec.Taints {
			if taint.Key == flotillav1.TaintClusterUnreachable && taint.TimeAdded != nil {
				return nil
			}
		}
		return fmt.Errorf("taints %+v", mc.Spec.Taints)
	})
	failedOver := map[string]int32{"member-1": 3, "member-3": 3}
	eventually(t, "member-2's replicas moved to member-1 and member-3", 20*time.Second, placed(failedOver))

	// Graceful eviction: member-2's Work stays until the replacements are
	// available.
	got := &flotillav1.MyApp{}
	if err := env.c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Placement.Evicted) != 1 || got.Status.Placement.Evicted[0].Name != "member-2" {
		t.Fatalf("evicted %+v, want member-2", got.Status.Placement.Evicted)
	}
	workKey := client.ObjectKey{Namespace: flotillav1.ClusterNamespace("member-2"), Name: flotillav1.WorkName(app.Namespace, app.Name)}
	if err := env.c.Get(ctx, workKey, &flotillav1.Work{}); err != nil {
		t.Fatalf("member-2's Work was not kept during graceful eviction: %v", err)
	}
	reportWork(t, env, "member-1", app, 3, nil)
	reportWork(t, env, "member-3", app, 3, nil)
	eventually(t, "member-2's Work deleted once the replacements are available", 20*time.Second, func() error {
		err := env.c.Get(ctx, workKey, &flotillav1.Work{})
		if err == nil {
			return fmt.Errorf("still there")
		}
		return client.IgnoreNotFound(err)
	})

	// member-2 flaps: Ready for 1s, gone for 2.5s, several times. It never
	// stays Ready for the 5s window, so nothing moves.
	for range 3 {
		hb.connect("member-2", nil)
		time.Sleep(time.Second)
		hb.pause("member-2")
		time.Sleep(2500 * time.Millisecond)
		if err := placed(failedOver)(); err != nil {
			t.Fatalf("a flapping member-2 changed the placement: %v", err)
		}
	}

	// member-2 comes back for good: its taint goes and, after the window,
	// its replicas fail back.
	hb.connect("member-2", nil)
	eventually(t, "member-2 Ready and untainted", 20*time.Second, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := env.c.Get(ctx, client.ObjectKey{Name: "member-2"}, mc); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Ready %+v", c)
		}
		if len(mc.Spec.Taints) != 0 {
			return fmt.Errorf("taints %+v", mc.Spec.Taints)
		}
		return nil
	})
	consistently(t, "no failback inside the stabilization window", 3*time.Second, placed(failedOver))
	eventually(t, "replicas failed back to member-2", 20*time.Second, placed(even))
}
