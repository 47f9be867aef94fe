package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/statusview"
)

// TestReadCommandsLive runs status, why and version against a real hub
// apiserver, as a user does, and checks they read the objects there.
func TestReadCommandsLive(t *testing.T) {
	c := hubEnv.client(t)
	ctx := context.Background()
	const ns = "live-test"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, mc := range []flotillav1.MemberCluster{fixtureMember("live-east", "east", 10), fixtureMember("live-west", "west", 10)} {
		st := mc.Status
		mc.Spec.Acceptance = flotillav1.AcceptanceAccepted
		if err := c.Create(ctx, &mc); err != nil {
			t.Fatal(err)
		}
		mc.Status = st
		if err := c.Status().Update(ctx, &mc); err != nil {
			t.Fatal(err)
		}
	}
	app := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}
	app.Spec.Image = "nginx:1.27"
	app.Spec.Replicas = ptr(int32(4))
	app.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: []string{"live-east", "live-west"}}
	app.Spec.Placement.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{ReplicaSchedulingType: flotillav1.ReplicaSchedulingDivided}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	kc := hubEnv.kubeconfig(t)

	out, err := run(t, "--kubeconfig", kc, "why", "web", "-n", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var w Why
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatalf("why -o json: %v\n%s", err, out)
	}
	fates := map[string]WhyCluster{}
	for _, c := range w.Clusters {
		fates[c.Name] = c
	}
	if fates["live-east"].Replicas != 2 || fates["live-west"].Replicas != 2 {
		t.Errorf("why: %+v, want 2 replicas on each live member", w.Clusters)
	}
	for name, f := range fates {
		if !strings.HasPrefix(name, "live-") && f.Fate != FateDropped {
			t.Errorf("why: member %s outside the affinity is %s, want dropped", name, f.Fate)
		}
	}
	if _, err := run(t, "--kubeconfig", kc, "why", "nope", "-n", ns); err == nil || !strings.Contains(err.Error(), "MyApp live-test/nope") {
		t.Errorf("why of a missing MyApp: %v, want an error naming it", err)
	}

	out, err = run(t, "--kubeconfig", kc, "status", "web", "-n", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v statusview.View
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if len(v.MyApps) != 1 || v.MyApps[0].Name != "web" {
		t.Errorf("status web: MyApps %+v, want web only", v.MyApps)
	}
	seen := map[string]bool{}
	for _, m := range v.Members {
		seen[m.Name] = m.Ready == "True"
	}
	if !seen["live-east"] || !seen["live-west"] {
		t.Errorf("status: members %+v, want live-east and live-west Ready", v.Members)
	}
	if out, err := run(t, "--kubeconfig", kc, "status", "-A"); err != nil || !strings.Contains(out, "live-test/web") {
		t.Errorf("status -A: %v\n%s", err, out)
	}

	// version: the hub's from its status ConfigMap, the agents' from
	// their MemberClusters.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: flotillav1.SystemNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: flotillav1.HubStatusConfigMapName},
		Data: map[string]string{HubStatusVersionKey: "v9.9.9"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "--kubeconfig", kc, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var vs Versions
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		t.Fatal(err)
	}
	agents := map[string]string{}
	for _, a := range vs.Agents {
		agents[a.Cluster] = a.Version
	}
	if vs.CLI == "" || vs.Hub != "v9.9.9" || agents["live-east"] != "v0.2.0" {
		t.Errorf("version: %+v, want the CLI's, hub v9.9.9 and agent v0.2.0 on live-east", vs)
	}
}
