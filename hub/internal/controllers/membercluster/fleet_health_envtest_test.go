package membercluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// healthEnv is the health controller on the envtest apiserver, with its
// Tracker fed heartbeats the way the sync server would.
type healthEnv struct {
	c       client.Client
	tracker *Tracker
	ns      string

	mu     sync.Mutex
	alive  map[string]bool
	stopHB context.CancelFunc
	// lastBeat is the time of each member's last heartbeat.
	lastBeat map[string]time.Time
}

const testGrace = 2 * time.Second

// startHealthEnv runs a fresh controller (grace 2s) over members that
// connect and heartbeat every 200ms; the MemberClusters of other tests are
// removed first, since the brake counts every member.
func startHealthEnv(t *testing.T, ev EvictionOptions, members ...string) *healthEnv {
	t.Helper()
	cfg := startEnv(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := flotillav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deleteMembers := func() {
		if err := c.DeleteAllOf(ctx, &flotillav1.MemberCluster{}); err != nil {
			t.Errorf("deleting MemberClusters: %v", err)
		}
		_ = poll(func() error {
			var list flotillav1.MemberClusterList
			if err := c.List(ctx, &list); err != nil {
				return err
			}
			if len(list.Items) > 0 {
				return fmt.Errorf("%d MemberClusters left", len(list.Items))
			}
			return nil
		})
	}
	deleteMembers()
	ns := "flotilla-hub-" + fmt.Sprint(time.Now().UnixNano())
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if err := c.Create(ctx, &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m}}); err != nil {
			t.Fatal(err)
		}
	}

	mgr, err := ctrl.NewManager(cfg, envtestenv.ManagerOptions(scheme))
	if err != nil {
		t.Fatal(err)
	}
	env := &healthEnv{c: c, tracker: NewTracker(time.Second), ns: ns, alive: map[string]bool{}, lastBeat: map[string]time.Time{}}
	if err := (&Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Tracker: env.tracker, Recorder: mgr.GetEventRecorder("test"),
		Grace: testGrace, Evictions: ev, Namespace: ns,
	}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()

	hctx, stopHB := context.WithCancel(ctx)
	env.stopHB = stopHB
	for _, m := range members {
		env.alive[m] = true
		env.tracker.AgentConnected(m, syncserver.AgentInfo{Instance: "agent-" + m, ConnectedAt: time.Now()})
	}
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case now := <-tick.C:
				env.mu.Lock()
				for m, ok := range env.alive {
					if ok {
						env.tracker.AgentHeartbeat(m, syncserver.Heartbeat{Time: now})
						env.lastBeat[m] = now
					}
				}
				env.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		stopHB()
		<-hbDone
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		deleteMembers()
	})
	for _, m := range members {
		eventuallyErr(t, m+" Ready", func() error { return env.ready(m, metav1.ConditionTrue, flotillav1.ReasonHeartbeating) })
	}
	return env
}

// silence stops the heartbeats of members at once (their streams end).
func (e *healthEnv) silence(members ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range members {
		e.alive[m] = false
		e.tracker.AgentDisconnected(m, errors.New("stream closed"))
	}
}

// resume brings members back: they connect and heartbeat again.
func (e *healthEnv) resume(members ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range members {
		e.alive[m] = true
		e.tracker.AgentConnected(m, syncserver.AgentInfo{Instance: "agent-" + m, ConnectedAt: time.Now()})
	}
}

func (e *healthEnv) get(name string) (*flotillav1.MemberCluster, error) {
	mc := &flotillav1.MemberCluster{}
	return mc, e.c.Get(context.Background(), client.ObjectKey{Name: name}, mc)
}

// ready checks name's Ready condition.
func (e *healthEnv) ready(name string, status metav1.ConditionStatus, reason string) error {
	mc, err := e.get(name)
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady)
	if c == nil || c.Status != status || c.Reason != reason {
		return fmt.Errorf("%s Ready %+v, want %s %s", name, c, status, reason)
	}
	return nil
}

// taintedAt is the TimeAdded of name's unreachable taint (nil: none).
func (e *healthEnv) taintedAt(name string) (*time.Time, error) {
	mc, err := e.get(name)
	if err != nil {
		return nil, err
	}
	return unreachableTaintTime(mc.Spec.Taints), nil
}

func (e *healthEnv) notTainted(names ...string) func() error {
	return func() error {
		for _, n := range names {
			at, err := e.taintedAt(n)
			if err != nil {
				return err
			}
			if at != nil {
				return fmt.Errorf("%s tainted unreachable at %s", n, at)
			}
		}
		return nil
	}
}

// hubStatus is the hub status ConfigMap's data (nil: none).
func (e *healthEnv) hubStatus() (map[string]string, error) {
	cm := &corev1.ConfigMap{}
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: e.ns, Name: flotillav1.HubStatusConfigMapName}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return cm.Data, err
}

func (e *healthEnv) hubEvents() ([]string, error) {
	var list eventsv1.EventList
	if err := e.c.List(context.Background(), &list, client.InNamespace(e.ns)); err != nil {
		return nil, err
	}
	var reasons []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == flotillav1.HubStatusConfigMapName {
			reasons = append(reasons, ev.Reason)
		}
	}
	return reasons, nil
}

func poll(check func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func eventuallyErr(t *testing.T, what string, check func() error) {
	t.Helper()
	if err := poll(check); err != nil {
		t.Fatalf("%s did not happen within 30s: %v", what, err)
	}
}

func consistentlyErr(t *testing.T, what string, d time.Duration, check func() error) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err := check(); err != nil {
			t.Fatalf("%s stopped holding: %v", what, err)
		}
	}
}

// TestPartitionBrakeHoldsWhenMostMembersFallSilent: 2 of 3 members fall
// silent at once. The hub marks them Ready Unknown (PartitionBrake) and
// taints neither, and reports the brake in its status ConfigMap, with an
// event and the gauge. When one of them heartbeats again only 1 of 3 is
// silent: the brake releases, and the other, held until then, gets a new
// grace period from the release (a healing partition brings members back
// over seconds, not at once): it is tainted one grace period later, not at
// the release.
func TestPartitionBrakeHoldsWhenMostMembersFallSilent(t *testing.T) {
	env := startHealthEnv(t, EvictionOptions{}, "brake-1", "brake-2", "brake-3")
	env.silence("brake-2", "brake-3")
	for _, m := range []string{"brake-2", "brake-3"} {
		eventuallyErr(t, m+" Ready Unknown with reason PartitionBrake", func() error { return env.ready(m, metav1.ConditionUnknown, flotillav1.ReasonPartitionBrake) })
	}
	eventuallyErr(t, "the brake in the hub status ConfigMap", func() error {
		data, err := env.hubStatus()
		if err != nil {
			return err
		}
		if data["partitionBrake"] != "true" || data["heldClusters"] != "brake-2,brake-3" {
			return fmt.Errorf("data %v", data)
		}
		return nil
	})
	eventuallyErr(t, "a PartitionBrake event", func() error {
		reasons, err := env.hubEvents()
		if err != nil {
			return err
		}
		if !slices.Contains(reasons, flotillav1.ReasonPartitionBrake) {
			return fmt.Errorf("events %q", reasons)
		}
		return nil
	})
	eventuallyErr(t, "flotilla_partition_brake_active 1", func() error {
		if v := gaugeValue(partitionBrakeActive); v != 1 {
			return fmt.Errorf("flotilla_partition_brake_active = %v", v)
		}
		return nil
	})
	consistentlyErr(t, "no member tainted while the brake holds", 3*testGrace, env.notTainted("brake-1", "brake-2", "brake-3"))
	if err := env.ready("brake-1", metav1.ConditionTrue, flotillav1.ReasonHeartbeating); err != nil {
		t.Error(err)
	}

	released := time.Now()
	env.resume("brake-2")
	eventuallyErr(t, "the brake released in the hub status ConfigMap", func() error {
		data, err := env.hubStatus()
		if err != nil {
			return err
		}
		if data["partitionBrake"] != "false" {
			return fmt.Errorf("data %v", data)
		}
		return nil
	})
	if at, err := env.taintedAt("brake-3"); err != nil || at != nil {
		t.Fatalf("brake-3 tainted at %v (%v) as the brake released; its grace period should have restarted", at, err)
	}
	if err := env.ready("brake-3", metav1.ConditionUnknown, flotillav1.ReasonPartitionBrake); err != nil {
		t.Errorf("brake-3 during its restarted grace period: %v", err)
	}
	eventuallyErr(t, "brake-3 tainted once its restarted grace period ran out", func() error {
		at, err := env.taintedAt("brake-3")
		if err != nil || at == nil {
			return fmt.Errorf("brake-3 not tainted (%v)", err)
		}
		return env.ready("brake-3", metav1.ConditionUnknown, flotillav1.ReasonHeartbeatMissed)
	})
	// TimeAdded is whole seconds: allow for the truncation.
	if at, _ := env.taintedAt("brake-3"); at.Before(released.Add(testGrace - time.Second)) {
		t.Errorf("brake-3 tainted at %s, less than the grace period (%s) after the brake released at %s", at, testGrace, released)
	}
	eventuallyErr(t, "flotilla_partition_brake_active 0", func() error {
		if v := gaugeValue(partitionBrakeActive); v != 0 {
			return fmt.Errorf("flotilla_partition_brake_active = %v", v)
		}
		return nil
	})
	if err := env.notTainted("brake-1", "brake-2")(); err != nil {
		t.Error(err)
	}
}

// TestOneSilentMemberIsTaintedAfterTheGrace: 1 of 3 falls silent and is
// tainted after the grace period; no brake.
func TestOneSilentMemberIsTaintedAfterTheGrace(t *testing.T) {
	env := startHealthEnv(t, EvictionOptions{}, "lone-1", "lone-2", "lone-3")
	env.silence("lone-2")
	// The grace counts from the last heartbeat, which a loaded machine
	// may have sent well before the silence.
	env.mu.Lock()
	silenced := env.lastBeat["lone-2"]
	env.mu.Unlock()
	eventuallyErr(t, "lone-2 tainted unreachable", func() error {
		at, err := env.taintedAt("lone-2")
		if err != nil || at == nil {
			return fmt.Errorf("not tainted (%v)", err)
		}
		return env.ready("lone-2", metav1.ConditionUnknown, flotillav1.ReasonHeartbeatMissed)
	})
	// TimeAdded is whole seconds: allow for the truncation.
	if at, _ := env.taintedAt("lone-2"); at.Before(silenced.Add(testGrace - time.Second)) {
		t.Errorf("tainted at %s, before the grace period after the last heartbeat at %s", at, silenced)
	}
	if err := env.notTainted("lone-1", "lone-3")(); err != nil {
		t.Error(err)
	}
	data, err := env.hubStatus()
	if err != nil {
		t.Fatal(err)
	}
	if data["partitionBrake"] == "true" {
		t.Errorf("hub status %v, want no brake", data)
	}
}

// TestEvictionRateLimit: 3 of 6 fall silent at once (50%, no brake): one
// is tainted at once and the others wait for the rate limit (1 per 4s
// here), Ready Unknown with reason EvictionRateLimited, and are tainted one
// per interval.
func TestEvictionRateLimit(t *testing.T) {
	const interval = 4 * time.Second
	env := startHealthEnv(t, EvictionOptions{RateLimit: 1, RateInterval: interval}, "rate-1", "rate-2", "rate-3", "rate-4", "rate-5", "rate-6")
	silent := []string{"rate-1", "rate-2", "rate-3"}
	env.silence(silent...)
	taints := func() (map[string]time.Time, error) {
		out := map[string]time.Time{}
		for _, m := range silent {
			at, err := env.taintedAt(m)
			if err != nil {
				return nil, err
			}
			if at != nil {
				out[m] = *at
			}
		}
		return out, nil
	}
	eventuallyErr(t, "one member tainted, the two others waiting for the rate limit", func() error {
		got, err := taints()
		if err != nil {
			return err
		}
		if len(got) != 1 {
			return fmt.Errorf("tainted %v, want one", got)
		}
		for _, m := range silent {
			if _, ok := got[m]; ok {
				continue
			}
			if err := env.ready(m, metav1.ConditionUnknown, flotillav1.ReasonEvictionRateLimited); err != nil {
				return err
			}
		}
		return nil
	})
	eventuallyErr(t, "all three tainted, one per interval", func() error {
		got, err := taints()
		if err != nil {
			return err
		}
		if len(got) != 3 {
			return fmt.Errorf("tainted %v", got)
		}
		return nil
	})
	got, _ := taints()
	times := make([]time.Time, 0, 3)
	for _, at := range got {
		times = append(times, at)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		// TimeAdded is whole seconds.
		if gap := times[i].Sub(times[i-1]); gap < interval-time.Second {
			t.Errorf("taints at %v: %s apart, want at least %s", times, gap, interval)
		}
	}
	if err := env.notTainted("rate-4", "rate-5", "rate-6")(); err != nil {
		t.Error(err)
	}
}
