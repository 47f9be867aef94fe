package setup

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestReportVersion checks the hub's version report against a real
// apiserver: it creates the status ConfigMap when missing, updates only
// its own key when the partition brake's keys are there, and writes
// nothing when the version is already reported.
func TestReportVersion(t *testing.T) {
	c, err := client.New(sharedEnv.Config(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "version-test"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: flotillav1.HubStatusConfigMapName}
	if err := ReportVersion(ctx, c, c, ns, "v1"); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, cm); err != nil {
		t.Fatalf("the version report created no ConfigMap: %v", err)
	}
	if cm.Data[HubStatusVersionKey] != "v1" {
		t.Fatalf("data %v, want version v1", cm.Data)
	}

	// The partition brake writes its keys beside it.
	cm.Data["partitionBrake"] = "false"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := ReportVersion(ctx, c, c, ns, "v2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[HubStatusVersionKey] != "v2" || cm.Data["partitionBrake"] != "false" {
		t.Fatalf("data %v, want version v2 and partitionBrake kept", cm.Data)
	}
	rv := cm.ResourceVersion
	if err := ReportVersion(ctx, c, c, ns, "v2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, cm); err != nil {
		t.Fatal(err)
	}
	if cm.ResourceVersion != rv {
		t.Errorf("reporting the same version again wrote the ConfigMap (resourceVersion %s -> %s)", rv, cm.ResourceVersion)
	}
}
