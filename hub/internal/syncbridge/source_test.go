package syncbridge

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

// newSourceEnv installs the CRDs on the package's envtest apiserver and
// returns a context ended with the test, a client, a cache not yet
// started (set a Notify first, then startInformers) and a WorkSource on
// it.
func newSourceEnv(tb testing.TB) (context.Context, client.Client, cache.Cache, *WorkSource) {
	tb.Helper()
	cfg := sharedEnv.ConfigWithCRDs(tb)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, flotillav1.AddToScheme} {
		if err := add(scheme); err != nil {
			tb.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		tb.Fatal(err)
	}
	src, err := NewWorkSource(ctx, informers)
	if err != nil {
		tb.Fatal(err)
	}
	return ctx, c, informers, src
}

// freshCount numbers the clusters and namespaces this package's tests and
// benchmarks make on their one apiserver.
var freshCount atomic.Int32

// freshName returns prefix-N, a name no earlier test or benchmark of this
// process used: envtest never finishes deleting a namespace, so a second
// run (-count=2, a benchmark's rounds) would find the first's.
func freshName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, freshCount.Add(1)) }

// createNamespace creates namespace ns through c.
func createNamespace(ctx context.Context, tb testing.TB, c client.Client, ns string) {
	tb.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		tb.Fatalf("creating namespace %s: %v", ns, err)
	}
}

// startInformers starts informers and waits for their caches.
func startInformers(ctx context.Context, tb testing.TB, informers cache.Cache) {
	tb.Helper()
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		tb.Fatal("the cache did not sync")
	}
}

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// TestDeletionIntentFromTheInformer deletes Works on a real apiserver and
// checks what the Work source says about each, when it tells the server:
// a Work marked with the deletion intent was meant to go, one deleted
// without it was not, one never deleted (or created again) is unknown.
func TestDeletionIntentFromTheInformer(t *testing.T) {
	ctx, c, informers, src := newSourceEnv(t)
	type answer struct {
		reason string
		known  bool
	}
	// What DeletionIntent says at the moment the server is told: that is
	// when the server asks.
	told := make(chan map[string]answer, 100)
	src.Notify(func(cluster, name string) {
		r, k := src.DeletionIntent(cluster, name)
		told <- map[string]answer{name: {r, k}}
	})
	startInformers(ctx, t, informers)

	cluster := freshName("east")
	ns := flotillav1.ClusterNamespace(cluster)
	createNamespace(ctx, t, c, ns)
	work := func(name string) *flotillav1.Work {
		return &flotillav1.Work{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{
				Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"}}`),
			}}}},
		}
	}
	for _, n := range []string{"meant", "lost", "kept"} {
		if err := c.Create(ctx, work(n)); err != nil {
			t.Fatal(err)
		}
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, flotillav1.AnnotationDeletionIntent, flotillav1.DeletionIntentMyAppDeleted)
	if err := c.Patch(ctx, work("meant"), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, work("meant")); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, work("lost")); err != nil {
		t.Fatal(err)
	}

	want := map[string]answer{"meant": {flotillav1.DeletionIntentMyAppDeleted, true}, "lost": {"", true}}
	last := map[string]answer{}
	testutil.Eventually(t, "the source told of both deletions", 30*time.Second, func() error {
		for {
			select {
			case m := <-told:
				for k, v := range m {
					last[k] = v
				}
				continue
			default:
			}
			break
		}
		for name, w := range want {
			if last[name] != w {
				return fmt.Errorf("%s: told with %+v, want %+v (all: %+v)", name, last[name], w, last)
			}
		}
		return nil
	}, testutil.Every(20*time.Millisecond))
	if r, k := src.DeletionIntent(cluster, "kept"); k || r != "" {
		t.Errorf("DeletionIntent(kept) = %q, %v; want unknown", r, k)
	}

	// A Work created again under a vanished name is no longer vanished.
	if err := c.Create(ctx, work("lost")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the re-created Work forgetting the vanishing", 30*time.Second, func() error {
		if r, k := src.DeletionIntent(cluster, "lost"); k {
			return fmt.Errorf("still %q, %v", r, k)
		}
		return nil
	}, testutil.Every(20*time.Millisecond))
}

func TestIntentsExpire(t *testing.T) {
	in := intents{entries: map[string]intent{}}
	t0 := time.Unix(1000, 0)
	in.record("ns/a", "Descheduled", t0)
	in.record("ns/b", "", t0)
	for _, tc := range []struct {
		key        string
		at         time.Time
		wantReason string
		wantKnown  bool
	}{
		{"ns/a", t0.Add(time.Hour), "Descheduled", true},
		{"ns/b", t0.Add(time.Hour), "", true},
		{"ns/c", t0, "", false},
		{"ns/a", t0.Add(intentTTL + time.Second), "", false},
	} {
		if r, k := in.get(tc.key, tc.at); r != tc.wantReason || k != tc.wantKnown {
			t.Errorf("get(%s, +%s) = %q, %v; want %q, %v", tc.key, tc.at.Sub(t0), r, k, tc.wantReason, tc.wantKnown)
		}
	}
	in.forget("ns/a")
	if _, k := in.get("ns/a", t0); k {
		t.Error("forget left ns/a known")
	}
	// A record long after sweeps what expired.
	in.record("ns/d", "", t0.Add(intentTTL+2*time.Minute))
	if _, ok := in.entries["ns/b"]; ok {
		t.Error("an expired entry survived the sweep")
	}
}
