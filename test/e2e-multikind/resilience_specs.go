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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
)

// AgentLeaderFailoverSpec: with two agent replicas in a member, killing
// the leader (no chance to release its Lease) hands the Lease to a new
// agent process, which holds the stream to the hub again: a scale on the
// hub reaches the member, and the member's Deployment is the same object
// throughout (neither deleted nor recreated by the handover). With the
// default timings and failover policy the handover fits in the hub's
// heartbeat grace: no member turns not Ready, nothing is evicted.
func AgentLeaderFailoverSpec(t *testing.T, in SpecInput) {
	ctx := context.Background()
	member := in.Members[0]
	mcClient := in.Provider.Member(member)
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
	holder, transitions, err := leaseHolder(ctx, mcClient, systemNamespace, agentLease)
	if err != nil {
		t.Fatalf("reading %s's agent Lease: %v", member, err)
	}
	before, err := deploymentIDs(ctx, in, "web", member)
	if err != nil {
		t.Fatal(err)
	}

	health := recordMemberHealth(t, in)
	placements := recordPlacements(t, in, "web")
	if err := in.Provider.KillAgent(ctx, member, leader); err != nil {
		t.Fatalf("killing agent %s: %v", leader, err)
	}
	t.Logf("killed %s's leading agent %s (Lease holder %s)", member, leader, holder)
	eventually(t, "another agent process taking "+member+"'s Lease", convergeTimeout, func() error {
		h, tr, err := leaseHolder(ctx, mcClient, systemNamespace, agentLease)
		if err != nil {
			return err
		}
		if h == "" || h == holder || tr <= transitions {
			return fmt.Errorf("holder %q (transitions %d), was %q (%d)", h, tr, holder, transitions)
		}
		return nil
	})
	var next string
	eventually(t, "the new leader holding the stream to the hub", convergeTimeout, func() error {
		var err error
		if next, err = in.Provider.AgentLeader(ctx, member); err != nil {
			return err
		}
		return agentConnected(ctx, in, member, next)
	})
	// On the testbed the killed replica is restarted a second later under
	// the same name and may win the expired Lease as well as the standby;
	// either way a new process leads.
	t.Logf("%s's agent %s leads now", member, next)
	// Past the grace period and the toleration the hub would have acted.
	consistently(t, "every member Ready and untainted", 10*time.Second, func() error { return membersReady(ctx, in) })
	noEviction(t, "killing "+member+"'s leading agent", health, placements)

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](3) })
	eventually(t, "the scale to 3 reaching every member (through "+member+"'s new leader)", convergeTimeout, deploymentsRolledOut(in, "web", want(each(in.Members, 3))))
	after, err := deploymentIDs(ctx, in, "web", member)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, false); err != nil {
		t.Fatalf("the agent failover recreated %s's Deployment: %v", member, err)
	}
	eventually(t, "MyApp web Ready with 3 replicas per member", convergeTimeout, appReady(in, "web", each(in.Members, 3)))
}

// agentConnected checks that the hub sees member Connected through the
// agent replica called instance.
func agentConnected(ctx context.Context, in SpecInput, member, instance string) error {
	mc := &flotillav1.MemberCluster{}
	if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: member}, mc); err != nil {
		return err
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionConnected); c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("MemberCluster %s Connected %s", member, conditionString(c))
	}
	if mc.Status.Agent == nil || mc.Status.Agent.Instance != instance {
		return fmt.Errorf("MemberCluster %s status.agent %+v, want instance %s", member, mc.Status.Agent, instance)
	}
	return nil
}

// HubRestartSpec: restarting the hub (SIGTERM and a new process, as a
// rolling update does) recreates nothing and rewrites nothing: every
// member's Deployment and every Work keep their UID and generation while a
// new hub process takes the lead and the members reconnect to it, and the
// new hub then carries a scale to every member. With the default timings
// and failover policy no member turns not Ready and nothing is evicted:
// the new hub counts the grace from when it leads, and agents reconnect
// within their 5s backoff cap.
func HubRestartSpec(t *testing.T, in SpecInput) {
	hubRestartSpec(t, in, "restarting the hub", in.Provider.RestartHub)
}

// HubKillSpec is HubRestartSpec with the hub killed (SIGKILL, or its pod
// deleted at once): it cannot release its Lease, so the new process waits
// the Lease out before it leads, and only then starts counting the
// members' grace.
func HubKillSpec(t *testing.T, in SpecInput) {
	hubRestartSpec(t, in, "killing the hub", in.Provider.KillHub)
}

