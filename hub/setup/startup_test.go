package setup

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

// TestHubCAWaitsForTheAPIServer: the hub's first call at start (reading,
// or making, its CA), against a real apiserver whose address refuses
// connections for its first second, is tried again until it gets
// through: it makes the CA once, and a second start reads the same one.
func TestHubCAWaitsForTheAPIServer(t *testing.T) {
	cfg := sharedEnv.Config(t)
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "hub-ca-late-"}}
	if err := direct.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Delete(context.Background(), ns) })

	ensureThrough := func(t *testing.T) (string, int32) {
		p := testutil.NewLateAddr(t, cfg)
		var requests atomic.Int32
		c, err := client.New(p.Config(&requests), client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Second, p.Open)
		ca, err := ensureCA(ctx, testr.New(t), c, ns.Name)
		if err != nil {
			t.Fatalf("ensureCA through an address that refused for its first second: %v", err)
		}
		if p.Accepted() == 0 {
			t.Fatalf("the late address accepted no connection: the call did not go through it")
		}
		return ca.Cert.SerialNumber.String(), requests.Load()
	}
	first, n := ensureThrough(t)
	if n < 3 {
		t.Errorf("%d requests for the first start, want at least 3 (refused, then the read and the create)", n)
	}
	var secret corev1.Secret
	if err := direct.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: flotillav1.HubCASecretName}, &secret); err != nil {
		t.Fatalf("the hub CA Secret after the first start: %v", err)
	}
	second, _ := ensureThrough(t)
	if second != first {
		t.Errorf("the second start's CA has serial %s, the first's %s: a retried start made another CA", second, first)
	}
}
