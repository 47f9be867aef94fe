package cli

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// t0 is the "now" of the explanation tests.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type memberOpt func(*flotillav1.MemberCluster)

// fixtureMember is a Ready member with room for pods replicas.
func fixtureMember(name, region string, pods int64, opts ...memberOpt) flotillav1.MemberCluster {
	mc := flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
	mc.Spec.Region = region
	mc.Spec.Provider = "kwok"
	mc.Status.Conditions = []metav1.Condition{
		{Type: flotillav1.ConditionReady, Status: metav1.ConditionTrue, Reason: flotillav1.ReasonHeartbeating, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))},
		{Type: flotillav1.ConditionConnected, Status: metav1.ConditionTrue, Reason: "Connected", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))},
	}
	hb := metav1.NewTime(t0.Add(-2 * time.Second))
	mc.Status.LastHeartbeatTime = &hb
	mc.Status.Agent = &flotillav1.AgentInfo{Version: "v0.2.0"}
	mc.Status.Resources = &flotillav1.ResourceSummary{
		Allocatable: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(pods, resource.DecimalSI)},
	}
	for _, o := range opts {
		o(&mc)
	}
	return mc
}

func notReadyMember(mc *flotillav1.MemberCluster) {
	mc.Status.Conditions = []metav1.Condition{{Type: flotillav1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: flotillav1.ReasonHeartbeatMissed, LastTransitionTime: metav1.NewTime(t0.Add(-time.Minute))}}
}

func pendingMember(mc *flotillav1.MemberCluster) {
	mc.Spec.Acceptance = flotillav1.AcceptancePending
	mc.Status = flotillav1.MemberClusterStatus{}
}

func taintedMember(mc *flotillav1.MemberCluster) {
	mc.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}
}

// fleetFixture is a fleet where every filter has something to say.
func fleetFixture() []flotillav1.MemberCluster {
	return []flotillav1.MemberCluster{
		fixtureMember("east-1", "east", 40),
		fixtureMember("east-2", "east", 10),
		fixtureMember("west-1", "west", 30),
		fixtureMember("south-1", "south", 5),
		fixtureMember("lab", "", 50),
		fixtureMember("batch", "west", 80, taintedMember),
		fixtureMember("flaky", "east", 60, notReadyMember),
		fixtureMember("newcomer", "south", 0, pendingMember),
		fixtureMember("legacy", "west", 90),
	}
}

func ptr[T any](v T) *T { return &v }

// spreadApp is a Divided MyApp spread over exactly two regions, outside
// cluster legacy.
func spreadApp() *flotillav1.MyApp {
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 3}}
	app.Spec.Replicas = ptr(int32(6))
	app.Spec.Placement = flotillav1.Placement{
		ClusterAffinity: &flotillav1.ClusterAffinity{ExcludeClusters: []string{"legacy"}},
		ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
			ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided,
			WeightPreference:      &flotillav1.ClusterPreferences{DynamicWeight: flotillav1.DynamicWeightAvailableReplicas},
		},
		SpreadConstraints: []flotillav1.SpreadConstraint{{SpreadByField: flotillav1.SpreadByFieldRegion, MinGroups: ptr(int32(2)), MaxGroups: ptr(int32(2))}},
	}
	return app
}

