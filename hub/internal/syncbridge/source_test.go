package syncbridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/ssa"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// TestDeletionIntentFromTheInformer deletes Works on a real apiserver and
// checks what the Work source says about each, when it tells the server:
// a Work marked with the deletion intent was meant to go, one deleted
// without it was not, one never deleted (or created again) is unknown.
func TestDeletionIntentFromTheInformer(t *testing.T) {
	cfg := sharedEnv.Config(t)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, flotillav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewWorkSource(ctx, informers)
	if err != nil {
		t.Fatal(err)
	}
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
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}

	ns := flotillav1.ClusterNamespace("east")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
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
	if r, k := src.DeletionIntent("east", "kept"); k || r != "" {
		t.Errorf("DeletionIntent(kept) = %q, %v; want unknown", r, k)
	}

	// A Work created again under a vanished name is no longer vanished.
	if err := c.Create(ctx, work("lost")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the re-created Work forgetting the vanishing", 30*time.Second, func() error {
		if r, k := src.DeletionIntent("east", "lost"); k {
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

// TestWrittenWorksGoOutBeforeTheInformerShowsThem writes Works on a real
// apiserver and hands the source the apiserver's answers, as the MyApp
// controller does (Written): the answer is what GetWork and ListWorks give
// at once, whether or not the informer has shown it yet, and the source
// forgets it once the informer has. An answer older than what the informer
// already showed (a later write, a deletion) is never given out: a deleted
// Work is not brought back.
func TestWrittenWorksGoOutBeforeTheInformerShowsThem(t *testing.T) {
	cfg := sharedEnv.Config(t)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, flotillav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	informers, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewWorkSource(ctx, informers)
	if err != nil {
		t.Fatal(err)
	}
	var toldMu sync.Mutex
	told := map[string]int{}
	src.Notify(func(_, name string) {
		toldMu.Lock()
		defer toldMu.Unlock()
		told[name]++
	})
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	const cluster = "west"
	ns := flotillav1.ClusterNamespace(cluster)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// write server-side applies Work name with data in its manifest and
	// returns the apiserver's answer as a Work, as the controller does.
	write := func(name, data string) *flotillav1.Work {
		t.Helper()
		w := &flotillav1.Work{
			TypeMeta:   metav1.TypeMeta{APIVersion: flotillav1.GroupVersion.String(), Kind: "Work"},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{
				Raw: fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"},"data":{"v":%q}}`, data),
			}}}},
		}
		u, err := ssa.Unstructured(w)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
		out := &flotillav1.Work{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	held := func(name string) []string {
		list, err := src.ListWorks(cluster)
		if err != nil {
			t.Fatal(err)
		}
		var rvs []string
		for _, w := range list {
			if w.Name == name {
				rvs = append(rvs, w.ResourceVersion)
			}
		}
		return rvs
	}
	atLeast := func(got *flotillav1.Work, want string) error {
		if got == nil {
			return fmt.Errorf("no Work, want resourceVersion %s or later", want)
		}
		if c, err := resourceversion.CompareResourceVersion(got.ResourceVersion, want); err != nil || c < 0 {
			return fmt.Errorf("resourceVersion %s, want %s or later", got.ResourceVersion, want)
		}
		return nil
	}
	pending := func(name string) bool { return src.written.get(ns+"/"+name) != nil }

	// A new Work: given out as soon as the write returned.
	fresh := write("fresh", "1")
	src.Written(fresh)
	got, err := src.GetWork(cluster, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if err := atLeast(got, fresh.ResourceVersion); err != nil {
		t.Errorf("GetWork right after Written: %v", err)
	}
	if rvs := held("fresh"); len(rvs) != 1 {
		t.Errorf("ListWorks right after Written holds fresh %d times (%v), want once", len(rvs), rvs)
	}
	testutil.Eventually(t, "the source forgetting the written Work once the informer showed it", 30*time.Second, func() error {
		if pending("fresh") {
			return errors.New("still held as written")
		}
		toldMu.Lock()
		defer toldMu.Unlock()
		if told["fresh"] == 0 {
			return errors.New("never told")
		}
		return nil
	}, testutil.Every(10*time.Millisecond))

	// An answer older than what the informer showed is not given out.
	first := write("twice", "1")
	second := write("twice", "2")
	testutil.Eventually(t, "the informer showing the second write", 30*time.Second, func() error {
		w := &flotillav1.Work{}
		if err := informers.Get(ctx, client.ObjectKey{Namespace: ns, Name: "twice"}, w); err != nil {
			return err
		}
		return atLeast(w, second.ResourceVersion)
	}, testutil.Every(10*time.Millisecond))
	src.Written(first)
	if got, err := src.GetWork(cluster, "twice"); err != nil || atLeast(got, second.ResourceVersion) != nil {
		t.Errorf("GetWork after an older answer: %v, %v; want the second write (%s)", got, err, second.ResourceVersion)
	}
	if pending("twice") {
		t.Error("an answer older than the cache is held")
	}

	// An answer from before a deletion the informer showed does not
	// bring the Work back.
	gone := write("gone", "1")
	if err := c.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the informer showing the deletion", 30*time.Second, func() error {
		if _, known := src.DeletionIntent(cluster, "gone"); !known {
			return errors.New("deletion not shown yet")
		}
		return nil
	}, testutil.Every(10*time.Millisecond))
	toldMu.Lock()
	before := told["gone"]
	toldMu.Unlock()
	src.Written(gone)
	if got, err := src.GetWork(cluster, "gone"); err != nil || got != nil {
		t.Errorf("GetWork of a deleted Work after its old answer = %v, %v; want nothing", got, err)
	}
	if rvs := held("gone"); len(rvs) != 0 {
		t.Errorf("ListWorks holds the deleted Work at %v", rvs)
	}
	toldMu.Lock()
	after := told["gone"]
	toldMu.Unlock()
	if after != before {
		t.Errorf("the old answer of a deleted Work was told of (%d times before, %d after)", before, after)
	}

	// ListWorks gives a written Work in place of an older cached one, and
	// one the cache does not hold yet, exactly once each (the entries are
	// put directly: no informer delay can be made to last on a real
	// apiserver).
	cached := &flotillav1.Work{}
	if err := informers.Get(ctx, client.ObjectKey{Namespace: ns, Name: "twice"}, cached); err != nil {
		t.Fatal(err)
	}
	ahead := cached.DeepCopy()
	ahead.ResourceVersion = "999999999"
	unseen := cached.DeepCopy()
	unseen.Name, unseen.UID, unseen.ResourceVersion = "unseen", "unseen-uid", "999999998"
	src.written.put(ns+"/twice", ahead)
	src.written.put(ns+"/unseen", unseen)
	if rvs := held("twice"); len(rvs) != 1 || rvs[0] != "999999999" {
		t.Errorf("ListWorks gives twice at %v; want once, at the written 999999999", rvs)
	}
	if rvs := held("unseen"); len(rvs) != 1 || rvs[0] != "999999998" {
		t.Errorf("ListWorks gives unseen at %v; want once, at 999999998", rvs)
	}
	if got, _ := src.GetWork(cluster, "unseen"); got == nil || got.ResourceVersion != "999999998" {
		t.Errorf("GetWork(unseen) = %v; want the written Work", got)
	}
}