func hubRestartSpec(t *testing.T, in SpecInput, what string, restart func(context.Context) error) {
	ctx := context.Background()
	app := newMyApp(in, "web", 2, duplicated())
	createMyApp(t, in, app)
	w := each(in.Members, 2)
	eventually(t, "Deployment web with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(w)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", w))
	holder, _, err := leaseHolder(ctx, in.Provider.Hub(), systemNamespace, hubLease)
	if err != nil {
		t.Fatalf("reading the hub's Lease: %v", err)
	}
	deps, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	works, err := workIDs(ctx, in, "web")
	if err != nil {
		t.Fatal(err)
	}

	health := recordMemberHealth(t, in)
	placements := recordPlacements(t, in, "web")
	stopped := time.Now()
	if err := restart(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	eventually(t, "a new hub process leading", convergeTimeout, func() error {
		h, _, err := leaseHolder(ctx, in.Provider.Hub(), systemNamespace, hubLease)
		if err != nil {
			return err
		}
		if h == "" || h == holder {
			return fmt.Errorf("hub Lease holder %q, was %q", h, holder)
		}
		return nil
	})
	eventually(t, "every member Ready with the new hub", convergeTimeout, func() error { return membersReady(ctx, in) })
	eventually(t, "MyApp web Ready after the hub restart", convergeTimeout, appReady(in, "web", w))
	unchanged := func() error {
		nowDeps, err := deploymentIDs(ctx, in, "web", in.Members...)
		if err != nil {
			return err
		}
		if err := sameUIDs(deps, nowDeps, true); err != nil {
			return fmt.Errorf("member Deployments: %w", err)
		}
		nowWorks, err := workIDs(ctx, in, "web")
		if err != nil {
			return err
		}
		if err := sameUIDs(works, nowWorks, true); err != nil {
			return fmt.Errorf("Works: %w", err)
		}
		return nil
	}
	consistently(t, "every member Deployment and Work unchanged (same UID and generation) after the hub restart", 10*time.Second, unchanged)
	t.Logf("%s: every member Ready with the new hub %s later", what, time.Since(stopped).Round(100*time.Millisecond))
	noEviction(t, what, health, placements)

	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Replicas = ptr.To[int32](3) })
	eventually(t, "the new hub carrying a scale to 3 to every member", convergeTimeout, deploymentsRolledOut(in, "web", want(each(in.Members, 3))))
	nowDeps, err := deploymentIDs(ctx, in, "web", in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(deps, nowDeps, false); err != nil {
		t.Fatalf("member Deployments recreated after the hub restart: %v", err)
	}
}

// failoverApp is 6 replicas Divided equally over the members, failing
// over 2s after the hub taints a cluster unreachable; the Graciously
// purged Work stays until its replacements are available.
func failoverApp(in SpecInput, failback bool) *flotillav1.MyApp {
	weights := make([]int64, len(in.Members))
	for i := range weights {
		weights[i] = 1
	}
	app := newMyApp(in, "web", 6, staticWeights(in.Members, weights...))
	app.Spec.Failover = &flotillav1.FailoverPolicy{
		ClusterUnreachable: &flotillav1.ClusterFailover{TolerationSeconds: ptr.To[int32](2), PurgeMode: flotillav1.PurgeGraciously},
		Failback:           &flotillav1.FailbackPolicy{Enabled: ptr.To(failback), StabilizationWindowSeconds: ptr.To[int32](failbackWindow)},
	}
	return app
}

// failbackWindow is the failback spec's stabilization window, in seconds.
const failbackWindow = 5

// stopMember stops a member's control plane and makes sure it runs again
// when the spec ends, whatever happened (after a dump of the state while
// it was down, if the spec failed).
func stopMember(t *testing.T, in SpecInput, name string) (restart func()) {
	t.Helper()
	ctx := context.Background()
	var once sync.Once
	restart = func() {
		once.Do(func() {
			if err := in.Provider.StartMember(ctx, name); err != nil {
				t.Errorf("starting %s again: %v", name, err)
				return
			}
			if err := poll(ctx, convergeTimeout, func() error { return memberReady(ctx, in, name) }); err != nil {
				t.Errorf("%s not Ready again after its restart: %v", name, err)
			}
		})
	}
	if err := in.Provider.StopMember(ctx, name); err != nil {
		t.Fatalf("stopping %s: %v", name, err)
	}
	t.Logf("stopped %s's control plane", name)
	t.Cleanup(func() {
		dumpIfFailed(t, in, name+"-down")
		restart()
	})
	return restart
}

