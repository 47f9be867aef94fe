package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// workInto is a Work written straight into the hub (past any webhook or
// MyApp) in cluster namespace ns, holding Deployment deployment in member
// namespace target.
func workInto(ns, name, target, deployment string) *flotillav1.Work {
	raw := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":%q},`+
		`"spec":{"replicas":1,"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q}},`+
		`"spec":{"containers":[{"name":"app","image":"nginx:1.27"}]}}}}`, deployment, target, deployment, deployment)
	return &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{flotillav1.LabelCluster: "member-1"}},
		Spec:       flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{Raw: []byte(raw)}}}},
	}
}

// TestAgentRefusesWorkIntoKubeSystem runs a real hub and agent: a Work
// written straight into the hub that puts a Deployment into the member's
// kube-system is not applied, and the hub's Work status says
// NamespaceDenied, naming the namespace and the agent's flag; a Work
// beside it, for the same member, is applied as usual.
func TestAgentRefusesWorkIntoKubeSystem(t *testing.T) {
	f := startFleet(t, 1)
	ctx := context.Background()
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	startAgent(t, f.agentOptions(t, "member-1", syncAddr))
	waitReady(t, f.hub, "member-1")
	ns := flotillav1.ClusterNamespace("member-1")

	denied := workInto(ns, flotillav1.WorkName("default", "sneaky"), "kube-system", "sneaky")
	allowed := workInto(ns, flotillav1.WorkName("default", "plain"), "default", "plain")
	for _, w := range []*flotillav1.Work{denied, allowed} {
		if err := f.hub.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	eventually(t, "Work "+denied.Name+" reported NamespaceDenied on the hub", 60*time.Second, func() error {
		w := &flotillav1.Work{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(denied), w); err != nil {
			return err
		}
		applied := meta.FindStatusCondition(w.Status.Conditions, flotillav1.ConditionApplied)
		degraded := meta.FindStatusCondition(w.Status.Conditions, flotillav1.ConditionDegraded)
		if applied == nil || degraded == nil {
			return fmt.Errorf("conditions %+v", w.Status.Conditions)
		}
		if applied.Status != metav1.ConditionFalse || applied.Reason != flotillav1.ReasonNamespaceDenied ||
			degraded.Status != metav1.ConditionTrue || degraded.Reason != flotillav1.ReasonNamespaceDenied {
			return fmt.Errorf("Applied %s/%s, Degraded %s/%s", applied.Status, applied.Reason, degraded.Status, degraded.Reason)
		}
		if !strings.Contains(applied.Message, "namespace kube-system") || !strings.Contains(applied.Message, "--denied-namespaces") {
			return fmt.Errorf("message %q names neither kube-system nor --denied-namespaces", applied.Message)
		}
		return nil
	})
	eventually(t, "Work "+allowed.Name+" applied in member-1", 60*time.Second, func() error {
		w := &flotillav1.Work{}
		if err := f.hub.Get(ctx, client.ObjectKeyFromObject(allowed), w); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(w.Status.Conditions, flotillav1.ConditionApplied) {
			return fmt.Errorf("conditions %+v", w.Status.Conditions)
		}
		_, err := f.deployment(ctx, "member-1", "default", "plain")
		return err
	})
	if _, err := f.deployment(ctx, "member-1", "kube-system", "sneaky"); !apierrors.IsNotFound(err) {
		t.Errorf("Deployment kube-system/sneaky in member-1: get error %v, want NotFound", err)
	}
	var list appsv1.DeploymentList
	if err := f.members["member-1"].List(ctx, &list, client.InNamespace("kube-system"), client.HasLabels{flotillav1.LabelWork}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d Deployments of Flotilla's in the member's kube-system", len(list.Items))
	}
}
