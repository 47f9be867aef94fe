package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// The images the MyApps start with and change to (nothing runs them).
const (
	imageV1 = "registry.example.com/scale/web:1.0"
	imageV2 = "registry.example.com/scale/web:2.0"
)

type scenarios struct {
	e    *env
	r    *report
	logf func(string, ...any)
	// appNames are the Divided MyApps of scenario 2, in creation order.
	appNames []string
}

func (s *scenarios) run(ctx context.Context) error {
	o := s.e.o
	// A hub that dies ends the run at once, saying so, instead of every
	// wait running into its timeout.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.e.onDeath = func(err error) { cancel(err) }
	defer func() { s.e.onDeath = nil }()
	steps := []struct {
		n  int
		fn func(context.Context) error
	}{{1, s.join}, {2, s.divided}, {4, s.memberLoss}, {6, s.imageChange}, {5, s.hubRestart}, {3, s.duplicated}}
	for _, st := range steps {
		if !o.scenarios[st.n] {
			continue
		}
		if err := st.fn(ctx); err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				err = cause
			}
			return fmt.Errorf("scenario %d: %w", st.n, err)
		}
		// The files so far, so a long run stopped later keeps them.
		if err := s.r.save(o); err != nil {
			return err
		}
	}
	return nil
}

// sampler records the hub process's RSS every interval: the peak, and the
// samples with a value the caller attaches (members Ready, MyApps created)
// for the plot.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak int64
	pts  [][2]float64
}

func (s *scenarios) sample(x func() float64) *sampler {
	sm := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sm.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			rss := rssOf(s.e.hub.Pid())
			sm.mu.Lock()
			sm.peak = max(sm.peak, rss)
			if x != nil {
				sm.pts = append(sm.pts, [2]float64{x(), float64(rss)})
			}
			sm.mu.Unlock()
			select {
			case <-sm.stop:
				return
			case <-t.C:
			}
		}
	}()
	return sm
}

func (sm *sampler) end() (peak int64, pts [][2]float64) {
	close(sm.stop)
	<-sm.done
	return sm.peak, sm.pts
}

// settledRSS waits d and reads the hub's RSS (its heap settles after a
// burst; what it holds at rest is the figure).
func (s *scenarios) settledRSS(ctx context.Context, d time.Duration) int64 {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return rssOf(s.e.hub.Pid())
}

