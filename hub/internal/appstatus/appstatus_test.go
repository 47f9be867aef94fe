package appstatus

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestClusterStatus(t *testing.T) {
	evictedAt := metav1.NewTime(time.Date(2030, 1, 2, 3, 0, 9, 0, time.FixedZone("CET", 3600)))
	twoManifests := healthyWork(2)
	twoManifests.Status.Manifests = append(twoManifests.Status.Manifests,
		flotillav1.ManifestStatus{ResourceIdentifier: flotillav1.ResourceIdentifier{Kind: "ConfigMap", Name: "cfg"}}, // no workload numbers
		flotillav1.ManifestStatus{Workload: &flotillav1.WorkloadStatus{Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1}},
	)
	unreported := healthyWork(3)
	unreported.Generation = 2

	tests := []struct {
		name        string
		view        ClusterView
		wantPhase   flotillav1.ClusterAppPhase
		wantMessage string // exact; "" means no message
		// wantNumbers are Replicas, Ready, Available, Updated.
		wantNumbers [4]int32
	}{{
		name:        "evicted cluster without a Work is lost and says where the replicas went and when, in UTC",
		view:        ClusterView{Name: "a", Evicted: &flotillav1.EvictedCluster{Name: "a", Replicas: 3, Reason: "ClusterUnreachable", EvictionTime: evictedAt}},
		wantPhase:   flotillav1.ClusterAppLost,
		wantMessage: "3 replicas moved to other clusters at 02:00:09 (ClusterUnreachable); they return once the cluster stays Ready for the failback window",
	}, {
		name:        "evicted wins over everything the member reports",
		view:        ClusterView{Name: "a", Member: readyMember("a"), Work: healthyWork(3), Evicted: &flotillav1.EvictedCluster{Replicas: 3, Reason: "r", EvictionTime: evictedAt}},
		wantPhase:   flotillav1.ClusterAppLost,
		wantMessage: "3 replicas moved to other clusters at 02:00:09 (r); they return once the cluster stays Ready for the failback window",
		wantNumbers: [4]int32{3, 3, 3, 3},
	}, {
		name:        "evicting cluster keeps its Work and reports its numbers",
		view:        ClusterView{Name: "a", Assigned: 3, Member: lostMember("a", "gone"), Work: healthyWork(3), Evicting: true},
		wantPhase:   flotillav1.ClusterAppEvicting,
		wantMessage: "replicas moved to other clusters; this cluster's Work is kept until they are available",
		wantNumbers: [4]int32{3, 3, 3, 3},
	}, {
		name:        "unknown MemberCluster is lost",
		view:        ClusterView{Name: "a", Assigned: 1, Work: healthyWork(1)},
		wantPhase:   flotillav1.ClusterAppLost,
		wantMessage: "no MemberCluster of this name",
		wantNumbers: [4]int32{1, 1, 1, 1},
	}, {
		name:        "member not Ready is lost with the member's own message",
		view:        ClusterView{Name: "a", Assigned: 1, Member: lostMember("a", "no heartbeat since 03:00"), Work: healthyWork(1)},
		wantPhase:   flotillav1.ClusterAppLost,
		wantMessage: "cluster not Ready: no heartbeat since 03:00",
		wantNumbers: [4]int32{1, 1, 1, 1},
	}, {
		name:        "member not Ready without a message",
		view:        ClusterView{Name: "a", Assigned: 1, Member: lostMember("a", "")},
		wantPhase:   flotillav1.ClusterAppLost,
		wantMessage: "cluster not Ready",
	}, {
		name:        "member without any Ready condition is not Ready",
		view:        ClusterView{Name: "a", Assigned: 1, Member: &flotillav1.MemberCluster{}},
		wantPhase:   flotillav1.ClusterAppLost,
		wantMessage: "cluster not Ready",
	}, {
		name:        "no Work yet is pending",
		view:        ClusterView{Name: "a", Assigned: 1, Member: readyMember("a")},
		wantPhase:   flotillav1.ClusterAppPending,
		wantMessage: "Work not written yet",
	}, {
		name:        "Work the member has not reported on at this generation is pending, whatever its old status says",
		view:        ClusterView{Name: "a", Assigned: 3, Member: readyMember("a"), Work: unreported},
		wantPhase:   flotillav1.ClusterAppPending,
		wantMessage: "waiting for the member to apply generation 2 of its Work",
		wantNumbers: [4]int32{3, 3, 3, 3},
	}, {
		name:        "Work of generation 0 (not stored yet) is never reported",
		view:        ClusterView{Name: "a", Assigned: 0, Member: readyMember("a"), Work: &flotillav1.Work{}},
		wantPhase:   flotillav1.ClusterAppPending,
		wantMessage: "waiting for the member to apply generation 0 of its Work",
	}, {
		name: "apply failure is degraded with reason and message",
		view: ClusterView{Name: "a", Assigned: 1, Member: readyMember("a"), Work: reportedWork(flotillav1.WorkloadStatus{},
			condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonNotOwned, "Deployment shop/web exists"))},
		wantPhase:   flotillav1.ClusterAppDegraded,
		wantMessage: "NotOwned: Deployment shop/web exists",
	}, {
		name: "apply failure wins over a Degraded condition",
		view: ClusterView{Name: "a", Assigned: 1, Member: readyMember("a"), Work: reportedWork(flotillav1.WorkloadStatus{},
			condition(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonProgressDeadlineExceeded, "stuck"),
			condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonApplyFailed, "denied"))},
		wantPhase:   flotillav1.ClusterAppDegraded,
		wantMessage: "ApplyFailed: denied",
	}, {
		name: "Degraded True without a message says its reason",
		view: ClusterView{Name: "a", Assigned: 2, Member: readyMember("a"), Work: reportedWork(flotillav1.WorkloadStatus{Replicas: 2, UpdatedReplicas: 2},
			condition(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, ""),
			condition(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonProgressDeadlineExceeded, ""))},
		wantPhase:   flotillav1.ClusterAppDegraded,
		wantMessage: "ProgressDeadlineExceeded",
		wantNumbers: [4]int32{2, 0, 0, 2},
	}, {
		name:        "every assigned replica ready, available and updated is available, without a message",
		view:        ClusterView{Name: "a", Assigned: 3, Member: readyMember("a"), Work: healthyWork(3)},
		wantPhase:   flotillav1.ClusterAppAvailable,
		wantNumbers: [4]int32{3, 3, 3, 3},
	}, {
		name:        "scaled to zero with nothing running is available",
		view:        ClusterView{Name: "a", Assigned: 0, Member: readyMember("a"), Work: healthyWork(0)},
		wantPhase:   flotillav1.ClusterAppAvailable,
		wantNumbers: [4]int32{0, 0, 0, 0},
	}, {
		name:        "numbers are summed over manifests, skipping those without workload numbers",
		view:        ClusterView{Name: "a", Assigned: 3, Member: readyMember("a"), Work: twoManifests},
		wantPhase:   flotillav1.ClusterAppAvailable,
		wantNumbers: [4]int32{3, 3, 3, 3},
	}, {
		name: "too few ready replicas is progressing",
		view: ClusterView{Name: "a", Assigned: 3, Member: readyMember("a"), Work: reportedWork(
			flotillav1.WorkloadStatus{Replicas: 3, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 3})},
		wantPhase:   flotillav1.ClusterAppProgressing,
		wantMessage: "1/3 replicas ready, 3 updated",
		wantNumbers: [4]int32{3, 1, 1, 3},
	}, {
		name: "old replicas still running during a rollout (surge) is progressing",
		view: ClusterView{Name: "a", Assigned: 3, Member: readyMember("a"), Work: reportedWork(
			flotillav1.WorkloadStatus{Replicas: 4, ReadyReplicas: 4, AvailableReplicas: 4, UpdatedReplicas: 3})},
		wantPhase:   flotillav1.ClusterAppProgressing,
		wantMessage: "4/3 replicas ready, 3 updated",
		wantNumbers: [4]int32{4, 4, 4, 3},
	}, {
		name: "ready but not yet updated is progressing",
		view: ClusterView{Name: "a", Assigned: 2, Member: readyMember("a"), Work: reportedWork(
			flotillav1.WorkloadStatus{Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 1})},
		wantPhase:   flotillav1.ClusterAppProgressing,
		wantMessage: "2/2 replicas ready, 1 updated",
		wantNumbers: [4]int32{2, 2, 2, 1},
	}, {
		name: "ready but not yet available (minReadySeconds) is progressing",
		view: ClusterView{Name: "a", Assigned: 2, Member: readyMember("a"), Work: reportedWork(
			flotillav1.WorkloadStatus{Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 0, UpdatedReplicas: 2})},
		wantPhase:   flotillav1.ClusterAppProgressing,
		wantMessage: "2/2 replicas ready, 2 updated",
		wantNumbers: [4]int32{2, 2, 0, 2},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Cluster(tt.view)
			if st.Name != tt.view.Name || st.Assigned != tt.view.Assigned {
				t.Errorf("name/assigned = %s/%d, want %s/%d", st.Name, st.Assigned, tt.view.Name, tt.view.Assigned)
			}
			if st.Phase != tt.wantPhase {
				t.Errorf("phase = %s, want %s", st.Phase, tt.wantPhase)
			}
			if st.Message != tt.wantMessage {
				t.Errorf("message = %q, want %q", st.Message, tt.wantMessage)
			}
			got := [4]int32{st.Replicas, st.ReadyReplicas, st.AvailableReplicas, st.UpdatedReplicas}
			if got != tt.wantNumbers {
				t.Errorf("replicas/ready/available/updated = %v, want %v", got, tt.wantNumbers)
			}
		})
	}
}