// TestWhyGolden explains a Divided, spread-constrained MyApp: every member
// is named with its fate, filter, score and replicas.
func TestWhyGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		app  func() *flotillav1.MyApp
	}{
		{"why_divided_spread", spreadApp},
		{"why_kept_while_not_ready", func() *flotillav1.MyApp {
			app := spreadApp()
			app.Status.Placement = &flotillav1.PlacementDecision{
				Clusters:            []flotillav1.TargetCluster{{Name: "east-1", Replicas: 3}, {Name: "flaky", Replicas: 3}},
				ScheduledGeneration: 2,
			}
			return app
		}},
		{"why_recorded_differs", func() *flotillav1.MyApp {
			// Scaled from 6 to 9; the hub has not decided again yet.
			app := spreadApp()
			app.Spec.Replicas = ptr(int32(9))
			app.Status.Placement = &flotillav1.PlacementDecision{
				Clusters:            []flotillav1.TargetCluster{{Name: "east-1", Replicas: 3}, {Name: "east-2", Replicas: 1}, {Name: "west-1", Replicas: 2}},
				ScheduledGeneration: 2,
			}
			return app
		}},
		{"why_unschedulable", func() *flotillav1.MyApp {
			app := spreadApp()
			app.Spec.Placement.SpreadConstraints[0].MinGroups = ptr(int32(4))
			app.Spec.Placement.SpreadConstraints[0].MaxGroups = ptr(int32(4))
			return app
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := Explain(tc.app(), fleetFixture(), t0)
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Clusters) != len(fleetFixture()) {
				t.Errorf("explained %d members, want all %d", len(w.Clusters), len(fleetFixture()))
			}
			for _, c := range w.Clusters {
				if c.Fate == "" || (c.Fate != FateSelected && c.Reason == "") {
					t.Errorf("member %s: fate %q, reason %q: every member not selected needs a reason", c.Name, c.Fate, c.Reason)
				}
			}
			var b bytes.Buffer
			if err := WriteWhy(&b, w); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".golden", b.Bytes())
		})
	}
}

// TestWhyAgreesWithTheScheduler checks the explanation against
// placement.Schedule itself: the replicas it shows are the scheduler's,
// and the members it drops are the ones the scheduler filtered.
func TestWhyAgreesWithTheScheduler(t *testing.T) {
	app := spreadApp()
	res, err := placement.Schedule(placement.InputFor(app, fleetFixture(), t0))
	if err != nil {
		t.Fatal(err)
	}
	w, err := Explain(app, fleetFixture(), t0)
	if err != nil {
		t.Fatal(err)
	}
	var sum int32
	for _, c := range w.Clusters {
		sum += c.Replicas
		want := int32(0)
		for _, tc := range res.Clusters {
			if tc.Name == c.Name {
				want = tc.Replicas
			}
		}
		if c.Replicas != want {
			t.Errorf("member %s: why shows %d replicas, the scheduler gives %d", c.Name, c.Replicas, want)
		}
		filtered := false
		for _, f := range res.Filtered {
			filtered = filtered || f.Name == c.Name
		}
		if filtered != (c.Fate == FateDropped || c.Fate == FateKept) {
			t.Errorf("member %s: fate %s, but filtered by the scheduler: %t", c.Name, c.Fate, filtered)
		}
	}
	if sum != *app.Spec.Replicas {
		t.Errorf("replicas shown sum to %d, want %d", sum, *app.Spec.Replicas)
	}
	if w.Matches {
		t.Error("no recorded decision, yet why says it matches")
	}
}

func TestCompareDecision(t *testing.T) {
	now := []flotillav1.TargetCluster{{Name: "a", Replicas: 2}, {Name: "b", Replicas: 1}}
	for _, tc := range []struct {
		name      string
		rec       *flotillav1.PlacementDecision
		failed    bool
		wantMatch bool
	}{
		{"nothing recorded", nil, false, false},
		{"same", &flotillav1.PlacementDecision{Clusters: now}, false, true},
		{"other replicas", &flotillav1.PlacementDecision{Clusters: []flotillav1.TargetCluster{{Name: "a", Replicas: 3}}}, false, false},
		{"unschedulable now", &flotillav1.PlacementDecision{Clusters: now}, true, false},
	} {
		match, note := compareDecision(tc.rec, now, tc.failed)
		if match != tc.wantMatch || (match == (note != "")) {
			t.Errorf("%s: match %t, note %q; want match %t and a note only when they differ", tc.name, match, note, tc.wantMatch)
		}
	}
}
