package myapp

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// t0 is the "now" of the tests.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// readyMember is a MemberCluster the hub considers healthy.
func readyMember(name string) *flotillav1.MemberCluster {
	return &flotillav1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: flotillav1.MemberClusterStatus{Conditions: []metav1.Condition{{
			Type: flotillav1.ConditionReady, Status: metav1.ConditionTrue, Reason: flotillav1.ReasonHeartbeating,
			LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour)),
		}}},
	}
}

// lostMember is a MemberCluster whose heartbeats stopped; message is the
// Ready condition's message.
func lostMember(name, message string) *flotillav1.MemberCluster {
	mc := readyMember(name)
	mc.Status.Conditions[0].Status = metav1.ConditionUnknown
	mc.Status.Conditions[0].Reason = flotillav1.ReasonHeartbeatMissed
	mc.Status.Conditions[0].Message = message
	return mc
}

// condition is a condition of type t with status s.
func condition(t string, s metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: message}
}

// reportedWork is a Work at generation 1 on which the member reported the
// given Deployment numbers and conditions.
func reportedWork(wl flotillav1.WorkloadStatus, conds ...metav1.Condition) *flotillav1.Work {
	return &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Status: flotillav1.WorkStatus{
			ObservedGeneration: 1,
			Conditions:         conds,
			Manifests: []flotillav1.ManifestStatus{{
				ResourceIdentifier: flotillav1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Name: "web"},
				Workload:           &wl,
			}},
		},
	}
}

// healthyWork is a Work whose Deployment runs n replicas, all available.
func healthyWork(n int32) *flotillav1.Work {
	return reportedWork(flotillav1.WorkloadStatus{Replicas: n, ReadyReplicas: n, AvailableReplicas: n, UpdatedReplicas: n},
		condition(flotillav1.ConditionApplied, metav1.ConditionTrue, flotillav1.ReasonApplied, ""),
		condition(flotillav1.ConditionDegraded, metav1.ConditionFalse, flotillav1.ReasonAsExpected, ""))
}

// wantCondition is what a test expects of one condition: its status and
// reason, and words its message must contain.
type wantCondition struct {
	status   metav1.ConditionStatus
	reason   string
	contains []string
}

func checkCondition(t *testing.T, conds []metav1.Condition, typ string, w wantCondition) {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Errorf("no %s condition in %+v", typ, conds)
		return
	}
	if c.Status != w.status || c.Reason != w.reason {
		t.Errorf("%s = %s/%s (%q), want %s/%s", typ, c.Status, c.Reason, c.Message, w.status, w.reason)
	}
	for _, s := range w.contains {
		if !strings.Contains(c.Message, s) {
			t.Errorf("%s message %q does not contain %q", typ, c.Message, s)
		}
	}
}