// waitHubReady polls the hub's /readyz until it answers 200.
func (s *scenarios) waitHubReady(ctx context.Context) error {
	probe := "http://" + s.e.probeAddr + "/readyz"
	deadline := time.Now().Add(s.e.o.timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(probe); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the hub's %s did not answer 200 within %s", probe, s.e.o.timeout)
}

// join is scenario 1: the MemberClusters exist, the hub runs, and every
// simulated agent connects within the jitter.
func (s *scenarios) join(ctx context.Context) error {
	o := s.e.o
	t0 := time.Now()
	members, err := s.e.createMembers(ctx, o.members, o.groupSize)
	if err != nil {
		return err
	}
	s.logf("created %d MemberClusters with agent certificates in %s", o.members, time.Since(t0).Round(time.Millisecond))
	if err := s.e.startHub(); err != nil {
		return err
	}
	if err := s.waitHubReady(ctx); err != nil {
		return err
	}
	before := s.settledRSS(ctx, 5*time.Second)
	memBefore := s.e.memAfterGC()
	s.logf("hub ready; RSS %s with %d MemberClusters and no agent", mib(before), o.members)

	var ready atomic.Int64
	g := s.e.track.expect("member", s.e.members, func(ob client.Object) bool {
		if memberReady(ob) {
			ready.Add(1)
			return true
		}
		return false
	})
	sm := s.sample(func() float64 { return float64(ready.Load()) })
	start := time.Now()
	if err := s.e.startAgents(members, o.procs, o.jitter); err != nil {
		sm.end()
		return err
	}
	s.logf("started %d agent processes; %d members connect within %s", o.procs, o.members, o.jitter)
	met, err := s.e.track.wait(ctx, g, "MemberClusters Ready", o.timeout)
	peak, pts := sm.end()
	if err != nil {
		return err
	}
	last := latest(met)
	after := s.settledRSS(ctx, 10*time.Second)
	memAfter := s.e.memAfterGC()
	if p := s.e.saveHeapProfile("hub-heap-joined.pprof"); p != "" {
		s.logf("hub heap profile with every agent connected: %s (-keep keeps it)", p)
	}
	st, err := s.e.agents.stats()
	if err != nil {
		return err
	}
	allReady := last.Sub(start)
	perAgent := float64(after-before) / float64(o.members)
	s.logf("all %d members Ready %s after the agents started (jitter %s); hub RSS %s (peak %s); %.1f KiB per connected agent; %d streams opened",
		o.members, allReady.Round(time.Millisecond), o.jitter, mib(after), mib(peak), perAgent/1024, st.Connects)
	r := s.r
	r.add(1, "members", "", float64(o.members), "")
	r.add(1, "all-ready-s", "s", allReady.Seconds(), fmt.Sprintf("connect jitter %s", o.jitter))
	r.add(1, "after-jitter-s", "s", (allReady - o.jitter).Seconds(), "all Ready minus the jitter window")
	r.add(1, "hub-rss-before-mib", "MiB", mibF(before), "MemberClusters exist, no agent connected")
	r.add(1, "hub-rss-mib", "MiB", mibF(after), "all connected, at rest")
	r.add(1, "hub-rss-peak-mib", "MiB", mibF(peak), "")
	r.add(1, "kib-per-agent", "KiB", perAgent/1024, "hub RSS after - before, per agent; goal < 100 KiB")
	n := float64(o.members)
	r.add(1, "heap-kib-per-agent", "KiB", (memAfter.heap+memAfter.stacks-memBefore.heap-memBefore.stacks)/n/1024, "the same from the hub's heap in use plus goroutine stacks after a GC (RSS also holds garbage not yet collected)")
	r.add(1, "stack-kib-per-agent", "KiB", (memAfter.stacks-memBefore.stacks)/n/1024, "of which goroutine stacks")
	r.add(1, "goroutines-per-agent", "", (memAfter.goroutines-memBefore.goroutines)/n, "")
	r.add(1, "streams-opened", "", float64(st.Connects), "sync streams the agents opened (more than members: some were dropped and opened again)")
	r.add(1, "agent-procs-rss-mib", "MiB", mibF(st.RSSBytes), "all simulated agents together")
	r.rssMembers = pts
	return nil
}

// appYAML is a Divided MyApp over 3 of the 5 members of group.
const appYAML = `
apiVersion: flotilla.dev/v1alpha1
kind: MyApp
metadata:
  name: %s
  namespace: %s
spec:
  image: %s
  replicas: 3
  placement:
    clusterAffinity:
      labelSelector:
        matchLabels: {%s: %s}
    spreadConstraints:
    - spreadByField: cluster
      minGroups: 3
      maxGroups: 3
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
  failover:
    clusterUnreachable:
      tolerationSeconds: %d
      purgeMode: Graciously
      gracePeriodSeconds: 300
`

// dupYAML is a MyApp Duplicated to every member.
const dupYAML = `
apiVersion: flotilla.dev/v1alpha1
kind: MyApp
metadata:
  name: %s
  namespace: %s
spec:
  image: %s
  replicas: 1
  placement:
    replicaScheduling:
      replicaSchedulingType: Duplicated
`

func decodeApp(text string) (*flotillav1.MyApp, error) {
	a := &flotillav1.MyApp{}
	if err := yaml.UnmarshalStrict([]byte(text), a); err != nil {
		return nil, fmt.Errorf("the harness's MyApp: %w", err)
	}
	return a, nil
}

// createAt creates apps at rate per second from a pool of writers and
// returns when each create was sent.
func (s *scenarios) createAt(ctx context.Context, apps []*flotillav1.MyApp, rate float64) (map[string]time.Time, error) {
	sent := make(map[string]time.Time, len(apps))
	var mu sync.Mutex
	var firstErr error
	work := make(chan *flotillav1.MyApp, 64)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				t := time.Now()
				err := s.e.c.Create(ctx, a)
				mu.Lock()
				sent[a.Name] = t
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("creating MyApp %s: %w", a.Name, err)
				}
				mu.Unlock()
			}
		}()
	}
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	for _, a := range apps {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		next = next.Add(interval)
		work <- a
	}
	close(work)
	wg.Wait()
	return sent, firstErr
}

// divided is scenario 2.
func (s *scenarios) divided(ctx context.Context) error {
	o := s.e.o
	groups := o.members / o.groupSize
	apps := make([]*flotillav1.MyApp, o.apps)
	s.appNames = make([]string, o.apps)
	for i := range apps {
		name := fmt.Sprintf("app-%05d", i)
		a, err := decodeApp(fmt.Sprintf(appYAML, name, appNamespace, imageV1, groupLabel, memberGroup((i%groups)*o.groupSize, o.groupSize), o.toleration))
		if err != nil {
			return err
		}
		apps[i], s.appNames[i] = a, name
	}
	g := s.e.track.expect("app", s.appNames, appReady)
	reqBefore, err := s.e.requestCounts(ctx)
	if err != nil {
		return err
	}
	cpuBefore := cpuOf(s.e.hub.Pid())
	others := s.e.otherCPU()
	metricsBefore := s.e.hubMetrics()
	start := time.Now()
	// RSS against time: both the creates and the drain after the last
	// one show (against MyApps created, the drain is a vertical line).
	sm := s.sample(func() float64 { return time.Since(start).Seconds() })
	s.logf("creating %d MyApps at %g/s (Divided over 3 of %d members of a group, %d groups)", o.apps, o.rate, o.groupSize, groups)
	sent, err := s.createAt(ctx, apps, o.rate)
	if err != nil {
		sm.end()
		return err
	}
	lastCreate := latest(sent)
	s.logf("created in %s; waiting for all to be Ready", lastCreate.Sub(start).Round(time.Millisecond))
	met, err := s.e.track.wait(ctx, g, "MyApps Ready", o.timeout)
	peak, pts := sm.end()
	if err != nil {
		return err
	}
	end := latest(met)
	wall := end.Sub(start)
	cpu := cpuOf(s.e.hub.Pid()) - cpuBefore
	reqAfter, err := s.e.requestCounts(ctx)
	if err != nil {
		return err
	}
	lat := make([]time.Duration, 0, len(met))
	var buckets [][2]float64
	bucket := max(o.apps/20, 1)
	var cur []time.Duration
	for i, n := range s.appNames {
		d := met[n].Sub(sent[n])
		lat = append(lat, d)
		cur = append(cur, d)
		if len(cur) == bucket || i == len(s.appNames)-1 {
			buckets = append(buckets, [2]float64{float64(i + 1), percentile(cur, 50).Seconds()})
			cur = nil
		}
	}
	// Where the time goes: created -> the last of its Works applied in a
	// member, and from there -> Ready (status back through the hub).
	applied, err := s.e.agents.applied()
	if err != nil {
		return err
	}
	var toApplied, appliedToReady []time.Duration
	for _, n := range s.appNames {
		if t, ok := applied[flotillav1.WorkName(appNamespace, n)]; ok {
			at := time.Unix(0, t)
			toApplied = append(toApplied, at.Sub(sent[n]))
			appliedToReady = append(appliedToReady, met[n].Sub(at))
		}
	}
	metricsAfter := s.e.hubMetrics()
	if p := s.e.saveHeapProfile("hub-heap-apps.pprof"); p != "" {
		s.logf("hub heap profile with every MyApp Ready: %s (-keep keeps it)", p)
	}
	rest := s.settledRSS(ctx, 10*time.Second)
	st, err := s.e.agents.stats()
	if err != nil {
		return err
	}
	r := s.r
	// The hub's own account: reconciles per MyApp, their time, and the
	// time requests waited in the work queues.
	delta := func(name string, m ...string) float64 {
		return metricSum(metricsAfter, name, m...) - metricSum(metricsBefore, name, m...)
	}
	for _, q := range []struct{ controller, queue string }{{"myapp", "myapp"}, {"", "work-status"}} {
		if q.controller != "" {
			n := delta("controller_runtime_reconcile_total", `controller="`+q.controller+`"`)
			if n > 0 {
				r.add(2, q.controller+"-reconciles-per-app", "", n/float64(o.apps), "")
				r.add(2, q.controller+"-reconcile-mean-ms", "ms", 1000*delta("controller_runtime_reconcile_time_seconds_sum", `controller="`+q.controller+`"`)/n, "")
			}
		}
		if n := delta("workqueue_queue_duration_seconds_count", `name="`+q.queue+`"`); n > 0 {
			r.add(2, q.queue+"-queue-wait-mean-ms", "ms", 1000*delta("workqueue_queue_duration_seconds_sum", `name="`+q.queue+`"`)/n, fmt.Sprintf("%.0f items", n))
		}
	}
	r.add(2, "apps", "", float64(o.apps), fmt.Sprintf("%d Works", st.Works))
	r.add(2, "ready-p50-s", "s", percentile(lat, 50).Seconds(), "MyApp created -> Ready")
	r.add(2, "ready-p90-s", "s", percentile(lat, 90).Seconds(), "")
	r.add(2, "ready-p99-s", "s", percentile(lat, 99).Seconds(), "")
	r.add(2, "to-applied-p50-s", "s", percentile(toApplied, 50).Seconds(), "created -> its last Work applied in a member")
	r.add(2, "to-applied-p99-s", "s", percentile(toApplied, 99).Seconds(), "")
	r.add(2, "applied-to-ready-p50-s", "s", percentile(appliedToReady, 50).Seconds(), fmt.Sprintf("last Work applied -> MyApp Ready (the member reports ready after %s)", o.readyDelay))
	r.add(2, "applied-to-ready-p99-s", "s", percentile(appliedToReady, 99).Seconds(), "")
	r.add(2, "last-create-to-all-ready-s", "s", end.Sub(lastCreate).Seconds(), "goal < 300 s")
	r.add(2, "create-s", "s", lastCreate.Sub(start).Seconds(), fmt.Sprintf("at %g/s", o.rate))
	r.add(2, "hub-rss-peak-mib", "MiB", mibF(peak), "")
	r.add(2, "hub-rss-mib", "MiB", mibF(rest), "at rest after; goal < 1024 MiB at full size")
	r.add(2, "hub-cpu-cores", "cores", cpu.Seconds()/wall.Seconds(), "hub CPU time / wall time, first create to all Ready")
	for _, name := range []string{"kube-apiserver", "etcd", "agents", "harness"} {
		r.add(2, name+"-cpu-cores", "cores", (s.e.otherCPU()[name]-others[name]).Seconds()/wall.Seconds(), "the same, beside the hub on this machine")
	}
	r.add(2, "etcd-db-mib", "MiB", mibF(s.e.etcdDBSize()), "")
	verbs := make([]string, 0, len(reqAfter))
	for v := range reqAfter {
		verbs = append(verbs, v)
	}
	sort.Strings(verbs)
	for _, v := range verbs {
		if d := reqAfter[v] - reqBefore[v]; d > 0 {
			r.add(2, "apiserver-"+v+"-per-s", "/s", d/wall.Seconds(), "hub apiserver, all clients (the harness's creates included)")
		}
	}
	r.rssApps = pts
	r.latencyApps = buckets
	s.logf("all %d MyApps Ready %s after the last create; p50 %s p99 %s; hub RSS %s (peak %s), %.2f cores; %d Works held by the members",
		o.apps, end.Sub(lastCreate).Round(time.Millisecond), percentile(lat, 50).Round(time.Millisecond), percentile(lat, 99).Round(time.Millisecond),
		mib(rest), mib(peak), cpu.Seconds()/wall.Seconds(), st.Works)
	return nil
}

