package setup

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestEnsureFleetID checks the hub's identity against a real apiserver: it
// is created once (with its namespace), read back the same by every later
// call, and new once the object is gone, as after a restore or reinstall.
func TestEnsureFleetID(t *testing.T) {
	c, err := client.New(sharedEnv.Config(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "fleet-test"
	first, err := EnsureFleetID(ctx, c, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if first == "" {
		t.Fatal("empty fleet id")
	}
	again, err := EnsureFleetID(ctx, c, c, ns)
	if err != nil || again != first {
		t.Fatalf("second call = %q, %v; want %q", again, err, first)
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.FleetConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	if string(cm.UID) != first {
		t.Errorf("fleet id %q is not the ConfigMap's UID %q", first, cm.UID)
	}
	if err := c.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	renewed, err := EnsureFleetID(ctx, c, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if renewed == "" || renewed == first {
		t.Errorf("after the identity object was deleted the fleet id is %q, want a new one (was %q)", renewed, first)
	}
}

func TestHubNamespace(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	tests := []struct {
		opts Options
		env  string
		want string
	}{
		{want: flotillav1.SystemNamespace},
		{env: "from-pod", want: "from-pod"},
		{opts: Options{LeaderElectionNamespace: "le"}, env: "from-pod", want: "le"},
		{opts: Options{Namespace: "ns", LeaderElectionNamespace: "le"}, want: "ns"},
	}
	for _, tt := range tests {
		t.Setenv("POD_NAMESPACE", tt.env)
		if got := hubNamespace(tt.opts); got != tt.want {
			t.Errorf("hubNamespace(%+v) with POD_NAMESPACE=%q = %q, want %q", tt.opts, tt.env, got, tt.want)
		}
	}
}
