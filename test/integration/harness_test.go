package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// eventually and eventuallyStable are the module's shared pollers, which
// check every 50ms; the short names keep the many call sites readable.
var (
	eventually       = testutil.Eventually
	eventuallyStable = testutil.EventuallyStable
)

// consistently checks every 100ms that check keeps returning nil for d.
func consistently(t *testing.T, what string, d time.Duration, check func() error) {
	t.Helper()
	testutil.Consistently(t, what, d, check, testutil.Every(100*time.Millisecond))
}

// hubEnv is a testbed hub apiserver with a hub manager running in process.
type hubEnv struct {
	c   client.Client
	cfg *rest.Config
	hub *setup.Hub
}

// startHubManager starts the hub manager against cfg, without a sync
// server (the tests play the agents through the tracker), and stops it
// when the test ends. No agent confirms a Work's deletion here, so a
// deleted Work goes after a one-second cleanup timeout.
func startHubManager(t *testing.T, cfg *rest.Config, mutate func(*setup.Options)) *setup.Hub {
	t.Helper()
	opts := setup.Options{
		Config:             cfg,
		MetricsAddr:        "0",
		ProbeAddr:          "0",
		HeartbeatGrace:     2 * time.Second,
		WorkCleanupTimeout: time.Second,
		Logger:             testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
		Registerer:         prometheus.NewRegistry(),
		SkipNameValidation: true,
	}
	if mutate != nil {
		mutate(&opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hub, err := setup.New(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("building the hub: %v", err)
	}
	runUntilStopped(t, "hub manager", cancel, func() error { return hub.Manager.Start(ctx) })
	return hub
}

// runUntilStopped runs start (a manager's Start) in the background and
// returns a stop function, also registered with t.Cleanup, that cancels it
// once and waits a bounded time for it to return.
func runUntilStopped(t *testing.T, what string, cancel context.CancelFunc, start func() error) (stop func()) {
	done := make(chan error, 1)
	go func() { done <- start() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not stop within 30s", what)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newHubEnv(t *testing.T, mutate func(*setup.Options)) *hubEnv {
	t.Helper()
	c, cfg := startHubWithConfig(t)
	return &hubEnv{c: c, cfg: cfg, hub: startHubManager(t, cfg, mutate)}
}

// heartbeats pretends to be the agents of some clusters: it tells the
// hub's tracker, as the sync server would, that they connected and keeps
// them heartbeating until paused or the test ends.
type heartbeats struct {
	tracker syncserver.AgentSink
	mu      sync.Mutex
	alive   map[string]*flotillav1.ResourceSummary
	stop    chan struct{}
	done    chan struct{}
}

func startHeartbeats(t *testing.T, tracker syncserver.AgentSink) *heartbeats {
	h := &heartbeats{tracker: tracker, alive: map[string]*flotillav1.ResourceSummary{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
			h.mu.Lock()
			for name, res := range h.alive {
				h.tracker.AgentHeartbeat(name, syncserver.Heartbeat{Time: time.Now(), Resources: res})
			}
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(h.stop); <-h.done })
	return h
}

// connect starts heartbeating for cluster with an optional capacity.
func (h *heartbeats) connect(cluster string, res *flotillav1.ResourceSummary) {
	h.mu.Lock()
	h.alive[cluster] = res
	h.mu.Unlock()
	h.tracker.AgentConnected(cluster, syncserver.AgentInfo{
		Identity: "flotilla://cluster/" + cluster, Version: "test", Instance: "test-agent",
		KubernetesVersion: "v1.37.2", Resources: res, ConnectedAt: time.Now(), Peer: "127.0.0.1:1",
	})
}

// pause stops cluster's heartbeats and closes its stream.
func (h *heartbeats) pause(cluster string) {
	h.mu.Lock()
	delete(h.alive, cluster)
	h.mu.Unlock()
	h.tracker.AgentDisconnected(cluster, errors.New("test paused the agent"))
}

func capacity(cpu, memory string, pods int64) *flotillav1.ResourceSummary {
	return &flotillav1.ResourceSummary{
		Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse(cpu),
			corev1.ResourceMemory: resource.MustParse(memory),
			corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
		},
		Allocated: corev1.ResourceList{},
		Nodes:     1,
	}
}

// createMembers creates MemberClusters with region / provider and a label.
func createMembers(t *testing.T, c client.Client, names ...string) {
	t.Helper()
	regions := []string{"eu-west", "us-east", "ap-south", "eu-north", "us-west"}
	for i, n := range names {
		mc := &flotillav1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"env": "test", "index": fmt.Sprint(i + 1)}},
			Spec:       flotillav1.MemberClusterSpec{Region: regions[i%len(regions)], Provider: "testbed"},
		}
		if err := c.Create(context.Background(), mc); err != nil {
			t.Fatalf("creating MemberCluster %s: %v", n, err)
		}
	}
}

// waitReady waits until every named MemberCluster is Ready.
func waitReady(t *testing.T, c client.Client, names ...string) {
	t.Helper()
	for _, n := range names {
		eventually(t, "MemberCluster "+n+" Ready", 30*time.Second, func() error {
			mc := &flotillav1.MemberCluster{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: n}, mc); err != nil {
				return err
			}
			for _, cond := range mc.Status.Conditions {
				if cond.Type == flotillav1.ConditionReady && cond.Status == metav1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("conditions %+v", mc.Status.Conditions)
		})
	}
}

// workDeployments returns, by cluster, the Deployment each of app's Works
// carries.
func workDeployments(c client.Client, app *flotillav1.MyApp) (map[string]*appsv1.Deployment, error) {
	var list flotillav1.WorkList
	if err := c.List(context.Background(), &list, client.MatchingLabels{
		flotillav1.LabelMyAppNamespace: app.Namespace, flotillav1.LabelMyAppName: app.Name,
	}); err != nil {
		return nil, err
	}
	out := map[string]*appsv1.Deployment{}
	for _, w := range list.Items {
		if len(w.Spec.Manifests) != 1 {
			return nil, fmt.Errorf("Work %s/%s has %d manifests, want 1", w.Namespace, w.Name, len(w.Spec.Manifests))
		}
		d := &appsv1.Deployment{}
		if err := json.Unmarshal(w.Spec.Manifests[0].Raw, d); err != nil {
			return nil, err
		}
		out[w.Labels[flotillav1.LabelCluster]] = d
	}
	return out, nil
}

// replicasByCluster summarises workDeployments as cluster -> replicas.
func replicasByCluster(c client.Client, app *flotillav1.MyApp) (map[string]int32, error) {
	deps, err := workDeployments(c, app)
	if err != nil {
		return nil, err
	}
	out := map[string]int32{}
	for cl, d := range deps {
		out[cl] = *d.Spec.Replicas
	}
	return out, nil
}

func equalReplicas(got, want map[string]int32) error {
	if len(got) != len(want) {
		return fmt.Errorf("Works %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("Works %v, want %v", got, want)
		}
	}
	return nil
}

func resourceQty(s string) resource.Quantity { return resource.MustParse(s) }

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }
