//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
)

// healthRecorder watches the MemberClusters and records every moment a
// member was not Ready or carried the unreachable taint: a restart that
// the default timings absorb leaves nothing recorded.
type healthRecorder struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   []string
	err    error
}

// recordMemberHealth starts recording from now on.
func recordMemberHealth(t *testing.T, in SpecInput) *healthRecorder {
	t.Helper()
	wc, err := client.NewWithWatch(in.Provider.HubConfig(), client.Options{Scheme: fleet.Scheme()})
	if err != nil {
		t.Fatalf("a watching client of the hub: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var list flotillav1.MemberClusterList
	if err := wc.List(ctx, &list); err != nil {
		cancel()
		t.Fatalf("listing MemberClusters: %v", err)
	}
	r := &healthRecorder{cancel: cancel, done: make(chan struct{})}
	for i := range list.Items {
		r.check(&list.Items[i])
	}
	rv := list.ResourceVersion
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &flotillav1.MemberClusterList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				if ctx.Err() == nil {
					r.fail(fmt.Errorf("watching MemberClusters: %w", err))
				}
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() == nil {
						r.fail(fmt.Errorf("watching MemberClusters: %v", apierrors.FromObject(ev.Object)))
					}
					w.Stop()
					return
				}
				if mc, ok := ev.Object.(*flotillav1.MemberCluster); ok {
					rv = mc.ResourceVersion
					r.check(mc)
				}
			}
			w.Stop()
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *healthRecorder) check(mc *flotillav1.MemberCluster) {
	var problems []string
	if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		problems = append(problems, "Ready "+conditionString(c))
	}
	for _, taint := range mc.Spec.Taints {
		if taint.Key == flotillav1.TaintClusterUnreachable {
			problems = append(problems, "tainted "+taint.ToString())
		}
	}
	if len(problems) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, fmt.Sprintf("%s %s: %s", time.Now().UTC().Format("15:04:05.000"), mc.Name, strings.Join(problems, ", ")))
}

func (r *healthRecorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

// stop ends the recording and returns what was seen (the watch's error
// as the only entry if it failed).
func (r *healthRecorder) stop() []string {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return []string{r.err.Error()}
	}
	return slices.Clone(r.seen)
}

// noEviction stops both recorders and fails the spec when a member was
// not Ready or tainted, or the placement changed, while they ran.
func noEviction(t *testing.T, what string, health *healthRecorder, placements *placementRecorder) {
	t.Helper()
	if seen := health.stop(); len(seen) > 0 {
		t.Errorf("%s with the default timings: members not Ready or tainted unreachable:\n%s", what, strings.Join(seen, "\n"))
	}
	if changes := placements.stop(); len(changes) > 0 {
		t.Errorf("%s with the default timings: the placement changed (an eviction):\n%s", what, strings.Join(changes, "\n"))
	}
}

// AgentRestartSpec: every agent replica of a member is killed at once
// (SIGKILL: none can release the leader Lease) and started again, as when
// a node restarts. With the default timings a new agent process waits out
// the Lease and holds the stream again within the hub's heartbeat grace:
// the member never turns not Ready, nothing is evicted, and the member's
// Deployment is the same object; a scale then reaches it.
func AgentRestartSpec(t *testing.T, in SpecInput) {
	ctx := context.Background()
	member := pullMember(t, in, 0)
	app := newMyApp(in, "web", 2, duplicated())
	createMyApp(t, in, app)
	eventually(t, "Deployment web with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(each(in.Members, 2))))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", each(in.Members, 2)))
	var leader string
	eventually(t, "an agent of "+member+" leading and holding the stream to the hub", convergeTimeout, func() error {
		var err error
		if leader, err = in.Provider.AgentLeader(ctx, member); err != nil {
			return err
		}
		return agentConnected(ctx, in, member, leader)
	})
	holder, _, err := leaseHolder(ctx, in.Provider.Member(member), systemNamespace, agentLease)
	if err != nil {
		t.Fatalf("reading %s's agent Lease: %v", member, err)
	}
	before, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := in.Provider.AgentReplicas(ctx, member)
	if err != nil {
		t.Fatal(err)
	}
	health := recordMemberHealth(t, in)
	placements := recordPlacements(t, in, "web")

	killed := time.Now()
	for _, name := range replicas {
		if err := in.Provider.KillAgent(ctx, member, name); err != nil {
			t.Fatalf("killing agent %s: %v", name, err)
		}
	}
	t.Logf("killed every agent of %s (%s); the Lease holder was %s", member, strings.Join(replicas, ", "), holder)
	eventually(t, "a new agent process of "+member+" leading and holding the stream to the hub", convergeTimeout, func() error {
		h, _, err := leaseHolder(ctx, in.Provider.Member(member), systemNamespace, agentLease)
		if err != nil {
			return err
		}
		if h == "" || h == holder {
			return fmt.Errorf("Lease holder %q, was %q", h, holder)
		}
		next, err := in.Provider.AgentLeader(ctx, member)
		if err != nil {
			return err
		}
		return agentConnected(ctx, in, member, next)
	})
	t.Logf("%s's agent connected again %s after the kill", member, time.Since(killed).Round(100*time.Millisecond))
	// Past the grace period and the toleration the hub would have acted.
	consistently(t, "every member Ready and untainted", 10*time.Second, func() error { return membersReady(ctx, in) })
	noEviction(t, "killing every agent of "+member, health, placements)

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](3) })
	eventually(t, "the scale to 3 reaching every member", convergeTimeout, deploymentsRolledOut(in, "web", want(each(in.Members, 3))))
	after, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("the agent restart recreated a Deployment: %v", err)
	}
}

// defaultFailoverApp is 6 replicas Divided equally over the members with
// the default failover policy (none set).
func defaultFailoverApp(in SpecInput) *flotillav1.MyApp {
	weights := make([]int64, len(in.Members))
	for i := range weights {
		weights[i] = 1
	}
	return newMyApp(in, "web", 6, staticWeights(in.Members, weights...))
}

// hubStatus reads the hub status ConfigMap's data.
func hubStatus(ctx context.Context, in SpecInput) (map[string]string, error) {
	cm := &corev1.ConfigMap{}
	if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: flotillav1.HubStatusConfigMapName}, cm); err != nil {
		return nil, err
	}
	return cm.Data, nil
}

// PartitionBrakeSpec: two of three members' control planes stop at once
// (killed where the provider can: stopMembers).
// More than 55% of the fleet fell silent together, so the hub assumes it
// is the one cut off: both turn Ready Unknown with reason PartitionBrake,
// neither is tainted and nothing moves (the placement stays 2/2/2 well
// past the grace period and the default toleration); the hub status
// ConfigMap, an event and flotilla_partition_brake_active say so. When
// the members return the brake releases, and their Deployments are the
// objects they ran before.
func PartitionBrakeSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	lost := in.Members[1:3]
	createMyApp(t, in, defaultFailoverApp(in))
	even := each(in.Members, 2)
	eventually(t, "Deployments with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(even)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", even))
	deps, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	placements := recordPlacements(t, in, "web")
	restarts := stopMembers(t, in, lost...)
	for _, m := range lost {
		eventually(t, m+" Ready Unknown with reason PartitionBrake and not tainted", convergeTimeout, func() error {
			mc := &flotillav1.MemberCluster{}
			if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status != metav1.ConditionUnknown || c.Reason != flotillav1.ReasonPartitionBrake {
				return fmt.Errorf("Ready %s", conditionString(c))
			}
			return nil
		})
	}
	eventually(t, "the brake in the hub status ConfigMap", convergeTimeout, func() error {
		data, err := hubStatus(ctx, in)
		if err != nil {
			return err
		}
		if data["partitionBrake"] != "true" || data["heldClusters"] != strings.Join(lost, ",") {
			return fmt.Errorf("data %v", data)
		}
		return nil
	})
	eventually(t, "a PartitionBrake event on the hub status ConfigMap", convergeTimeout, func() error {
		var list eventsv1.EventList
		if err := in.Provider.Hub().List(ctx, &list, client.InNamespace(systemNamespace)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == flotillav1.HubStatusConfigMapName && e.Reason == flotillav1.ReasonPartitionBrake {
				return nil
			}
		}
		return fmt.Errorf("no PartitionBrake event among %d", len(list.Items))
	})
	if p, ok := in.Provider.(interface{ HubMetrics() string }); ok {
		eventually(t, "flotilla_partition_brake_active 1", convergeTimeout, func() error {
			if m := p.HubMetrics(); !strings.Contains(m, "\nflotilla_partition_brake_active 1\n") {
				return fmt.Errorf("not in the hub's metrics")
			}
			return nil
		})
	}
	// Well past the grace period and the default toleration.
	consistently(t, "no member tainted and the placement 2/2/2", 20*time.Second, func() error {
		for _, m := range in.Members {
			mc := &flotillav1.MemberCluster{}
			if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
				return err
			}
			for _, taint := range mc.Spec.Taints {
				if taint.Key == flotillav1.TaintClusterUnreachable {
					return fmt.Errorf("%s tainted %s", m, taint.ToString())
				}
			}
		}
		return placementIs(in, "web", even)()
	})
	if changes := placements.stop(); len(changes) > 0 {
		t.Fatalf("the placement changed while the brake held:\n%s", strings.Join(changes, "\n"))
	}

	// The partition heals at once for every member (they start together):
	// restarted one after the other, the first back would release the
	// brake while the others are still down, and those would then be lost
	// on their own and failed over, as they should be.
	startAll(restarts)
	eventually(t, "every member Ready again", convergeTimeout, func() error { return membersReady(ctx, in) })
	eventually(t, "the brake released in the hub status ConfigMap", convergeTimeout, func() error {
		data, err := hubStatus(ctx, in)
		if err != nil {
			return err
		}
		if data["partitionBrake"] != "false" {
			return fmt.Errorf("data %v", data)
		}
		return nil
	})
	eventually(t, "Deployments with 2 ready replicas in every member after the partition", convergeTimeout, deploymentsRolledOut(in, "web", want(even)))
	// Nothing moved, so nothing was deleted: the members that came back
	// run the Deployments they ran before (a Pull member's agent and the
	// hub for a Push member prune only Works the hub no longer sends).
	now, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(deps, now, false); err != nil {
		t.Fatalf("Deployments recreated although the brake held the placement: %v", err)
	}
}

// MemberLossSpec: with the default timings and failover policy, a
// member (lost) whose control plane stops has its replicas running Ready
// on the other members within 30s of the stop (a bounded poll: 30s is its
// limit, not a measurement).
func MemberLossSpec(t *testing.T, in SpecInput, lost string) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	others := without(in.Members, lost)
	t.Logf("stopping %s (syncMode %s)", lost, in.Provider.SyncMode(lost))
	createMyApp(t, in, defaultFailoverApp(in))
	even := each(in.Members, 2)
	eventually(t, "Deployments with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(even)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", even))

	stopped := time.Now()
	restart := stopMember(t, in, lost)
	moved := each(others, 3)
	if err := poll(ctx, 30*time.Second-time.Since(stopped), deploymentsIn(in, others, "web", want(moved))); err != nil {
		t.Fatalf("%s's replicas not running Ready on %s within 30s of its stop: %v", lost, strings.Join(others, " and "), err)
	}
	t.Logf("%s's replicas ran Ready on %s %s after its stop", lost, strings.Join(others, " and "), time.Since(stopped).Round(100*time.Millisecond))
	eventually(t, "MyApp web showing "+lost+" evicted (ClusterUnreachable)", convergeTimeout, func() error {
		app, err := getMyApp(ctx, in, "web")
		if err != nil {
			return err
		}
		if app.Status.Placement == nil || !slices.ContainsFunc(app.Status.Placement.Evicted, func(e flotillav1.EvictedCluster) bool {
			return e.Name == lost && e.Reason == "ClusterUnreachable"
		}) {
			return fmt.Errorf("status.placement %+v", app.Status.Placement)
		}
		return nil
	})
	restart()
}