// duplicated is scenario 3.
func (s *scenarios) duplicated(ctx context.Context) error {
	o := s.e.o
	apps := make([]*flotillav1.MyApp, o.dupApps)
	names := make([]string, o.dupApps)
	for i := range apps {
		names[i] = fmt.Sprintf("dup-%04d", i)
		a, err := decodeApp(fmt.Sprintf(dupYAML, names[i], appNamespace, imageV1))
		if err != nil {
			return err
		}
		apps[i] = a
	}
	before, err := s.e.agents.stats()
	if err != nil {
		return err
	}
	g := s.e.track.expect("app", names, appReady)
	metricsBefore := s.e.hubMetrics()
	sm := s.sample(nil)
	start := time.Now()
	s.logf("creating %d MyApps Duplicated to all %d members (%d Works)", o.dupApps, o.members, o.dupApps*o.members)
	if _, err := s.createAt(ctx, apps, o.rate); err != nil {
		sm.end()
		return err
	}
	met, err := s.e.track.wait(ctx, g, "Duplicated MyApps Ready", o.timeout)
	peak, _ := sm.end()
	// The hub's writes and reconciles while they converged, or until the
	// wait gave up (counters of the same hub process: scenario 5, if it
	// ran, came before).
	metricsAfter := s.e.hubMetrics()
	delta := func(name string, m ...string) float64 {
		return metricSum(metricsAfter, name, m...) - metricSum(metricsBefore, name, m...)
	}
	reconciles := delta("controller_runtime_reconcile_total", `controller="myapp"`)
	workWrites := delta("flotilla_work_status_writes_total", `result="written"`)
	appWrites := delta("flotilla_myapp_status_writes_total")
	s.logf("during scenario 3: %.0f MyApp reconciles, %.0f Work status writes, %.0f MyApp status writes", reconciles, workWrites, appWrites)
	if err != nil {
		return err
	}
	s.r.add(3, "myapp-reconciles", "", reconciles, fmt.Sprintf("of every MyApp (%d others exist)", len(s.appNames)))
	s.r.add(3, "work-status-writes", "", workWrites, "")
	s.r.add(3, "myapp-status-writes", "", appWrites, "")
	all := latest(met).Sub(start)
	after, err := s.e.agents.stats()
	if err != nil {
		return err
	}
	rest := s.settledRSS(ctx, 10*time.Second)
	s.r.add(3, "dup-apps", "", float64(o.dupApps), fmt.Sprintf("%d Works more in the members", after.Works-before.Works))
	s.r.add(3, "all-ready-s", "s", all.Seconds(), "first create -> every Duplicated MyApp Ready")
	s.r.add(3, "hub-rss-peak-mib", "MiB", mibF(peak), "")
	s.r.add(3, "hub-rss-mib", "MiB", mibF(rest), "at rest after")
	s.logf("all %d Duplicated MyApps Ready in %s; %d Works more; hub RSS %s (peak %s)", o.dupApps, all.Round(time.Millisecond), after.Works-before.Works, mib(rest), mib(peak))
	return nil
}

