package push

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
)

// stubCluster is a cluster whose life the test drives: Start runs until
// its context ends, then waits for release (if set) before it returns
// startErr; its cache syncs unless neverSyncs; its field indexer records
// the fields indexed. Every other method is the embedded nil interface's
// (the registry calls none of them).
type stubCluster struct {
	cluster.Cluster
	release    chan struct{}
	startErr   error
	neverSyncs bool

	stopped chan struct{}
	mu      sync.Mutex
	indexed []string
}

func newStub() *stubCluster { return &stubCluster{stopped: make(chan struct{})} }

func (s *stubCluster) Start(ctx context.Context) error {
	defer close(s.stopped)
	<-ctx.Done()
	if s.release != nil {
		<-s.release
	}
	return s.startErr
}

func (s *stubCluster) GetCache() cache.Cache { return stubCache{s: s} }

func (s *stubCluster) GetFieldIndexer() client.FieldIndexer { return stubIndexer{s} }

func (s *stubCluster) fields() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.indexed...)
}

type stubCache struct {
	cache.Cache
	s *stubCluster
}

func (c stubCache) WaitForCacheSync(ctx context.Context) bool {
	if c.s.neverSyncs {
		<-ctx.Done()
		return false
	}
	return true
}

type stubIndexer struct{ s *stubCluster }

func (i stubIndexer) IndexField(_ context.Context, _ client.Object, field string, _ client.IndexerFunc) error {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	i.s.indexed = append(i.s.indexed, field)
	return nil
}

// aware records engagements, or refuses them.
type aware struct {
	refuse  error
	mu      sync.Mutex
	engaged []multicluster.ClusterName
}

func (a *aware) Engage(_ context.Context, name multicluster.ClusterName, _ cluster.Cluster) error {
	if a.refuse != nil {
		return a.refuse
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.engaged = append(a.engaged, name)
	return nil
}

func waitStopped(t *testing.T, s *stubCluster, what string) {
	t.Helper()
	select {
	case <-s.stopped:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not stop within 10s", what)
	}
}

// A member engaged afresh (Disengage, a changed kubeconfig) replaces its
// old cluster under the same name; the old one's exit, however late, must
// not remove the new one: the provider would think the member engaged
// while nothing pushed to it.
func TestRegistryReplacedClusterStaysWhenTheOldOneExits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRegistry(5*time.Second, nil)
	old, fresh := newStub(), newStub()
	old.release = make(chan struct{})
	a := &aware{}
	if err := r.add(ctx, "member-1", old, a); err != nil {
		t.Fatal(err)
	}
	r.remove("member-1")
	if err := r.add(ctx, "member-1", fresh, a); err != nil {
		t.Fatalf("engaging member-1 afresh: %v", err)
	}
	close(old.release) // the old cluster's Start returns only now
	waitStopped(t, old, "the replaced cluster")
	got, err := r.get("member-1")
	if err != nil {
		t.Fatalf("member-1 after its old cluster exited: %v", err)
	}
	if got != fresh {
		t.Fatal("member-1 holds the old cluster, not the one engaged afresh")
	}
	select {
	case <-fresh.stopped:
		t.Fatal("the cluster engaged afresh was stopped by the old one's exit")
	default:
	}
	if len(a.engaged) != 2 {
		t.Errorf("engaged %v, want member-1 twice", a.engaged)
	}
}

func TestRegistryAddFailuresLeaveNothingRunning(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRegistry(200*time.Millisecond, nil)

	slow := newStub()
	slow.neverSyncs = true
	if err := r.add(ctx, "slow", slow, nil); err == nil {
		t.Fatal("a cluster whose cache never synced was engaged")
	}
	waitStopped(t, slow, "the cluster whose cache did not sync")
	if _, err := r.get("slow"); !errors.Is(err, multicluster.ErrClusterNotFound) {
		t.Errorf("get(slow) after the failed add: %v, want ErrClusterNotFound", err)
	}

	refused := newStub()
	if err := r.add(ctx, "refused", refused, &aware{refuse: errors.New("no")}); err == nil {
		t.Fatal("a cluster the manager refused to engage was kept")
	}
	waitStopped(t, refused, "the cluster the manager refused")
	if names := r.names(); len(names) != 0 {
		t.Errorf("registered after failed adds: %v", names)
	}

	first, second := newStub(), newStub()
	if err := r.add(ctx, "m", first, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.add(ctx, "m", second, nil); err == nil {
		t.Fatal("a second cluster under a taken name was added")
	}
	if got, _ := r.get("m"); got != first {
		t.Error("the taken name no longer holds its first cluster")
	}
}

func TestRegistryClusterThatStopsIsForgotten(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var reported []error
	r := newRegistry(time.Second, func(err error, _ string, _ ...any) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, err)
	})
	s := newStub()
	s.startErr = errors.New("lost the apiserver")
	memberCtx, stopMember := context.WithCancel(ctx)
	if err := r.add(memberCtx, "m", s, nil); err != nil {
		t.Fatal(err)
	}
	stopMember()
	waitStopped(t, s, "the cluster")
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := r.get("m")
		mu.Lock()
		n := len(reported)
		mu.Unlock()
		if err != nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after its Start failed: get(m) = %v, errors reported %d; want not found and 1", err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRegistryIndexesEveryClusterNowAndLater(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRegistry(time.Second, nil)
	before, after := newStub(), newStub()
	if err := r.add(ctx, "before", before, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.indexField(ctx, &appsv1.Deployment{}, "spec.x", func(client.Object) []string { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.add(ctx, "after", after, nil); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*stubCluster{"before": before, "after": after} {
		if f := s.fields(); len(f) != 1 || f[0] != "spec.x" {
			t.Errorf("cluster %s indexed %v, want [spec.x]", name, f)
		}
	}
	if names := r.names(); len(names) != 2 || names[0] != "after" || names[1] != "before" {
		t.Errorf("names() = %v, want [after before]", names)
	}
}