// failedOver waits until the lost member's replicas run Ready in the
// others: the MyApp records the member as evicted (ClusterUnreachable),
// places 3 replicas in each of the others, their Deployments run them, the
// lost member's Work is purged once they are available, and the MyApp is
// Ready on the others alone.
func failedOver(t *testing.T, in SpecInput, lost string, others []string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, lost+" not Ready and tainted unreachable on the hub", convergeTimeout, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: lost}, mc); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); c == nil || c.Status == metav1.ConditionTrue {
			return fmt.Errorf("Ready %s", conditionString(c))
		}
		for _, taint := range mc.Spec.Taints {
			if taint.Key == flotillav1.TaintClusterUnreachable && taint.TimeAdded != nil {
				return nil
			}
		}
		return fmt.Errorf("taints %v", mc.Spec.Taints)
	})
	eventually(t, "MyApp web showing "+lost+" as lost (status.placement.evicted, status.clusters phase Lost or Evicting)", convergeTimeout, func() error {
		app, err := getMyApp(ctx, in, "web")
		if err != nil {
			return err
		}
		if app.Status.Placement == nil {
			return fmt.Errorf("no status.placement")
		}
		evicted := slices.ContainsFunc(app.Status.Placement.Evicted, func(e flotillav1.EvictedCluster) bool {
			return e.Name == lost && e.Reason == "ClusterUnreachable"
		})
		listed := slices.ContainsFunc(app.Status.Clusters, func(c flotillav1.ClusterAppStatus) bool {
			return c.Name == lost && (c.Phase == flotillav1.ClusterAppLost || c.Phase == flotillav1.ClusterAppEvicting)
		})
		if !evicted || !listed {
			return fmt.Errorf("status.placement.evicted %+v, status.clusters %+v", app.Status.Placement.Evicted, app.Status.Clusters)
		}
		return nil
	})
	moved := each(others, 3)
	eventually(t, lost+"'s replicas placed on "+strings.Join(others, " and "), convergeTimeout, placementIs(in, "web", moved))
	eventually(t, "3 ready replicas in each of "+strings.Join(others, " and "), convergeTimeout, deploymentsIn(in, others, "web", want(moved)))
	eventually(t, lost+"'s Work purged once the replacements are available", convergeTimeout, worksOnlyIn(in, "web", others...))
	eventually(t, "MyApp web Ready on "+strings.Join(others, " and ")+" with "+lost+" listed as Lost", convergeTimeout, appReady(in, "web", moved, lost))
}

func without(list []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(s string) bool { return s == name })
}

// FailoverSpec: with member-2's control plane stopped, its agent closes
// its stream, the hub marks it not Ready and taints it unreachable, and
// after the MyApp's 2s toleration its replicas are placed on, and run
// Ready in, the other members, whose Deployments (and Works) are the same
// objects as before; the MyApp records member-2 as evicted. Failback is
// off here: when member-2 comes back its agent removes the Deployment the
// hub no longer wants there, and nothing moves back.
func FailoverSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	lost, others := in.Members[1], without(in.Members, in.Members[1])
	createMyApp(t, in, failoverApp(in, false))
	even := each(in.Members, 2)
	eventually(t, "Deployments with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(even)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", even))
	deps, err := deploymentIDs(ctx, in, "web", others...)
	if err != nil {
		t.Fatal(err)
	}
	works, err := workIDs(ctx, in, "web")
	if err != nil {
		t.Fatal(err)
	}
	delete(works, lost)

	restart := stopMember(t, in, lost)
	failedOver(t, in, lost, others)
	checkKept(t, in, deps, works, others)

	restart()
	eventually(t, lost+" back without the Deployment it lost (its agent prunes what the hub no longer wants there)", convergeTimeout, deploymentsRolledOut(in, "web", want(each(others, 3))))
	consistently(t, "nothing failing back with failback disabled", 2*failbackWindow*time.Second, placementIs(in, "web", each(others, 3)))
}

// checkKept fails the spec when the others' Deployments or Works were
// recreated.
func checkKept(t *testing.T, in SpecInput, deps, works map[string]objectID, others []string) {
	t.Helper()
	ctx := context.Background()
	nowDeps, err := deploymentIDs(ctx, in, "web", others...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(deps, nowDeps, false); err != nil {
		t.Fatalf("Deployments of the members that stayed were recreated: %v", err)
	}
	nowWorks, err := workIDs(ctx, in, "web")
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(works, nowWorks, false); err != nil {
		t.Fatalf("Works of the members that stayed were recreated: %v", err)
	}
}

// FailbackSpec: member-2 is lost and its replicas fail over as in
// FailoverSpec; when its control plane is started again and it has been
// Ready for the 5s stabilization window, its replicas return (2/2/2 ready
// again) in exactly one placement change, not before the window, and
// nothing else churns: the other members' Deployments and Works are the
// objects they were before the failover.
func FailbackSpec(t *testing.T, in SpecInput) {
	requireMembers(t, in, 3)
	ctx := context.Background()
	lost, others := in.Members[1], without(in.Members, in.Members[1])
	createMyApp(t, in, failoverApp(in, true))
	even := each(in.Members, 2)
	eventually(t, "Deployments with 2 ready replicas in every member", convergeTimeout, deploymentsRolledOut(in, "web", want(even)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", even))
	deps, err := deploymentIDs(ctx, in, "web", others...)
	if err != nil {
		t.Fatal(err)
	}
	works, err := workIDs(ctx, in, "web")
	if err != nil {
		t.Fatal(err)
	}
	delete(works, lost)

	restart := stopMember(t, in, lost)
	failedOver(t, in, lost, others)

	rec := recordPlacements(t, in, "web")
	restart()
	mc := &flotillav1.MemberCluster{}
	if err := in.Provider.Hub().Get(ctx, client.ObjectKey{Name: lost}, mc); err != nil {
		t.Fatal(err)
	}
	readySince := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady).LastTransitionTime
	t.Logf("%s Ready again since %s", lost, readySince.UTC().Format(time.RFC3339))

	eventually(t, "replicas failing back to "+lost+" (placement 2/2/2)", convergeTimeout, placementIs(in, "web", even))
	eventually(t, "Deployments with 2 ready replicas in every member after the failback", convergeTimeout, deploymentsRolledOut(in, "web", want(even)))
	eventually(t, "MyApp web Ready on every member after the failback", convergeTimeout, appReady(in, "web", even))
	eventually(t, "a Work per member after the failback", convergeTimeout, worksOnlyIn(in, "web", in.Members...))
	consistently(t, "placement 2/2/2 holding after the failback", 2*failbackWindow*time.Second, placementIs(in, "web", even))

	app, err := getMyApp(ctx, in, "web")
	if err != nil {
		t.Fatal(err)
	}
	// Both times come from the hub's clock, at the second.
	if at := app.Status.Placement.LastScheduleTime; at == nil || at.Time.Before(readySince.Add((failbackWindow-1)*time.Second)) {
		t.Fatalf("the failback decision (%v) came before %s had been Ready for the %ds window (since %s)", at, lost, failbackWindow, readySince.UTC().Format(time.RFC3339))
	}
	if changes := rec.stop(); len(changes) != 1 {
		t.Fatalf("%d placement changes while %s came back, want 1 (the failback):\n%s", len(changes), lost, strings.Join(changes, "\n"))
	}
	checkKept(t, in, deps, works, others)
}

// placementRecorder watches a MyApp and records every distinct placement
// decision (clusters and replicas, evictions) it goes through.
type placementRecorder struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	seen   []string
	err    error
}

// recordPlacements starts recording the MyApp's placement changes from
// now on.
func recordPlacements(t *testing.T, in SpecInput, name string) *placementRecorder {
	t.Helper()
	wc, err := client.NewWithWatch(in.Provider.HubConfig(), client.Options{Scheme: fleet.Scheme()})
	if err != nil {
		t.Fatalf("a watching client of the hub: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	app, err := getMyApp(ctx, in, name)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &placementRecorder{cancel: cancel, done: make(chan struct{})}
	last, rv := decisionString(app.Status.Placement), app.ResourceVersion
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &flotillav1.MyAppList{}, client.InNamespace(in.Namespace), &client.ListOptions{Raw: &metav1.ListOptions{
				ResourceVersion: rv, FieldSelector: "metadata.name=" + name,
			}})
			if err != nil {
				if ctx.Err() == nil {
					r.fail(fmt.Errorf("watching MyApp %s: %w", name, err))
				}
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() == nil {
						r.fail(fmt.Errorf("watching MyApp %s: %v", name, apierrors.FromObject(ev.Object)))
					}
					w.Stop()
					return
				}
				got, ok := ev.Object.(*flotillav1.MyApp)
				if !ok {
					continue
				}
				rv = got.ResourceVersion
				if d := decisionString(got.Status.Placement); d != last {
					r.mu.Lock()
					r.seen = append(r.seen, fmt.Sprintf("%s -> %s", last, d))
					r.mu.Unlock()
					last = d
				}
			}
			w.Stop()
		}
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

func (r *placementRecorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

// stop ends the recording and returns the changes seen, or the watch's
// error as the only entry.
func (r *placementRecorder) stop() []string {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return []string{r.err.Error()}
	}
	return slices.Clone(r.seen)
}

// decisionString renders what a placement decision decides: clusters with
// replicas, evictions with their time, the affinity group.
func decisionString(d *flotillav1.PlacementDecision) string {
	if d == nil {
		return "{}"
	}
	var parts []string
	for _, c := range d.Clusters {
		parts = append(parts, fmt.Sprintf("%s=%d", c.Name, c.Replicas))
	}
	s := "{" + strings.Join(parts, " ")
	for _, e := range d.Evicted {
		s += fmt.Sprintf(" evicted:%s=%d(%s@%s)", e.Name, e.Replicas, e.Reason, e.EvictionTime.UTC().Format(time.RFC3339))
	}
	if d.AffinityName != "" {
		s += " affinity:" + d.AffinityName
	}
	return s + "}"
}
