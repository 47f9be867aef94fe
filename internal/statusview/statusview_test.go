package statusview

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the testdata/*.golden files with what the tests produce")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from what the test produced (run with -update if the change is meant):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func cond(t string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}
}

func fixture() ([]flotillav1.MemberCluster, []flotillav1.MyApp) {
	hb := func(ago time.Duration) *metav1.Time { t := metav1.NewTime(t0.Add(-ago)); return &t }
	members := []flotillav1.MemberCluster{
		{ObjectMeta: metav1.ObjectMeta{Name: "member-2"},
			Spec: flotillav1.MemberClusterSpec{Region: "west", Zone: "west-a", Provider: "kwok",
				Taints: []corev1.Taint{{Key: flotillav1.TaintClusterUnreachable, Effect: corev1.TaintEffectNoExecute}}},
			Status: flotillav1.MemberClusterStatus{Conditions: []metav1.Condition{
				cond(flotillav1.ConditionReady, metav1.ConditionFalse, "HeartbeatMissed", ""), cond(flotillav1.ConditionConnected, metav1.ConditionFalse, "Disconnected", "")},
				LastHeartbeatTime: hb(47 * time.Second), Agent: &flotillav1.AgentInfo{Version: "v0.2.0"}, KubernetesVersion: "v1.37.2"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "member-1"},
			Spec: flotillav1.MemberClusterSpec{Region: "east", Zone: "east-a", Provider: "kwok"},
			Status: flotillav1.MemberClusterStatus{Conditions: []metav1.Condition{
				cond(flotillav1.ConditionReady, metav1.ConditionTrue, "Heartbeating", ""), cond(flotillav1.ConditionConnected, metav1.ConditionTrue, "Connected", "")},
				LastHeartbeatTime: hb(2 * time.Second), Agent: &flotillav1.AgentInfo{Version: "v0.2.0"}, KubernetesVersion: "v1.37.2"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "member-4"}, Spec: flotillav1.MemberClusterSpec{Acceptance: flotillav1.AcceptancePending}},
		// A push member: no agent, the hub applies its Works (MODE Push).
		{ObjectMeta: metav1.ObjectMeta{Name: "member-3"},
			Spec: flotillav1.MemberClusterSpec{Region: "north", Zone: "north-a", Provider: "onprem", SyncMode: flotillav1.SyncModePush,
				Push: &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{Name: "flotilla-push-member-3", Key: flotillav1.DefaultKubeconfigKey}}},
			Status: flotillav1.MemberClusterStatus{Conditions: []metav1.Condition{
				cond(flotillav1.ConditionReady, metav1.ConditionTrue, "Reachable", "")},
				LastHeartbeatTime: hb(3 * time.Second), KubernetesVersion: "v1.37.2"}},
	}
	apps := []flotillav1.MyApp{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
			Status: flotillav1.MyAppStatus{DesiredReplicas: 6, ReadyReplicas: 4,
				Conditions: []metav1.Condition{cond(flotillav1.ConditionReady, metav1.ConditionFalse, "NotReady", ""), cond(flotillav1.ConditionAvailable, metav1.ConditionTrue, "Available", "")},
				Clusters: []flotillav1.ClusterAppStatus{
					{Name: "member-1", Assigned: 4, ReadyReplicas: 4, AvailableReplicas: 4, UpdatedReplicas: 4, Phase: "Ready"},
					{Name: "member-2", Assigned: 2, Phase: "Unknown", Message: "the member has not reported for 47s: its last report said 2 of 2 replicas ready, which may no longer be true"},
				}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nowhere"},
			Status: flotillav1.MyAppStatus{Conditions: []metav1.Condition{
				cond(flotillav1.ConditionScheduled, metav1.ConditionFalse, flotillav1.ReasonUnschedulable, "no cluster can run the app")}}},
	}
	return members, apps
}

// TestStatusGolden renders the tables `make run` and `kubectl flotilla
// status` show, plain, wide and as JSON, from a fleet with a lost member,
// a pending one, a push one and an unschedulable MyApp.
func TestStatusGolden(t *testing.T) {
	members, apps := fixture()
	v := Build(members, apps, t0)
	for _, tc := range []struct {
		name string
		wide bool
	}{{"status.golden", false}, {"status_wide.golden", true}} {
		var b bytes.Buffer
		if err := Write(&b, v, tc.wide); err != nil {
			t.Fatal(err)
		}
		golden(t, tc.name, b.Bytes())
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "status.json.golden", append(raw, '\n'))
}

// TestBuildWithoutClock checks that a view built without a clock leaves
// out the heartbeat ages, so `make run` redraws only on real changes.
func TestBuildWithoutClock(t *testing.T) {
	members, apps := fixture()
	a, b := Build(members, apps, time.Time{}), Build(members, apps, time.Time{})
	for i, m := range a.Members {
		if m.Heartbeat != "-" {
			t.Errorf("member %s: heartbeat %q without a clock, want -", m.Name, m.Heartbeat)
		}
		if m.Name != b.Members[i].Name {
			t.Errorf("row %d: %s then %s: the order is not stable", i, m.Name, b.Members[i].Name)
		}
	}
	if a.Members[0].Name != "member-1" || a.MyApps[0].Name != "nowhere" {
		t.Errorf("rows not sorted by name: %s first, %s first", a.Members[0].Name, a.MyApps[0].Name)
	}
}
