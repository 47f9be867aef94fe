package appstatus

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestComputeScaledToZero: an app at 0 replicas whose kept clusters
// confirmed they run none is Ready (ScaledToZero, "0/0 replicas"), Applied
// and Available; losing a cluster that runs none raises no alarm; until
// the members confirm, the status says what it waits for.
func TestComputeScaledToZero(t *testing.T) {
	unconfirmed := healthyWork(2)
	unconfirmed.Generation = 2 // the hub just wrote replicas 0
	kept := func(names ...string) []ClusterView {
		var out []ClusterView
		for _, n := range names {
			out = append(out, ClusterView{Name: n, Assigned: 0, Member: readyMember(n), Work: healthyWork(0)})
		}
		return out
	}
	green := map[string]wantCondition{
		flotillav1.ConditionScheduled:   {metav1.ConditionTrue, flotillav1.ReasonScheduled, []string{"scaled to zero: the app's Works are kept at 0 replicas in 3 clusters"}},
		flotillav1.ConditionApplied:     {metav1.ConditionTrue, flotillav1.ReasonApplied, []string{"applied in all 3 clusters"}},
		flotillav1.ConditionAvailable:   {metav1.ConditionTrue, flotillav1.ReasonAvailable, []string{"0/0 replicas available"}},
		flotillav1.ConditionProgressing: {metav1.ConditionFalse, flotillav1.ReasonComplete, nil},
		flotillav1.ConditionDegraded:    {metav1.ConditionFalse, flotillav1.ReasonAsExpected, nil},
		flotillav1.ConditionReady:       {metav1.ConditionTrue, flotillav1.ReasonScaledToZero, []string{"0/0 replicas"}},
	}
	tests := []struct {
		name       string
		in         Input
		wantTotals [5]int32 // desired, ready, available, updated, used
		wantPhases map[string]flotillav1.ClusterAppPhase
		want       map[string]wantCondition
		// wantMessage is the exact Ready message, "" to skip.
		wantMessage string
	}{{
		name:        "kept at 0 in 3 clusters, every member confirmed: Ready ScaledToZero, Applied, Available",
		in:          Input{Generation: 2, Clusters: kept("a", "b", "c")},
		wantTotals:  [5]int32{0, 0, 0, 0, 3},
		wantPhases:  map[string]flotillav1.ClusterAppPhase{"a": flotillav1.ClusterAppAvailable, "b": flotillav1.ClusterAppAvailable, "c": flotillav1.ClusterAppAvailable},
		want:        green,
		wantMessage: "0/0 replicas",
	}, {
		name: "a member has not confirmed the Work at 0 yet: waiting for it, not Ready",
		in: Input{Generation: 2, Clusters: append(kept("a", "b"),
			ClusterView{Name: "c", Assigned: 0, Member: readyMember("c"), Work: unconfirmed})},
		wantTotals: [5]int32{0, 2, 2, 2, 3},
		wantPhases: map[string]flotillav1.ClusterAppPhase{"c": flotillav1.ClusterAppPending},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:     {metav1.ConditionUnknown, flotillav1.ReasonWaitingForMember, []string{"c: waiting for the member to apply generation 2"}},
			flotillav1.ConditionProgressing: {metav1.ConditionTrue, flotillav1.ReasonRollingOut, []string{"c:"}},
			flotillav1.ConditionReady:       {metav1.ConditionFalse, flotillav1.ReasonWaitingForMember, nil},
		},
	}, {
		name: "a member still scaling down: progressing, not Ready",
		in: Input{Generation: 2, Clusters: append(kept("a", "b"),
			ClusterView{Name: "c", Assigned: 0, Member: readyMember("c"), Work: healthyWork(2)})},
		wantTotals: [5]int32{0, 2, 2, 2, 3},
		wantPhases: map[string]flotillav1.ClusterAppPhase{"c": flotillav1.ClusterAppProgressing},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:   {metav1.ConditionTrue, flotillav1.ReasonApplied, nil},
			flotillav1.ConditionAvailable: {metav1.ConditionFalse, flotillav1.ReasonUnavailable, []string{"c: 2/0 replicas ready"}},
			flotillav1.ConditionReady:     {metav1.ConditionFalse, flotillav1.ReasonRollingOut, nil},
		},
	}, {
		name: "a kept cluster lost after it confirmed 0: nothing moves, no alarm",
		in: Input{Generation: 2, Clusters: append(kept("a", "c"),
			ClusterView{Name: "b", Assigned: 0, Member: lostMember("b", "no heartbeat"), Work: healthyWork(0)})},
		wantTotals:  [5]int32{0, 0, 0, 0, 3},
		wantPhases:  map[string]flotillav1.ClusterAppPhase{"b": flotillav1.ClusterAppLost},
		want:        green,
		wantMessage: "0/0 replicas",
	}, {
		name: "a cluster lost before it scaled down still runs replicas: that is an alarm",
		in: Input{Generation: 2, Clusters: append(kept("a", "c"),
			ClusterView{Name: "b", Assigned: 0, Member: lostMember("b", "no heartbeat"), Work: unconfirmed})},
		wantTotals: [5]int32{0, 2, 2, 2, 3},
		wantPhases: map[string]flotillav1.ClusterAppPhase{"b": flotillav1.ClusterAppLost},
		want: map[string]wantCondition{
			flotillav1.ConditionDegraded: {metav1.ConditionTrue, flotillav1.ReasonClusterLost, []string{"b: cluster not Ready: no heartbeat"}},
			flotillav1.ConditionReady:    {metav1.ConditionFalse, flotillav1.ReasonClusterLost, nil},
		},
	}, {
		name: "an apply failure at 0 is still degraded",
		in: Input{Generation: 2, Clusters: append(kept("a", "b"),
			ClusterView{Name: "c", Assigned: 0, Member: readyMember("c"), Work: reportedWork(flotillav1.WorkloadStatus{},
				condition(flotillav1.ConditionApplied, metav1.ConditionFalse, flotillav1.ReasonNotOwned, "Deployment shop/web exists"))})},
		wantTotals: [5]int32{0, 0, 0, 0, 3},
		want: map[string]wantCondition{
			flotillav1.ConditionApplied:  {metav1.ConditionFalse, flotillav1.ReasonApplyFailed, []string{"c: NotOwned"}},
			flotillav1.ConditionDegraded: {metav1.ConditionTrue, flotillav1.ReasonApplyFailed, []string{"c: NotOwned"}},
			flotillav1.ConditionReady:    {metav1.ConditionFalse, flotillav1.ReasonApplyFailed, nil},
		},
	}, {
		name:       "a replica override keeps a cluster running: not scaled to zero",
		in:         Input{Generation: 2, Clusters: append(kept("a"), ClusterView{Name: "b", Assigned: 2, Member: readyMember("b"), Work: healthyWork(2)})},
		wantTotals: [5]int32{2, 2, 2, 2, 2},
		want: map[string]wantCondition{
			flotillav1.ConditionReady: {metav1.ConditionTrue, flotillav1.ReasonReady, []string{"2/2 replicas ready in 2 clusters"}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Compute(tt.in)
			if got := [5]int32{out.Desired, out.Ready, out.Available, out.Updated, out.Used}; got != tt.wantTotals {
				t.Errorf("desired/ready/available/updated/used = %v, want %v", got, tt.wantTotals)
			}
			for _, c := range out.Clusters {
				if want, ok := tt.wantPhases[c.Name]; ok && c.Phase != want {
					t.Errorf("cluster %s phase %s (%q), want %s", c.Name, c.Phase, c.Message, want)
				}
			}
			for typ, w := range tt.want {
				checkCondition(t, out.Conditions, typ, w)
			}
			if tt.wantMessage != "" {
				for _, c := range out.Conditions {
					if c.Type == flotillav1.ConditionReady && c.Message != tt.wantMessage {
						t.Errorf("Ready message %q, want %q", c.Message, tt.wantMessage)
					}
				}
			}
		})
	}
}

// TestClusterLostAtZeroSaysNothingMoves: the entry of a lost cluster that
// runs none of the app's replicas says so.
func TestClusterLostAtZeroSaysNothingMoves(t *testing.T) {
	st := Cluster(ClusterView{Name: "b", Assigned: 0, Member: lostMember("b", "no heartbeat"), Work: healthyWork(0)})
	if want := "cluster not Ready: no heartbeat; it runs none of the app's replicas, so nothing moves"; st.Phase != flotillav1.ClusterAppLost || st.Message != want {
		t.Errorf("got %s %q, want Lost %q", st.Phase, st.Message, want)
	}
}