// memberLoss is scenario 4: the agent of the member with the most apps
// stops.
func (s *scenarios) memberLoss(ctx context.Context) error {
	o := s.e.o
	victim, on := "", []string(nil)
	for _, m := range s.e.members[:min(len(s.e.members), 3*o.groupSize)] {
		if apps := s.e.track.appsOn(m); len(apps) > len(on) {
			victim, on = m, apps
		}
	}
	if victim == "" {
		return fmt.Errorf("no member runs any MyApp's replicas")
	}
	// Only the Divided apps fail over; Duplicated ones have nowhere to go.
	on = slices.DeleteFunc(on, func(n string) bool { return n[:4] == "dup-" })
	g := s.e.track.expect("app", on, runsWithout(victim))
	readyAgain := s.e.track.expect("app", on, appReadyWithout(victim))
	notReady := s.e.track.expect("member", []string{victim}, func(o client.Object) bool { return !memberReady(o) })
	tainted := s.e.track.expect("member", []string{victim}, func(o client.Object) bool {
		for _, t := range o.(*flotillav1.MemberCluster).Spec.Taints {
			if t.Key == flotillav1.TaintClusterUnreachable {
				return true
			}
		}
		return false
	})
	start := time.Now()
	if err := s.e.agents.member("stop", victim); err != nil {
		return err
	}
	s.logf("stopped the agent of %s, which runs replicas of %d MyApps", victim, len(on))
	met, err := s.e.track.wait(ctx, g, "MyApps running without "+victim, o.timeout)
	if err != nil {
		return err
	}
	again, err := s.e.track.wait(ctx, readyAgain, "MyApps Ready without "+victim, o.timeout)
	if err != nil {
		return err
	}
	lat := make([]time.Duration, 0, len(met))
	for _, t := range met {
		lat = append(lat, t.Sub(start))
	}
	all := latest(met).Sub(start)
	budget := o.grace + time.Duration(o.toleration)*time.Second + 5*time.Second
	s.r.add(4, "lost-member-apps", "", float64(len(on)), victim)
	s.r.add(4, "all-moved-s", "s", all.Seconds(), fmt.Sprintf("agent stopped -> every replica of its MyApps ready in other members; goal < grace %s + toleration %ds + 5 s = %s", o.grace, o.toleration, budget))
	s.r.add(4, "moved-p50-s", "s", percentile(lat, 50).Seconds(), "")
	// Where the time went: the member's Ready going False, its taint, and
	// the apps after the taint plus their toleration.
	if t, err := s.e.track.wait(ctx, notReady, victim+" not Ready", time.Second); err == nil {
		s.r.add(4, "to-not-ready-s", "s", t[victim].Sub(start).Seconds(), "agent stopped -> MemberCluster Ready not True")
	}
	if t, err := s.e.track.wait(ctx, tainted, victim+" tainted", time.Second); err == nil {
		s.r.add(4, "to-tainted-s", "s", t[victim].Sub(start).Seconds(), "agent stopped -> tainted unreachable")
		due := t[victim].Add(time.Duration(o.toleration) * time.Second)
		s.r.add(4, "after-toleration-s", "s", latest(met).Sub(due).Seconds(), "taint + toleration -> every replica ready elsewhere")
	}
	s.r.add(4, "all-ready-again-s", "s", latest(again).Sub(start).Seconds(), "agent stopped -> every such MyApp's Ready condition True again (after the lost member's Work is purged)")
	s.logf("the replicas of all %d MyApps of %s ready elsewhere %s after its agent stopped (budget %s); all Ready again after %s", len(on), victim, all.Round(time.Millisecond), budget, latest(again).Sub(start).Round(time.Millisecond))
	// Bring it back so later scenarios see the whole fleet.
	if err := s.e.agents.member("start", victim); err != nil {
		return err
	}
	back := s.e.track.expect("member", []string{victim}, memberReady)
	_, err = s.e.track.wait(ctx, back, victim+" Ready again", o.timeout)
	return err
}