func TestComputeStatus(t *testing.T) {
	progressing := reportedWork(flotillav1.WorkloadStatus{Replicas: 2, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 2},
		condition(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, ""))
	notOwned := reportedWork(flotillav1.WorkloadStatus{},
		condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonNotOwned, "exists"),
		condition(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonNotOwned, "exists"))
	stuck := reportedWork(flotillav1.WorkloadStatus{Replicas: 1, UpdatedReplicas: 1},
		condition(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, ""),
		condition(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonProgressDeadlineExceeded, "ImagePullBackOff"))

	tests := []struct {
		name string
		in   Input
		// wantTotals are desired, ready, available, updated and used.
		wantTotals [5]int32
		// wantOrder are the cluster entries' names in order.
		wantOrder []string
		want      map[string]wantCondition
	}{{
		name: "every cluster available: all conditions good, clusters sorted by name",
		in: Input{Generation: 7, Clusters: []ClusterView{
			{Name: "b", Assigned: 2, Member: readyMember("b"), Work: healthyWork(2)},
			{Name: "a", Assigned: 1, Member: readyMember("a"), Work: healthyWork(1)},
		}},
		wantTotals: [5]int32{3, 3, 3, 3, 2},
		wantOrder:  []string{"a", "b"},
		want: map[string]wantCondition{
			flotillav1.ConditionScheduled:   {metav1.ConditionTrue, flotillav1.ReasonScheduled, []string{"3 replicas placed on 2 clusters"}},
			flotillav1.ConditionApplied:     {metav1.ConditionTrue, flotillav1.ReasonApplied, []string{"applied in all 2 clusters"}},
			flotillav1.ConditionAvailable:   {metav1.ConditionTrue, flotillav1.ReasonAvailable, []string{"3/3 replicas available"}},
			flotillav1.ConditionProgressing: {metav1.ConditionFalse, flotillav1.ReasonComplete, nil},
			flotillav1.ConditionDegraded:    {metav1.ConditionFalse, flotillav1.ReasonAsExpected, nil},
			flotillav1.ConditionReady:       {metav1.ConditionTrue, flotillav1.ReasonReady, []string{"3/3 replicas ready in 2 clusters"}},
		},
	}, {
		name: "scheduler warnings are added to Scheduled's message",
		in: Input{Generation: 1, Warnings: []string{"cluster c is full", "cluster d is tainted"}, Clusters: []ClusterView{
			{Name: "a", Assigned: 1, Member: readyMember("a"), Work: healthyWork(1)},
		}},
		wantTotals: [5]int32{1, 1, 1, 1, 1},
		wantOrder:  []string{"a"},
		want: map[string]wantCondition{
			flotillav1.ConditionScheduled: {metav1.ConditionTrue, flotillav1.ReasonScheduled, []string{"1 replicas placed on 1 clusters; cluster c is full; cluster d is tainted"}},
			flotillav1.ConditionReady:     {metav1.ConditionTrue, flotillav1.ReasonReady, nil},
		},
	}, {
		name: "schedule error: Scheduled False, Degraded and Ready carry the scheduler's reason, running clusters still count",
		in: Input{Generation: 1, ScheduleErr: errors.New("only 1 of 2 zones eligible"), ScheduleReason: flotillav1.ReasonSpreadConstraintsNotMet, Clusters: []ClusterView{
			{Name: "a", Assigned: 1, Member: readyMember("a"), Work: healthyWork(1)},
		}},
		wantTotals: [5]int32{1, 1, 1, 1, 1},
		wantOrder:  []string{"a"},
		want: map[string]wantCondition{
			flotillav1.ConditionScheduled: {metav1.ConditionFalse, flotillav1.ReasonSpreadConstraintsNotMet, []string{"only 1 of 2 zones eligible"}},
			flotillav1.ConditionApplied:   {metav1.ConditionTrue, flotillav1.ReasonApplied, nil},
			flotillav1.ConditionAvailable: {metav1.ConditionTrue, flotillav1.ReasonAvailable, nil},
			flotillav1.ConditionDegraded:  {metav1.ConditionTrue, flotillav1.ReasonSpreadConstraintsNotMet, []string{"only 1 of 2 zones eligible"}},
			flotillav1.ConditionReady:     {metav1.ConditionFalse, flotillav1.ReasonSpreadConstraintsNotMet, []string{"1/1 replicas ready"}},
		},
	}, {
		name:       "scaled to zero on no cluster: nothing to apply, and that is Ready (see zero_test.go)",
		in:         Input{Generation: 1},
		wantTotals: [5]int32{0, 0, 0, 0, 0},
		want: map[string]wantCondition{
			flotillav1.ConditionScheduled:   {metav1.ConditionTrue, flotillav1.ReasonScheduled, []string{"scaled to zero: 0 replicas, on no cluster"}},
			flotillav1.ConditionApplied:     {metav1.ConditionTrue, flotillav1.ReasonApplied, []string{"nothing to apply"}},
			flotillav1.ConditionAvailable:   {metav1.ConditionTrue, flotillav1.ReasonAvailable, []string{"0/0 replicas available"}},
			flotillav1.ConditionProgressing: {metav1.ConditionFalse, flotillav1.ReasonComplete, nil},
			flotillav1.ConditionDegraded:    {metav1.ConditionFalse, flotillav1.ReasonAsExpected, nil},
			flotillav1.ConditionReady:       {metav1.ConditionTrue, flotillav1.ReasonScaledToZero, []string{"0/0 replicas"}},
		},
	}, {
		name: "a pending cluster: waiting for the member, rolling out",
		in: Input{Generation: 1, Clusters: []ClusterView{
			{Name: "a", Assigned: 1, Member: readyMember("a"), Work: healthyWork(1)},
			{Name: "b", Assigned: 2, Member: readyMember("b")},
		}},
		wantTotals: [5]int32{3, 1, 1, 1, 2},
		wantOrder:  []string{"a", "b"},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:     {metav1.ConditionUnknown, flotillav1.ReasonWaitingForMember, []string{"b: Work not written yet"}},
			flotillav1.ConditionAvailable:   {metav1.ConditionFalse, flotillav1.ReasonUnavailable, []string{"1/3 replicas available", "b: Work not written yet"}},
			flotillav1.ConditionProgressing: {metav1.ConditionTrue, flotillav1.ReasonRollingOut, []string{"b: Work not written yet"}},
			flotillav1.ConditionDegraded:    {metav1.ConditionFalse, flotillav1.ReasonAsExpected, nil},
			flotillav1.ConditionReady:       {metav1.ConditionFalse, flotillav1.ReasonWaitingForMember, []string{"1/3 replicas ready"}},
		},
	}, {
		name: "a lost cluster: Applied unknown, Degraded and Ready say ClusterLost",
		in: Input{Generation: 1, Clusters: []ClusterView{
			{Name: "a", Assigned: 1, Member: readyMember("a"), Work: healthyWork(1)},
			{Name: "b", Assigned: 1, Member: lostMember("b", "no heartbeat"), Work: healthyWork(1)},
		}},
		wantTotals: [5]int32{2, 2, 2, 2, 2},
		wantOrder:  []string{"a", "b"},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:     {metav1.ConditionUnknown, flotillav1.ReasonWaitingForMember, []string{"b: cluster not Ready: no heartbeat"}},
			flotillav1.ConditionAvailable:   {metav1.ConditionFalse, flotillav1.ReasonUnavailable, []string{"2/2 replicas available", "b: cluster not Ready"}},
			flotillav1.ConditionProgressing: {metav1.ConditionFalse, flotillav1.ReasonComplete, nil},
			flotillav1.ConditionDegraded:    {metav1.ConditionTrue, flotillav1.ReasonClusterLost, []string{"b: cluster not Ready: no heartbeat"}},
			flotillav1.ConditionReady:       {metav1.ConditionFalse, flotillav1.ReasonClusterLost, nil},
		},
	}, {
		name: "an apply failure: Applied False, Degraded and Ready carry the member's reason",
		in: Input{Generation: 1, Clusters: []ClusterView{
			{Name: "a", Assigned: 1, Member: readyMember("a"), Work: notOwned},
			{Name: "b", Assigned: 1, Member: readyMember("b")},
			{Name: "c", Assigned: 1, Member: lostMember("c", "")},
		}},
		wantTotals: [5]int32{3, 0, 0, 0, 3},
		wantOrder:  []string{"a", "b", "c"},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:  {metav1.ConditionFalse, flotillav1.ReasonApplyFailed, []string{"a: NotOwned: exists"}},
			flotillav1.ConditionDegraded: {metav1.ConditionTrue, flotillav1.ReasonNotOwned, []string{"a: NotOwned: exists"}},
			flotillav1.ConditionReady:    {metav1.ConditionFalse, flotillav1.ReasonNotOwned, nil},
		},
	}, {
		name: "a stuck rollout: applied, but Degraded and Ready say why",
		in: Input{Generation: 1, Clusters: []ClusterView{
			{Name: "a", Assigned: 1, Member: readyMember("a"), Work: stuck},
		}},
		wantTotals: [5]int32{1, 0, 0, 1, 1},
		wantOrder:  []string{"a"},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:     {metav1.ConditionTrue, flotillav1.ReasonApplied, nil},
			flotillav1.ConditionAvailable:   {metav1.ConditionFalse, flotillav1.ReasonUnavailable, []string{"a: ProgressDeadlineExceeded: ImagePullBackOff"}},
			flotillav1.ConditionProgressing: {metav1.ConditionFalse, flotillav1.ReasonComplete, nil},
			flotillav1.ConditionDegraded:    {metav1.ConditionTrue, flotillav1.ReasonProgressDeadlineExceeded, []string{"a: ProgressDeadlineExceeded: ImagePullBackOff"}},
			flotillav1.ConditionReady:       {metav1.ConditionFalse, flotillav1.ReasonProgressDeadlineExceeded, nil},
		},
	}, {
		name: "a rollout in progress: Progressing True, Ready RollingOut, nothing degraded",
		in: Input{Generation: 1, Clusters: []ClusterView{
			{Name: "a", Assigned: 2, Member: readyMember("a"), Work: progressing},
		}},
		wantTotals: [5]int32{2, 1, 1, 2, 1},
		wantOrder:  []string{"a"},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:     {metav1.ConditionTrue, flotillav1.ReasonApplied, nil},
			flotillav1.ConditionProgressing: {metav1.ConditionTrue, flotillav1.ReasonRollingOut, []string{"a: 1/2 replicas ready, 2 updated"}},
			flotillav1.ConditionDegraded:    {metav1.ConditionFalse, flotillav1.ReasonAsExpected, nil},
			flotillav1.ConditionReady:       {metav1.ConditionFalse, flotillav1.ReasonRollingOut, []string{"1/2 replicas ready"}},
		},
	}, {
		name: "evicting and evicted clusters are listed but count in no total or condition",
		in: Input{Generation: 1, Clusters: []ClusterView{
			{Name: "c", Assigned: 3, Member: readyMember("c"), Work: healthyWork(3)},
			{Name: "a", Assigned: 3, Member: lostMember("a", ""), Work: notOwned, Evicting: true},
			{Name: "b", Member: lostMember("b", ""), Evicted: &flotillav1.EvictedCluster{Name: "b", Replicas: 3, Reason: "ClusterUnreachable"}},
		}},
		wantTotals: [5]int32{3, 3, 3, 3, 1},
		wantOrder:  []string{"a", "b", "c"},
		want: map[string]wantCondition{
			flotillav1.ConditionScheduled: {metav1.ConditionTrue, flotillav1.ReasonScheduled, []string{"3 replicas placed on 1 clusters"}},
			flotillav1.ConditionApplied:   {metav1.ConditionTrue, flotillav1.ReasonApplied, []string{"applied in all 1 clusters"}},
			flotillav1.ConditionAvailable: {metav1.ConditionTrue, flotillav1.ReasonAvailable, []string{"3/3 replicas available"}},
			flotillav1.ConditionDegraded:  {metav1.ConditionFalse, flotillav1.ReasonAsExpected, nil},
			flotillav1.ConditionReady:     {metav1.ConditionTrue, flotillav1.ReasonReady, nil},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Compute(tt.in)
			got := [5]int32{out.Desired, out.Ready, out.Available, out.Updated, out.Used}
			if got != tt.wantTotals {
				t.Errorf("desired/ready/available/updated/used = %v, want %v", got, tt.wantTotals)
			}
			var order []string
			for _, c := range out.Clusters {
				order = append(order, c.Name)
			}
			if strings.Join(order, ",") != strings.Join(tt.wantOrder, ",") {
				t.Errorf("clusters = %v, want %v", order, tt.wantOrder)
			}
			if len(out.Conditions) != 6 {
				t.Errorf("got %d conditions, want Scheduled, Applied, Available, Progressing, Degraded and Ready", len(out.Conditions))
			}
			for _, c := range out.Conditions {
				if c.ObservedGeneration != tt.in.Generation {
					t.Errorf("%s observedGeneration = %d, want %d", c.Type, c.ObservedGeneration, tt.in.Generation)
				}
				if c.Reason == "" {
					t.Errorf("%s has no reason", c.Type)
				}
			}
			for typ, w := range tt.want {
				checkCondition(t, out.Conditions, typ, w)
			}
		})
	}
}

// TestComputeStatusDegradedReason: the Degraded (and so Ready) reason comes
// from a cluster the Degraded message lists, whatever sorts before it: a
// cluster without a Work, or one whose Work's Degraded condition is stale
// (evicting, lost, or not reported on at its current generation).
func TestComputeStatusDegradedReason(t *testing.T) {
	staleDegraded := func() *flotillav1.Work {
		return reportedWork(flotillav1.WorkloadStatus{},
			condition(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, ""),
			condition(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonProgressDeadlineExceeded, "old"))
	}
	unreported := staleDegraded()
	unreported.Generation = 2
	failing := reportedWork(flotillav1.WorkloadStatus{},
		condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonNotOwned, "exists"),
		condition(flotillav1.ConditionDegraded, metav1.ConditionTrue, flotillav1.ReasonNotOwned, "exists"))

	tests := []struct {
		name  string
		first ClusterView // sorts before the degraded cluster "b"
	}{
		{"a cluster whose Work is not written yet", ClusterView{Name: "a", Assigned: 1, Member: readyMember("a")}},
		{"an evicted cluster without a Work", ClusterView{Name: "a", Member: lostMember("a", ""), Evicted: &flotillav1.EvictedCluster{Name: "a", Replicas: 1}}},
		{"an evicting cluster with a stale Degraded Work", ClusterView{Name: "a", Assigned: 1, Member: lostMember("a", ""), Work: staleDegraded(), Evicting: true}},
		{"a lost cluster with a stale Degraded Work", ClusterView{Name: "a", Assigned: 1, Member: lostMember("a", ""), Work: staleDegraded()}},
		{"a cluster not reported on at its Work's generation", ClusterView{Name: "a", Assigned: 1, Member: readyMember("a"), Work: unreported}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Compute(Input{Generation: 1, Clusters: []ClusterView{
				tt.first,
				{Name: "b", Assigned: 1, Member: readyMember("b"), Work: failing},
			}})
			checkCondition(t, out.Conditions, flotillav1.ConditionDegraded,
				wantCondition{metav1.ConditionTrue, flotillav1.ReasonNotOwned, []string{"b: NotOwned: exists"}})
			checkCondition(t, out.Conditions, flotillav1.ConditionReady,
				wantCondition{metav1.ConditionFalse, flotillav1.ReasonNotOwned, nil})
		})
	}
}

func TestComputeStatusBoundsMessages(t *testing.T) {
	long := strings.Repeat("x", 40000)
	out := Compute(Input{Generation: 1, ScheduleErr: errors.New(long), ScheduleReason: flotillav1.ReasonUnschedulable})
	for _, c := range out.Conditions {
		if len(c.Message) > 32768 {
			t.Errorf("%s message is %d bytes, over the API's 32768", c.Type, len(c.Message))
		}
	}
	checkCondition(t, out.Conditions, flotillav1.ConditionScheduled,
		wantCondition{metav1.ConditionFalse, flotillav1.ReasonUnschedulable, []string{" ..."}})
}

func TestComputeStatusDoesNotReorderItsInput(t *testing.T) {
	in := []ClusterView{{Name: "b"}, {Name: "a"}}
	Compute(Input{Clusters: in})
	if in[0].Name != "b" || in[1].Name != "a" {
		t.Errorf("input reordered to %s, %s", in[0].Name, in[1].Name)
	}
}