// imageChange is scenario 6: the image of the first -image-apps MyApps
// changes at once.
func (s *scenarios) imageChange(ctx context.Context) error {
	o := s.e.o
	names := s.appNames[:o.imageApps]
	want := 0
	for _, n := range names {
		if a := s.e.track.app(n); a != nil {
			for _, c := range a.Status.Clusters {
				if c.Assigned > 0 {
					want++
				}
			}
		}
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"image":%q}}`, imageV2))
	start := time.Now()
	work := make(chan string)
	errs := make(chan error, len(names))
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				a := &flotillav1.MyApp{ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: n}}
				if err := s.e.c.Patch(ctx, a, client.RawPatch(types.MergePatchType, patch)); err != nil {
					errs <- fmt.Errorf("patching MyApp %s: %w", n, err)
				}
			}
		}()
	}
	for _, n := range names {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	patched := time.Since(start)
	s.logf("patched the image of %d MyApps in %s; waiting for %d member Works to hold it", len(names), patched.Round(time.Millisecond), want)
	deadline := time.Now().Add(o.timeout)
	var st imageStats
	for {
		var err error
		if st, err = s.e.agents.image(imageV2); err != nil {
			return err
		}
		if st.Works >= want {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("image change: %d of %d member Works hold %s after %s", st.Works, want, imageV2, o.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	all := time.Unix(0, st.Last).Sub(start)
	s.r.add(6, "image-apps", "", float64(len(names)), fmt.Sprintf("%d member Works", want))
	s.r.add(6, "all-updated-s", "s", all.Seconds(), "first patch -> the last member applied the new image")
	s.r.add(6, "patch-s", "s", patched.Seconds(), "sending the patches (32 at a time)")
	s.logf("all %d member Works hold the new image %s after the first patch", want, all.Round(time.Millisecond))
	return nil
}

// hubRestart is scenario 5: the hub stops and starts again; the agents
// resync and apply nothing again.
func (s *scenarios) hubRestart(ctx context.Context) error {
	o := s.e.o
	before, err := s.e.agents.stats()
	if err != nil {
		return err
	}
	if err := s.e.stopHub(30 * time.Second); err != nil {
		return fmt.Errorf("stopping the hub: %w", err)
	}
	start := time.Now()
	if err := s.e.startHub(); err != nil {
		return err
	}
	s.logf("hub restarted; waiting for all %d agents to resync", o.members)
	deadline := time.Now().Add(o.timeout)
	var st shardStats
	for {
		if st, err = s.e.agents.stats(); err != nil {
			return err
		}
		if st.Synced == o.members && st.Snapshots+st.Resumes >= before.Snapshots+before.Resumes+int64(o.members) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hub restart: %d of %d agents resynced after %s", st.Synced, o.members, o.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	resync := time.Since(start)
	// A late duplicate would show after the snapshot: look again a bit later.
	time.Sleep(5 * time.Second)
	if st, err = s.e.agents.stats(); err != nil {
		return err
	}
	// What the restart cost the hub cluster: the agents report every
	// Work's status again; the hub writes those that changed (none here)
	// and reconciles every MyApp once at start.
	_, m := s.waitHubQueuesEmpty(ctx, o.timeout)
	quiet := time.Since(start)
	writes := metricSum(m, "flotilla_work_status_writes_total", `result="written"`)
	reconciles := metricSum(m, "controller_runtime_reconcile_total", `controller="myapp"`)
	s.r.add(5, "status-writes", "", writes, fmt.Sprintf("Work status writes by the new hub (%d Works, none changed)", st.Works))
	s.r.add(5, "myapp-reconciles-per-app", "", reconciles/float64(max(o.apps, 1)), "by the new hub, until its queues were empty")
	s.r.add(5, "queues-empty-s", "s", quiet.Seconds(), "hub started -> its MyApp and Work status queues empty")
	s.logf("the new hub's queues were empty %s after it started: %.0f Work status writes, %.0f MyApp reconciles", quiet.Round(time.Second), writes, reconciles)
	s.r.add(5, "resync-s", "s", resync.Seconds(), "hub started -> every agent's stream synced again; goal < 60 s")
	s.r.add(5, "reapplied", "", float64(st.Applies-before.Applies), "applies after the restart (goal 0)")
	s.r.add(5, "pruned-or-deleted", "", float64(st.Prunes+st.Deletes+st.Orphans-before.Prunes-before.Deletes-before.Orphans), "Works removed by the restart (goal 0)")
	s.logf("all agents resynced %s after the hub started; %d applies, %d removals since", resync.Round(time.Millisecond),
		st.Applies-before.Applies, st.Prunes+st.Deletes+st.Orphans-before.Prunes-before.Deletes-before.Orphans)
	return nil
}

// waitHubQueuesEmpty waits until the hub's MyApp and Work status queues
// are empty (it has done what the last events asked for) and returns how
// long after the call that was, and the hub's metrics then.
func (s *scenarios) waitHubQueuesEmpty(ctx context.Context, timeout time.Duration) (time.Duration, string) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		m := s.e.hubMetrics()
		busy := 0.0
		for _, q := range []string{"myapp", "work-status"} {
			busy += metricSum(m, "workqueue_depth", `name="`+q+`"`) + metricSum(m, "workqueue_unfinished_work_seconds", `name="`+q+`"`)
		}
		if m != "" && busy == 0 || time.Now().After(deadline) {
			if busy != 0 {
				s.logf("the hub's queues were not empty within %s; figures as they stand", timeout)
			}
			return time.Since(start), m
		}
		select {
		case <-ctx.Done():
			return time.Since(start), m
		case <-time.After(time.Second):
		}
	}
}

// latest is the latest of the times.
func latest(m map[string]time.Time) time.Time {
	var t time.Time
	for _, v := range m {
		if v.After(t) {
			t = v
		}
	}
	return t
}

// percentile is the p-th percentile (nearest rank) of d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func mibF(b int64) float64 { return float64(b) / (1 << 20) }
func mib(b int64) string   { return fmt.Sprintf("%.0f MiB", mibF(b)) }
