//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

// The health-shift specs (spec.placement.healthShift). They run on the
// first two Pull members, each given a Prometheus of its own for the
// spec (MetricsProvider: on the testbed a real bin/prometheus scraping,
// every second, an exporter in the test process), whose agents are
// started again with --prometheus-url pointing at it and, at the end,
// without. A spec sets the gauge flotilla_test_latency_seconds{cluster=
// "<member>"} per member to make a member slow or fast.
const (
	// latencyMetric is the gauge the Prometheus signals query.
	latencyMetric = "flotilla_test_latency_seconds"
	// latencyQuery is the signal's query, ${cluster} rendered per member.
	latencyQuery = latencyMetric + `{cluster="${cluster}"}`
	// The latencies: fast is below the 0.08 threshold, slow above.
	fastLatency = 0.02
	slowLatency = 0.12
	// crashLoopTag is an image tag the testbed's kwok stages crash-loop
	// (test/testbed/stages.yaml, pod-crashloop).
	crashLoopTag = "flotilla-crashloop"
	// The policy's timings (spec.placement.healthShift).
	shiftFor            = 5 * time.Second
	shiftInterval       = time.Second
	shiftRecoveryWindow = 15 * time.Second
	shiftDegradedPct    = 20
	// shiftBound bounds each wait for a shift: the acceptance asks for
	// `for` + 3s; a shared 2-core machine gets slack, and the time it
	// took is logged.
	shiftBound = 30 * time.Second
	// measureInterval is how often the timed waits look.
	measureInterval = 100 * time.Millisecond
)

// healthShiftMembers gives the first two Pull members a Prometheus each
// for the test (both gauges fast) and takes them away again when it ends.
// It skips on providers that cannot run one.
func healthShiftMembers(t *testing.T) (MetricsProvider, []string) {
	t.Helper()
	mp, ok := provider.(MetricsProvider)
	if !ok {
		t.Skipf("the %s provider cannot run a Prometheus per member that scrapes an exporter the test controls, nor start the agents with --prometheus-url pointing at it (kind's agents are Deployments installed by kind/up.sh, and nothing there exports a metric the test can move); the health-shift specs run on -provider=testbed", provider.Name())
	}
	var pull []string
	for _, m := range provider.MemberNames() {
		if provider.SyncMode(m) == flotillav1.SyncModePull {
			pull = append(pull, m)
		}
	}
	if len(pull) < 2 {
		t.Skipf("the health-shift specs need two members in Pull mode (a Push member has no agent to evaluate signals); Pull: %v of %v", pull, provider.MemberNames())
	}
	members := pull[:2]
	for _, m := range members {
		if err := mp.SetGauge(m, latencyMetric, fastLatency); err != nil {
			t.Fatalf("setting %s of %s: %v", latencyMetric, m, err)
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Registered before starting: a half-done start is undone too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := mp.StopPrometheus(ctx, members...); err != nil {
			t.Errorf("stopping the members' Prometheus servers: %v", err)
		}
		for _, m := range members {
			_ = mp.DeleteGauge(m, latencyMetric)
		}
		if err := poll(ctx, convergeTimeout, func() error { return membersReadyNow(ctx, members) }); err != nil {
			t.Errorf("after the agents were started again without --prometheus-url: %v", err)
		}
	})
	if err := mp.StartPrometheus(ctx, members...); err != nil {
		t.Fatalf("giving %v a Prometheus each: %v", members, err)
	}
	if err := poll(ctx, convergeTimeout, func() error { return membersReadyNow(ctx, members) }); err != nil {
		t.Fatalf("after the agents were started again with --prometheus-url: %v", err)
	}
	t.Logf("%v have a Prometheus each, their agents query it (%s)", members, time.Since(start).Round(100*time.Millisecond))
	return mp, members
}

// membersReadyNow checks that the members are Ready through agents that
// heartbeat now: Ready True, untainted, and the Ready condition's last
// heartbeat recent.
func membersReadyNow(ctx context.Context, members []string) error {
	var problems []string
	for _, m := range members {
		mc := &flotillav1.MemberCluster{}
		if err := provider.Hub().Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionTrue {
			problems = append(problems, fmt.Sprintf("MemberCluster %s Ready %s", m, conditionString(c)))
		}
		for _, taint := range mc.Spec.Taints {
			if taint.Key == flotillav1.TaintClusterUnreachable {
				problems = append(problems, fmt.Sprintf("MemberCluster %s tainted %s", m, taint.ToString()))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// latencyShift is the acceptance's policy: the latency signal above 0.08
// for 5s, evaluated every second, a 15s recovery window, 20% kept.
func latencyShift(query string) *flotillav1.HealthShift {
	return &flotillav1.HealthShift{
		Signals: []flotillav1.HealthSignal{{
			Name: "latency", Type: flotillav1.SignalPrometheus, Query: query, Threshold: resource.MustParse("0.08"),
		}},
		For:             &metav1.Duration{Duration: shiftFor},
		Interval:        &metav1.Duration{Duration: shiftInterval},
		RecoveryWindow:  &metav1.Duration{Duration: shiftRecoveryWindow},
		DegradedPercent: ptr.To[int32](shiftDegradedPct),
	}
}

// shiftApp is a MyApp of 10 replicas Divided by static weights between
// the two members, with the policy hs.
func shiftApp(in SpecInput, name string, members []string, w1, w2 int64, hs *flotillav1.HealthShift) *flotillav1.MyApp {
	app := newMyApp(in, name, 10, staticWeights(members, w1, w2))
	app.Spec.Placement.ClusterAffinity = &flotillav1.ClusterAffinity{ClusterNames: members}
	app.Spec.Placement.HealthShift = hs
	return app
}

// setGauge sets member's latency gauge or fails the test.
func setGauge(t *testing.T, mp MetricsProvider, member string, v float64) {
	t.Helper()
	if err := mp.SetGauge(member, latencyMetric, v); err != nil {
		t.Fatalf("setting %s of %s to %v: %v", latencyMetric, member, v, err)
	}
}

// HealthShiftPrometheusSpec: the story on a Prometheus signal. A
// MyApp of 10 replicas at static weights 8:2 on members[0] and
// members[1], its latency signal (threshold 0.08, for 5s, interval 1s,
// recovery window 15s, 20% kept) and an HTTPRoute on the hub standing for
// the two clusters. members[0]'s latency raised to 0.12: its Deployment
// goes to 2 and members[1]'s to 8, the route's weights to 20/80, and an
// event names the value (the times from the raise to the split and to the
// route are logged; the bound is 30s). Back at 0.02: 8:2 and 80/20 again
// after the recovery window, not before. Then the latency flips above and
// below every 4s for 40s (with `for` lowered to 1s, so that every high
// phase breaches): at most one shift per recovery window.
func HealthShiftPrometheusSpec(t *testing.T, in SpecInput, mp MetricsProvider, members []string) {
	ctx := context.Background()
	m1, m2 := members[0], members[1]
	hub := in.Provider.Hub()
	for _, m := range members {
		setGauge(t, mp, m, fastLatency)
	}
	t.Cleanup(func() {
		for _, m := range members {
			_ = mp.SetGauge(m, latencyMetric, fastLatency)
		}
	})

	// The HTTPRoute CRD is on the hub (installHTTPRouteCRD).
	backend := func(m string) string { return "web-" + m }
	route := newHTTPRoute(in.Namespace, "web", backend(m1), backend(m2))
	if err := hub.Create(ctx, route); err != nil {
		t.Fatalf("creating HTTPRoute %s/web on the hub: %v", in.Namespace, err)
	}

	app := shiftApp(in, "web", members, 8, 2, latencyShift(latencyQuery))
	app.Spec.Traffic = &flotillav1.TrafficSpec{HTTPRoute: &flotillav1.HTTPRouteTraffic{Name: "web", Backends: []flotillav1.ClusterBackend{
		{Cluster: m1, BackendName: backend(m1)}, {Cluster: m2, BackendName: backend(m2)},
	}}}
	tl := watchTimeline(t, in, "web", members)
	createMyApp(t, in, app)
	normal := map[string]int32{m1: 8, m2: 2}
	shifted := map[string]int32{m1: 2, m2: 8}
	eventually(t, "Deployment web rolled out 8/2 in "+m1+"/"+m2, convergeTimeout, deploymentsRolledOut(in, "web", want(normal)))
	eventually(t, "MyApp web Ready", convergeTimeout, appReady(in, "web", normal))
	eventually(t, "both members reporting signal latency OK at 0.02, every cluster Healthy with weights 80/20, HealthShifted False AllHealthy",
		convergeTimeout, allOf(
			signalsAre(in, "web", map[string]string{m1: "OK 0.02", m2: "OK 0.02"}),
			trafficIs(in, "web", map[string]string{m1: "Healthy 100% 8 replicas weight 80", m2: "Healthy 100% 2 replicas weight 20"}),
			shiftConditionIs(in, "web", metav1.ConditionFalse, flotillav1.ReasonAllHealthy),
		))
	eventually(t, "HTTPRoute web's weights 80/20 (the normal split) and status.traffic.httpRoute synced", convergeTimeout, allOf(
		routeWeightsAre(in, "web", map[string]int64{backend(m1): 80, backend(m2): 20}),
		routeSynced(in, "web", "web"),
	))

	// 1. members[0] slow: the split and the route follow within `for`
	// and a little.
	t.Logf("raising %s's latency to %v", m1, slowLatency)
	raised := time.Now()
	setGauge(t, mp, m1, slowLatency)
	tl.Note("%s latency %v", m1, slowLatency)
	took := measure(t, raised, shiftBound, map[string]func() error{
		"split": deploymentReplicasAre(in, "web", shifted),
		"route": routeWeightsAre(in, "web", map[string]int64{backend(m1): 20, backend(m2): 80}),
	})
	logShiftTimes(t, "breach", took)
	eventually(t, "status.traffic: "+m1+" Degraded at 20% with 2 replicas, weight 20; "+m2+" Healthy with 8, weight 80; HealthShifted True Degraded naming "+m1,
		convergeTimeout, allOf(
			trafficIs(in, "web", map[string]string{m1: "Degraded 20% 2 replicas weight 20", m2: "Healthy 100% 8 replicas weight 80"}),
			shiftConditionIs(in, "web", metav1.ConditionTrue, flotillav1.ReasonHealthDegraded, m1, "20%"),
			lastShiftIs(in, "web", m1, 100, 20, flotillav1.ReasonHealthDegraded, "latency", "0.12"),
		))
	eventually(t, "a Degraded event on MyApp web naming "+m1+", signal latency and its value 0.12", convergeTimeout,
		eventNamed(in, "web", flotillav1.ReasonHealthDegraded, m1, "latency", "0.12"))
	eventually(t, "Deployment web rolled out 2/8", convergeTimeout, deploymentsRolledOut(in, "web", want(shifted)))

	// 2. members[0] fast again: back to 8:2 once it stayed fast for the
	// recovery window, not before.
	t.Logf("lowering %s's latency to %v", m1, fastLatency)
	lowered := time.Now()
	setGauge(t, mp, m1, fastLatency)
	tl.Note("%s latency %v", m1, fastLatency)
	recovered := waitRecovery(t, in, "web", lowered, shiftRecoveryWindow, normal, map[string]int64{backend(m1): 80, backend(m2): 20})
	t.Logf("MEASURED: %s back to 8 replicas %v after its latency fell (recovery window %v)", m1, recovered.Round(time.Millisecond), shiftRecoveryWindow)
	eventually(t, "status.traffic back to normal, HealthShifted False AllHealthy, the last shift "+m1+" 20->100 Recovered", convergeTimeout, allOf(
		trafficIs(in, "web", map[string]string{m1: "Healthy 100% 8 replicas weight 80", m2: "Healthy 100% 2 replicas weight 20"}),
		shiftConditionIs(in, "web", metav1.ConditionFalse, flotillav1.ReasonAllHealthy),
		lastShiftIs(in, "web", m1, 20, 100, flotillav1.ReasonHealthRecovered, "", ""),
	))
	eventually(t, "a Recovered event on MyApp web naming "+m1, convergeTimeout, eventNamed(in, "web", flotillav1.ReasonHealthRecovered, m1))
	eventually(t, "Deployment web rolled out 8/2 again", convergeTimeout, deploymentsRolledOut(in, "web", want(normal)))

	// 3. An oscillating signal: above and below every 4s for 40s. With
	// `for` at 5s no 4s phase could breach; at 1s every high phase does.
	updateMyApp(t, in, "web", func(a *flotillav1.MyApp) { a.Spec.Placement.HealthShift.For = &metav1.Duration{Duration: time.Second} })
	tl.Note("for set to 1s")
	eventually(t, "the Works of web asking for `for` 1s", convergeTimeout, worksHealthFor(in, "web", time.Second))
	oscStart := time.Now()
	t.Logf("flipping %s's latency between %v and %v every 4s for 40s", m1, slowLatency, fastLatency)
	seen := map[string]flotillav1.TrafficShift{}
	collect := func() {
		a, err := getMyApp(ctx, in, "web")
		if err == nil && a.Status.Traffic != nil {
			for _, sh := range a.Status.Traffic.Shifts {
				seen[shiftKey(sh)] = sh
			}
		}
	}
	var flips []string
	for i := range 10 {
		v := slowLatency
		if i%2 == 1 {
			v = fastLatency
		}
		setGauge(t, mp, m1, v)
		tl.Note("%s latency %v (oscillation)", m1, v)
		flips = append(flips, fmt.Sprintf("%v@%s", v, time.Since(oscStart).Round(100*time.Millisecond)))
		for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			collect()
		}
	}
	setGauge(t, mp, m1, fastLatency)
	oscEnd := time.Now()
	tl.Note("%s latency %v: oscillation over", m1, fastLatency)
	t.Logf("flips from %s to %s: %s", oscStart.UTC().Format("15:04:05.000"), oscEnd.UTC().Format("15:04:05.000"), strings.Join(flips, " "))
	eventually(t, "web back to 8/2 and "+m1+" Healthy after the oscillation ended (fast for the recovery window)", shiftRecoveryWindow+2*shiftBound, func() error {
		collect()
		return allOf(deploymentReplicasAre(in, "web", normal),
			trafficIs(in, "web", map[string]string{m1: "Healthy 100% 8 replicas weight 80", m2: "Healthy 100% 2 replicas weight 20"}))()
	})
	collect()
	var shifts []flotillav1.TrafficShift
	for _, sh := range seen {
		if sh.Cluster == m1 {
			shifts = append(shifts, sh)
		}
	}
	sort.Slice(shifts, func(i, j int) bool { return shifts[i].Time.Before(&shifts[j].Time) })
	var list []string
	during := 0
	for _, sh := range shifts {
		list = append(list, fmt.Sprintf("%s %d->%d %s at %s", sh.Cluster, sh.FromPercent, sh.ToPercent, sh.Reason, sh.Time.UTC().Format("15:04:05")))
		if !sh.Time.Time.Before(oscStart.Truncate(time.Second)) && !sh.Time.Time.After(oscEnd) {
			during++
		}
	}
	t.Logf("shifts of %s (status.traffic.shifts, every one seen): %s; %d during the 40s of oscillation", m1, strings.Join(list, "; "), during)
	for i := 1; i < len(shifts); i++ {
		if gap := shifts[i].Time.Sub(shifts[i-1].Time.Time); gap < shiftRecoveryWindow {
			t.Errorf("two shifts of %s %v apart, less than the recovery window %v: %s, then %s (all: %s)",
				m1, gap, shiftRecoveryWindow, list[i-1], list[i], strings.Join(list, "; "))
		}
	}
	if during == 0 {
		t.Errorf("the oscillation breached for 4s every 8s with `for` 1s and never cut %s: shifts %s", m1, strings.Join(list, "; "))
	}
	if most := int(40*time.Second/shiftRecoveryWindow) + 1; during > most {
		t.Errorf("%d shifts of %s during the 40s of oscillation, more than one per %v window (%d): %s", during, m1, shiftRecoveryWindow, most, strings.Join(list, "; "))
	}
	if n, err := countEvents(ctx, in, "web", m1); err != nil {
		t.Errorf("counting the shift events: %v", err)
	} else {
		t.Logf("Degraded/Recovered events on MyApp web for %s: %s (an event's series count above 2 reaches the API only every 30 min, so this is a floor)", m1, n)
	}
	// Each shift is counted once: flotilla_health_shifts_total against
	// the shifts status.traffic recorded.
	if hm, ok := in.Provider.(interface{ HubMetrics() string }); ok {
		want := map[string]int{}
		for _, sh := range shifts {
			want[sh.Reason]++
		}
		got := shiftsCounted(hm.HubMetrics(), in.Namespace, "web", m1)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("flotilla_health_shifts_total for %s counts %v, but status.traffic.shifts recorded %v (%s): a shift counted (and its event emitted) more than once",
				m1, got, want, strings.Join(list, "; "))
		} else {
			t.Logf("flotilla_health_shifts_total for %s: %v, one per shift", m1, got)
		}
	}
}

// shiftsCounted reads flotilla_health_shifts_total of MyApp ns/name in
// cluster from the hub's metrics text, by reason.
func shiftsCounted(metrics, ns, name, cluster string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(line, "flotilla_health_shifts_total{") ||
			!strings.Contains(line, `namespace="`+ns+`"`) || !strings.Contains(line, `name="`+name+`"`) || !strings.Contains(line, `cluster="`+cluster+`"`) {
			continue
		}
		var v float64
		i := strings.LastIndex(line, " ")
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			continue
		}
		for _, r := range []string{flotillav1.ReasonHealthDegraded, flotillav1.ReasonHealthRecovered} {
			if strings.Contains(line, `reason="`+r+`"`) {
				out[r] += int(v)
			}
		}
	}
	return out
}

// HealthShiftWorkloadSpec: a workload signal. A MyApp of 10 replicas at
// 1:1 on the two members with a BackOffPods signal (threshold 0: any pod
// in back-off; for 2s, recovery window 15s), created with an override
// that gives members[1] an image the testbed crash-loops: its pods wait
// in CrashLoopBackOff and its share drops to 20% (2 replicas, weight 20)
// while members[0] runs 8, and stays there while the image is broken;
// with the override gone its pods run again and it gets 5 back after the
// recovery window, not before. Then the same image is rolled out onto
// the running member: its share drops again (the time is logged), and
// what follows while the image stays broken is logged.
func HealthShiftWorkloadSpec(t *testing.T, in SpecInput, members []string) {
	m1, m2 := members[0], members[1]
	hs := &flotillav1.HealthShift{
		Signals:         []flotillav1.HealthSignal{{Name: "backoff", Type: flotillav1.SignalBackOffPods, Threshold: resource.MustParse("0")}},
		For:             &metav1.Duration{Duration: 2 * time.Second},
		Interval:        &metav1.Duration{Duration: shiftInterval},
		RecoveryWindow:  &metav1.Duration{Duration: shiftRecoveryWindow},
		DegradedPercent: ptr.To[int32](shiftDegradedPct),
	}
	crashImage := strings.SplitN(baseImage, ":", 2)[0] + ":" + crashLoopTag
	crash := []flotillav1.ClusterOverride{{Name: "crash", TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{m2}},
		Image: &flotillav1.ImageOverride{Tag: crashLoopTag}}}
	app := shiftApp(in, "api", members, 1, 1, hs)
	app.Spec.Overrides = crash
	tl := watchTimeline(t, in, "api", members)
	created := time.Now()
	tl.Note("MyApp api created, %s on %s", crashImage, m2)
	createMyApp(t, in, app)
	normal := map[string]int32{m1: 5, m2: 5}
	cut := map[string]int32{m1: 8, m2: 2}
	cutTraffic := map[string]string{m1: "Healthy 100% 8 replicas weight 80", m2: "Degraded 20% 2 replicas weight 20"}
	eventually(t, m2+"'s pods of "+crashImage+" waiting in CrashLoopBackOff", convergeTimeout, podsInBackOff(in, m2, "api", crashImage))
	eventually(t, m2+" cut to 20%: Deployments 8/2, weights 80/20, HealthShifted True Degraded naming "+m2+" and signal backoff, a Degraded event naming them",
		convergeTimeout, allOf(
			deploymentReplicasAre(in, "api", cut),
			trafficIs(in, "api", cutTraffic),
			shiftConditionIs(in, "api", metav1.ConditionTrue, flotillav1.ReasonHealthDegraded, m2, "backoff"),
			lastShiftIs(in, "api", m2, 100, 20, flotillav1.ReasonHealthDegraded, "backoff", ""),
			eventNamed(in, "api", flotillav1.ReasonHealthDegraded, m2, "backoff"),
		))
	t.Logf("MEASURED: %s cut %v after MyApp api was created with its crash-looping image", m2, time.Since(created).Round(time.Millisecond))
	eventually(t, m1+" runs 8 ready replicas of api", convergeTimeout, deploymentsIn(in, []string{m1}, "api", want(map[string]int32{m1: 8})))
	consistently(t, m2+" kept at 20% (2 replicas in back-off) while its image crash-loops, longer than the recovery window", shiftRecoveryWindow+5*time.Second,
		allOf(deploymentReplicasAre(in, "api", cut), trafficIs(in, "api", cutTraffic)))

	// The image fixed: members[1]'s pods run again, and its share comes
	// back after the recovery window.
	fixed := time.Now()
	tl.Note("override removed")
	updateMyApp(t, in, "api", func(a *flotillav1.MyApp) { a.Spec.Overrides = nil })
	back := waitRecovery(t, in, "api", fixed, shiftRecoveryWindow, normal, nil)
	t.Logf("MEASURED: %s back to 5 replicas %v after the override was removed (recovery window %v)", m2, back.Round(time.Millisecond), shiftRecoveryWindow)
	eventually(t, "Deployment api rolled out 5/5 of "+baseImage+" again, weights 50/50, HealthShifted False AllHealthy, a Recovered event naming "+m2, convergeTimeout, allOf(
		deploymentsRolledOut(in, "api", want(normal)),
		trafficIs(in, "api", map[string]string{m1: "Healthy 100% 5 replicas weight 50", m2: "Healthy 100% 5 replicas weight 50"}),
		shiftConditionIs(in, "api", metav1.ConditionFalse, flotillav1.ReasonAllHealthy),
		eventNamed(in, "api", flotillav1.ReasonHealthRecovered, m2),
	))

	// The crash-looping image rolled out onto the running member: its
	// share drops again.
	broken := time.Now()
	tl.Note("override set again: %s rolls onto %s", m2, crashImage)
	updateMyApp(t, in, "api", func(a *flotillav1.MyApp) { a.Spec.Overrides = crash })
	took := measure(t, broken, convergeTimeout, map[string]func() error{
		"split":  deploymentReplicasAre(in, "api", cut),
		"weight": trafficIs(in, "api", cutTraffic),
	})
	t.Logf("MEASURED: from the override on the running %s to its Deployment at 2 and %s's at 8: %v; to its weight 20: %v (the pods must first roll onto the crash-looping image, and a cut waits the recovery window after the member's last shift, its recovery)",
		m2, m1, took["split"].Round(time.Millisecond), took["weight"].Round(time.Millisecond))
	// What the cut does to a rollout in progress is logged, not asserted:
	// the Deployment's scale-down may take the crash-looping pods away, and
	// then the signal is OK although the image is still broken.
	var states []string
	for end := time.Now().Add(shiftRecoveryWindow + 5*time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		a, err := getMyApp(context.Background(), in, "api")
		if err != nil || a.Status.Traffic == nil {
			continue
		}
		for _, c := range a.Status.Traffic.Clusters {
			if c.Name == m2 {
				s := fmt.Sprintf("%s %d%%", c.State, c.CapPercent)
				if len(states) == 0 || states[len(states)-1] != s {
					states = append(states, s)
				}
			}
		}
	}
	t.Logf("OBSERVED: %s while its rollout onto %s stays broken for %v: %s", m2, crashImage, shiftRecoveryWindow+5*time.Second, strings.Join(states, " -> "))
	tl.Note("override removed")
	updateMyApp(t, in, "api", func(a *flotillav1.MyApp) { a.Spec.Overrides = nil })
	eventually(t, "Deployment api rolled out 5/5 of "+baseImage+" again and weights 50/50", convergeTimeout+shiftRecoveryWindow, allOf(
		deploymentsRolledOut(in, "api", want(normal)),
		trafficIs(in, "api", map[string]string{m1: "Healthy 100% 5 replicas weight 50", m2: "Healthy 100% 5 replicas weight 50"}),
	))
}

// HealthShiftAllSickSpec: both members slow at once. Nothing moves away
// from every cluster: no shift, the split stays 8:2, and HealthShifted is
// False with reason AllClustersDegraded.
func HealthShiftAllSickSpec(t *testing.T, in SpecInput, mp MetricsProvider, members []string) {
	m1, m2 := members[0], members[1]
	for _, m := range members {
		setGauge(t, mp, m, fastLatency)
	}
	t.Cleanup(func() {
		for _, m := range members {
			_ = mp.SetGauge(m, latencyMetric, fastLatency)
		}
	})
	tl := watchTimeline(t, in, "web", members)
	createMyApp(t, in, shiftApp(in, "web", members, 8, 2, latencyShift(latencyQuery)))
	normal := map[string]int32{m1: 8, m2: 2}
	eventually(t, "Deployment web rolled out 8/2", convergeTimeout, deploymentsRolledOut(in, "web", want(normal)))
	eventually(t, "both members reporting latency OK, HealthShifted False AllHealthy", convergeTimeout, allOf(
		signalsAre(in, "web", map[string]string{m1: "OK 0.02", m2: "OK 0.02"}),
		shiftConditionIs(in, "web", metav1.ConditionFalse, flotillav1.ReasonAllHealthy),
	))

	t.Logf("raising both members' latency to %v at once", slowLatency)
	raised := time.Now()
	for _, m := range members {
		setGauge(t, mp, m, slowLatency)
	}
	tl.Note("both latencies %v", slowLatency)
	noShift := allOf(deploymentReplicasAre(in, "web", normal), noShifts(in, "web"))
	// Until both breach, and all along, nothing may move. A move is
	// recorded, with how the signals stood, and the wait goes on, to see
	// whether the condition still says every cluster is sick.
	var moved string
	eventually(t, "both members reporting latency Breaching and HealthShifted False AllClustersDegraded", shiftBound, func() error {
		if err := noShift(); err != nil && moved == "" {
			moved = fmt.Sprintf("%v after both members turned slow: %v\n%s", time.Since(raised).Round(time.Millisecond), err, signalHistory(in, "web"))
		}
		return allOf(
			signalsAre(in, "web", map[string]string{m1: "Breaching 0.12", m2: "Breaching 0.12"}),
			shiftConditionIs(in, "web", metav1.ConditionFalse, flotillav1.ReasonAllClustersDegraded, m1, m2),
		)()
	})
	t.Logf("MEASURED: AllClustersDegraded %v after both turned slow", time.Since(raised).Round(time.Millisecond))
	if err := noShift(); err != nil && moved == "" {
		moved = fmt.Sprintf("%v after both members turned slow: %v\n%s", time.Since(raised).Round(time.Millisecond), err, signalHistory(in, "web"))
	}
	if moved != "" {
		t.Errorf("both members turned slow at once, yet a share moved: %s", moved)
	}
	stays := shiftConditionIs(in, "web", metav1.ConditionFalse, flotillav1.ReasonAllClustersDegraded)
	if moved == "" {
		stays = allOf(noShift, stays)
	}
	consistently(t, "HealthShifted AllClustersDegraded (and, unless a share moved already, no shift and Deployments 8/2) while both are slow", 10*time.Second, stays)
	for _, m := range members {
		setGauge(t, mp, m, fastLatency)
	}
	back := shiftConditionIs(in, "web", metav1.ConditionFalse, flotillav1.ReasonAllHealthy)
	if moved == "" {
		back = allOf(noShift, back)
	}
	eventually(t, "HealthShifted False AllHealthy once both are fast again (and no shift, unless one moved already)", shiftRecoveryWindow+shiftBound, back)
}

// HealthShiftUnknownSpec: a signal that cannot be evaluated moves
// nothing. A query for a metric that does not exist returns no sample:
// HealthShifted Unknown with reason SignalUnknown, naming the query's
// error, each cluster's signal Unknown, no shift, the split as scheduled.
// A query that is not PromQL is refused by the webhook, naming the field.
func HealthShiftUnknownSpec(t *testing.T, in SpecInput, members []string) {
	ctx := context.Background()
	m1, m2 := members[0], members[1]
	const missing = `flotilla_test_no_such_metric_seconds{cluster="${cluster}"}`
	createMyApp(t, in, shiftApp(in, "web", members, 8, 2, latencyShift(missing)))
	normal := map[string]int32{m1: 8, m2: 2}
	eventually(t, "Deployment web rolled out 8/2", convergeTimeout, deploymentsRolledOut(in, "web", want(normal)))
	eventually(t, "HealthShifted Unknown SignalUnknown naming both clusters and \"returned no sample\"; both signals Unknown with that message", shiftBound+convergeTimeout, allOf(
		shiftConditionIs(in, "web", metav1.ConditionUnknown, flotillav1.ReasonSignalUnknown, m1, m2, "returned no sample", "flotilla_test_no_such_metric_seconds"),
		signalsAre(in, "web", map[string]string{m1: "Unknown", m2: "Unknown"}),
		signalMessageHas(in, "web", "returned no sample"),
	))
	consistently(t, "no shift and Deployments 8/2 while the signal is Unknown", 10*time.Second, allOf(
		deploymentReplicasAre(in, "web", normal), noShifts(in, "web"),
		trafficIs(in, "web", map[string]string{m1: "Healthy 100% 8 replicas weight 80", m2: "Healthy 100% 2 replicas weight 20"})))

	bad := shiftApp(in, "bad-query", members, 8, 2, latencyShift(`sum(`+latencyMetric+`{cluster="${cluster}"}`))
	err := retryWrite(ctx, func() error { return in.Provider.Hub().Create(ctx, bad) })
	if err == nil {
		t.Fatalf("a MyApp whose signal query is not PromQL was admitted")
	}
	const field = "spec.placement.healthShift.signals[0].query"
	if !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), "PromQL") {
		t.Fatalf("the refusal does not come from the webhook naming %s as not PromQL:\n%v", field, err)
	}
	t.Logf("refused: %v", err)
	if _, err := getMyApp(ctx, in, bad.Name); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused MyApp %s exists anyway (%v)", bad.Name, err)
	}
}

// allOf checks every check, in order, returning the first error.
func allOf(checks ...func() error) func() error {
	return func() error {
		for _, c := range checks {
			if err := c(); err != nil {
				return err
			}
		}
		return nil
	}
}

// measure polls every check every measureInterval until each has held
// once, and returns how long after since each first did. It fails the
// test after timeout naming the checks that never held and their last
// errors.
func measure(t *testing.T, since time.Time, timeout time.Duration, checks map[string]func() error) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	last := map[string]error{}
	deadline := since.Add(timeout)
	for {
		for name, c := range checks {
			if _, ok := out[name]; ok {
				continue
			}
			if err := c(); err != nil {
				last[name] = err
			} else {
				out[name] = time.Since(since)
			}
		}
		if len(out) == len(checks) {
			return out
		}
		if time.Now().After(deadline) {
			var problems []string
			for name := range checks {
				if _, ok := out[name]; !ok {
					problems = append(problems, fmt.Sprintf("%s: %v", name, last[name]))
				} else {
					problems = append(problems, fmt.Sprintf("%s: held after %v", name, out[name].Round(time.Millisecond)))
				}
			}
			sort.Strings(problems)
			t.Fatalf("did not converge within %v: %s", timeout, strings.Join(problems, "; "))
		}
		time.Sleep(measureInterval)
	}
}

// logShiftTimes logs the measured times from a breach to the split and
// the route, against the acceptance's `for` + 3s.
func logShiftTimes(t *testing.T, what string, took map[string]time.Duration) {
	t.Helper()
	goal := shiftFor + 3*time.Second
	for _, k := range []string{"split", "route"} {
		d, ok := took[k]
		if !ok {
			continue
		}
		verdict := "within"
		if d > goal {
			verdict = "OVER"
		}
		t.Logf("MEASURED: %s -> %s %v (%s `for` + 3s = %v; bound %v)", what, k, d.Round(time.Millisecond), verdict, goal, shiftBound)
	}
}

// waitRecovery waits for the split (and, with routeWeights, the route's
// weights) to return to normal after a cluster's signal turned OK at
// since: not before the recovery window has passed since then (the window
// counts from when the hub saw it OK, which is later), and within the
// window plus shiftBound. It returns how long after since the split
// returned.
func waitRecovery(t *testing.T, in SpecInput, name string, since time.Time, window time.Duration, normal map[string]int32, routeWeights map[string]int64) time.Duration {
	t.Helper()
	checks := map[string]func() error{"split": deploymentReplicasAre(in, name, normal)}
	if routeWeights != nil {
		checks["route"] = routeWeightsAre(in, name, routeWeights)
	}
	took := measure(t, since, window+shiftBound, checks)
	for k, d := range took {
		if d < window {
			t.Errorf("the %s returned %v after the signal turned OK, before the recovery window (%v) could pass", k, d.Round(time.Millisecond), window)
		}
	}
	if d, ok := took["route"]; ok {
		t.Logf("MEASURED: the route's weights back %v after the signal turned OK", d.Round(time.Millisecond))
	}
	return took["split"]
}

// deploymentReplicasAre checks the spec.replicas of Deployment name in
// each member of want (rolled out or not).
func deploymentReplicasAre(in SpecInput, name string, want map[string]int32) func() error {
	return func() error {
		ctx := context.Background()
		got := map[string]int32{}
		for m := range want {
			d := &appsv1.Deployment{}
			if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, d); err != nil {
				return fmt.Errorf("%s: Deployment %s: %v", m, name, err)
			}
			got[m] = ptr.Deref(d.Spec.Replicas, 1)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("Deployment %s spec.replicas %v, want %v", name, got, want)
		}
		return nil
	}
}

// trafficIs checks status.traffic.clusters: per cluster "<state>
// <cap>% <replicas> replicas weight <weight>".
func trafficIs(in SpecInput, name string, want map[string]string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		if app.Status.Traffic == nil {
			return fmt.Errorf("MyApp %s has no status.traffic", name)
		}
		got := map[string]string{}
		reasons := map[string]string{}
		for _, c := range app.Status.Traffic.Clusters {
			got[c.Name] = fmt.Sprintf("%s %d%% %d replicas weight %d", c.State, c.CapPercent, c.Replicas, c.Weight)
			reasons[c.Name] = c.Reason
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("status.traffic.clusters %v (reasons %q), want %v", got, reasons, want)
		}
		return nil
	}
}

// signalsAre checks status.clusters[].signals: per cluster "<state>
// <value>" of its one signal ("<state>" alone when want has no value).
func signalsAre(in SpecInput, name string, want map[string]string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, c := range app.Status.Clusters {
			if _, ok := want[c.Name]; !ok {
				continue
			}
			var s []string
			for _, sig := range c.Signals {
				v := string(sig.State)
				if strings.Contains(want[c.Name], " ") {
					v += " " + sig.Value
				}
				s = append(s, v)
			}
			got[c.Name] = strings.Join(s, ",")
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("status.clusters signals %v, want %v", got, want)
		}
		return nil
	}
}

// signalMessageHas checks that every cluster's signals carry a message
// containing s.
func signalMessageHas(in SpecInput, name, s string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		for _, c := range app.Status.Clusters {
			for _, sig := range c.Signals {
				if !strings.Contains(sig.Message, s) {
					return fmt.Errorf("%s: signal %s message %q does not contain %q", c.Name, sig.Name, sig.Message, s)
				}
			}
		}
		return nil
	}
}

// signalHistory says how the clusters' signals and traffic stand, for a
// failure message.
func signalHistory(in SpecInput, name string) string {
	app, err := getMyApp(context.Background(), in, name)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, c := range app.Status.Clusters {
		for _, s := range c.Signals {
			fmt.Fprintf(&b, "%s: signal %s %s %s since %s\n", c.Name, s.Name, s.State, s.Value, s.Since)
		}
	}
	if app.Status.Traffic != nil {
		for _, sh := range app.Status.Traffic.Shifts {
			fmt.Fprintf(&b, "shift: %s %d->%d %s %s=%s at %s\n", sh.Cluster, sh.FromPercent, sh.ToPercent, sh.Reason, sh.Signal, sh.Value, sh.Time)
		}
	}
	return b.String()
}

// shiftConditionIs checks the HealthShifted condition: for the current
// generation, with status and reason, its message containing each of
// contains.
func shiftConditionIs(in SpecInput, name string, status metav1.ConditionStatus, reason string, contains ...string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionHealthShifted)
		if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != app.Generation {
			return fmt.Errorf("HealthShifted %s (generation %d), want %s %s", conditionString(c), app.Generation, status, reason)
		}
		for _, s := range contains {
			if !strings.Contains(c.Message, s) {
				return fmt.Errorf("HealthShifted message %q does not contain %q", c.Message, s)
			}
		}
		return nil
	}
}

// lastShiftIs checks status.traffic.shifts[0]: cluster, from and to, the
// reason, and (when not empty) the signal and value.
func lastShiftIs(in SpecInput, name, cluster string, from, to int32, reason, signal, value string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		if app.Status.Traffic == nil || len(app.Status.Traffic.Shifts) == 0 {
			return fmt.Errorf("MyApp %s has no status.traffic.shifts", name)
		}
		sh := app.Status.Traffic.Shifts[0]
		if sh.Cluster != cluster || sh.FromPercent != from || sh.ToPercent != to || sh.Reason != reason ||
			(signal != "" && sh.Signal != signal) || (value != "" && sh.Value != value) {
			return fmt.Errorf("last shift %+v, want %s %d->%d %s %s=%s", sh, cluster, from, to, reason, signal, value)
		}
		return nil
	}
}

// noShifts checks that MyApp name has shifted nothing.
func noShifts(in SpecInput, name string) func() error {
	return func() error {
		app, err := getMyApp(context.Background(), in, name)
		if err != nil {
			return err
		}
		if t := app.Status.Traffic; t != nil && len(t.Shifts) > 0 {
			var list []string
			for _, sh := range t.Shifts {
				list = append(list, fmt.Sprintf("%s %d->%d %s (%s=%s) at %s", sh.Cluster, sh.FromPercent, sh.ToPercent, sh.Reason, sh.Signal, sh.Value, sh.Time.UTC().Format(time.RFC3339)))
			}
			return fmt.Errorf("status.traffic.shifts: %s", strings.Join(list, "; "))
		}
		return nil
	}
}

// eventNamed checks that an event of reason on MyApp name mentions each
// of contains.
func eventNamed(in SpecInput, name, reason string, contains ...string) func() error {
	return func() error {
		var list eventsv1.EventList
		if err := in.Provider.Hub().List(context.Background(), &list, client.InNamespace(in.Namespace)); err != nil {
			return err
		}
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Kind != "MyApp" || e.Regarding.Name != name || e.Reason != reason {
				continue
			}
			ok := true
			for _, s := range contains {
				ok = ok && strings.Contains(e.Note, s)
			}
			if ok {
				return nil
			}
			notes = append(notes, e.Note)
		}
		return fmt.Errorf("no %s event on MyApp %s mentioning %q (those of that reason: %q)", reason, name, contains, notes)
	}
}

// countEvents lists the shift events (Degraded and Recovered) on MyApp
// name naming cluster, with their series counts.
func countEvents(ctx context.Context, in SpecInput, name, cluster string) (string, error) {
	var list eventsv1.EventList
	if err := in.Provider.Hub().List(ctx, &list, client.InNamespace(in.Namespace)); err != nil {
		return "", err
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && (e.Reason == flotillav1.ReasonHealthDegraded || e.Reason == flotillav1.ReasonHealthRecovered) &&
			strings.Contains(e.Note, "cluster "+cluster+":") {
			n := int32(1)
			if e.Series != nil {
				n = e.Series.Count
			}
			out = append(out, fmt.Sprintf("%s x%d at %s (%q)", e.Reason, n, e.EventTime.UTC().Format("15:04:05.000"), e.Note))
		}
	}
	return strings.Join(out, "; "), nil
}

func shiftKey(sh flotillav1.TrafficShift) string {
	return fmt.Sprintf("%s/%s/%d/%d/%s", sh.Time.UTC().Format(time.RFC3339), sh.Cluster, sh.FromPercent, sh.ToPercent, sh.Reason)
}

// worksHealthFor checks that every Work of MyApp name asks for `for` d.
func worksHealthFor(in SpecInput, name string, d time.Duration) func() error {
	return func() error {
		works, err := worksOf(context.Background(), in, name)
		if err != nil {
			return err
		}
		for c, w := range works {
			if w.Spec.Health == nil || w.Spec.Health.For.Duration != d {
				return fmt.Errorf("Work for %s: spec.health %+v, want for %v", c, w.Spec.Health, d)
			}
		}
		return nil
	}
}

// podsInBackOff checks that member runs pods of Deployment name on image
// and that at least one of them waits in CrashLoopBackOff.
func podsInBackOff(in SpecInput, member, name, image string) func() error {
	return func() error {
		ctx := context.Background()
		d := &appsv1.Deployment{}
		if err := in.Provider.Member(member).Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: name}, d); err != nil {
			return err
		}
		var pods corev1.PodList
		if err := in.Provider.Member(member).List(ctx, &pods, client.InNamespace(in.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		var states []string
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Image == image && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
					return nil
				}
				states = append(states, fmt.Sprintf("%s %s %+v", p.Name, cs.Image, cs.State))
			}
		}
		return fmt.Errorf("%d pods, none in CrashLoopBackOff on %s: %v", len(pods.Items), image, states)
	}
}

// installHTTPRouteCRD installs the Gateway API's HTTPRoute CRD on the hub
// from the module cache (go list -m sigs.k8s.io/gateway-api), unless it
// is there, and removes it when the test ends if it installed it. Call it
// from the test around the specs that use it, so that their MyApps and
// routes are gone before the CRD is.
func installHTTPRouteCRD(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	const name = "httproutes.gateway.networking.k8s.io"
	// The suite's clients know no CRD type: ask by metadata.
	pm := &metav1.PartialObjectMetadata{}
	pm.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := provider.Hub().Get(ctx, client.ObjectKey{Name: name}, pm); err == nil {
		return
	} else if !apierrors.IsNotFound(err) {
		t.Fatalf("looking for the HTTPRoute CRD on the hub: %v", err)
	}
	path, err := testutil.HTTPRouteCRD()
	if err != nil {
		t.Fatal(err)
	}
	crds, err := envtest.InstallCRDs(provider.HubConfig(), envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true})
	if err != nil {
		t.Fatalf("installing the HTTPRoute CRD from %s on the hub: %v", path, err)
	}
	t.Logf("installed the HTTPRoute CRD from %s", path)
	t.Cleanup(func() {
		if err := envtest.UninstallCRDs(provider.HubConfig(), envtest.CRDInstallOptions{CRDs: crds}); err != nil {
			t.Errorf("removing the HTTPRoute CRD from the hub: %v", err)
		}
	})
}

// newHTTPRoute is an HTTPRoute with one rule whose backendRefs are the
// Services backends (port 80, weight 1 each), under a Gateway that need
// not exist: the hub writes only the weights.
func newHTTPRoute(namespace, name string, backends ...string) *unstructured.Unstructured {
	var refs []any
	for _, b := range backends {
		refs = append(refs, map[string]any{"name": b, "port": int64(80), "weight": int64(1)})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1",
		"kind":       "HTTPRoute",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": "global"}},
			"hostnames":  []any{"web.example.com"},
			"rules":      []any{map[string]any{"backendRefs": refs}},
		},
	}}
	return u
}

// routeWeightsAre checks the weights of HTTPRoute name's backendRefs, by
// backend name, in every rule.
func routeWeightsAre(in SpecInput, name string, want map[string]int64) func() error {
	return func() error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("gateway.networking.k8s.io/v1")
		u.SetKind("HTTPRoute")
		if err := in.Provider.Hub().Get(context.Background(), client.ObjectKey{Namespace: in.Namespace, Name: name}, u); err != nil {
			return fmt.Errorf("HTTPRoute %s: %v", name, err)
		}
		rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
		got := map[string]int64{}
		for _, r := range rules {
			refs, _, _ := unstructured.NestedSlice(r.(map[string]any), "backendRefs")
			for _, ref := range refs {
				m := ref.(map[string]any)
				n, _, _ := unstructured.NestedString(m, "name")
				w, _, _ := unstructured.NestedInt64(m, "weight")
				got[n] = w
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("HTTPRoute %s weights %v, want %v", name, got, want)
		}
		return nil
	}
}

// routeSynced checks status.traffic.httpRoute: the route named, synced.
func routeSynced(in SpecInput, app, route string) func() error {
	return func() error {
		a, err := getMyApp(context.Background(), in, app)
		if err != nil {
			return err
		}
		if a.Status.Traffic == nil || a.Status.Traffic.HTTPRoute == nil {
			return fmt.Errorf("MyApp %s has no status.traffic.httpRoute", app)
		}
		if h := a.Status.Traffic.HTTPRoute; h.Name != route || !h.Synced {
			return fmt.Errorf("status.traffic.httpRoute %+v, want %s synced", *h, route)
		}
		return nil
	}
}

// timeline records, every 250ms until stopped, each change of how a
// MyApp stands in the health shift: per member, the signals its Work
// reports (state, value, since by the member's clock), the Deployment
// (replicas, ready, image) and its pods (how many in back-off); and the
// hub's status.traffic. Specs log it, so a failure shows the order in
// which things happened.
type timeline struct {
	in      SpecInput
	name    string
	members []string
	start   time.Time
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	last    map[string]string
	lines   []string
}

func watchTimeline(t *testing.T, in SpecInput, name string, members []string) *timeline {
	tl := &timeline{in: in, name: name, members: members, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{}), last: map[string]string{}}
	go func() {
		defer close(tl.done)
		for {
			tl.sample()
			select {
			case <-tl.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		t.Logf("timeline of MyApp %s (seconds since the spec began, %s):\n%s", name, tl.start.UTC().Format("15:04:05.000"), tl.Stop())
	})
	return tl
}

// Note adds a line of what the spec did.
func (tl *timeline) Note(format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.lines = append(tl.lines, fmt.Sprintf("%7.2fs  spec: %s", time.Since(tl.start).Seconds(), fmt.Sprintf(format, args...)))
}

// Stop stops sampling and returns the timeline.
func (tl *timeline) Stop() string {
	select {
	case <-tl.stop:
	default:
		close(tl.stop)
	}
	<-tl.done
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "\n")
}

func (tl *timeline) record(key, value string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.last[key] == value {
		return
	}
	tl.last[key] = value
	tl.lines = append(tl.lines, fmt.Sprintf("%7.2fs  %s: %s", time.Since(tl.start).Seconds(), key, value))
}

func (tl *timeline) sample() {
	ctx := context.Background()
	if works, err := worksOf(ctx, tl.in, tl.name); err == nil {
		for c, w := range works {
			var s []string
			for _, h := range w.Status.Health {
				since := ""
				if h.Since != nil {
					since = " since " + h.Since.UTC().Format("15:04:05")
				}
				s = append(s, fmt.Sprintf("%s %s %s%s", h.Name, h.State, h.Value, since))
			}
			tl.record("work "+c+" reports", strings.Join(s, ", "))
		}
	}
	for _, m := range tl.members {
		d := &appsv1.Deployment{}
		if err := tl.in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: tl.in.Namespace, Name: tl.name}, d); err != nil {
			continue
		}
		image := ""
		if len(d.Spec.Template.Spec.Containers) > 0 {
			image = d.Spec.Template.Spec.Containers[0].Image
		}
		var pods corev1.PodList
		backoff, ready := 0, 0
		if err := tl.in.Provider.Member(m).List(ctx, &pods, client.InNamespace(tl.in.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err == nil {
			for _, p := range pods.Items {
				for _, cs := range p.Status.ContainerStatuses {
					if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
						backoff++
					}
					if cs.Ready {
						ready++
					}
				}
			}
		}
		tl.record(m+" deployment", fmt.Sprintf("replicas %d (ready %d, updated %d) image %s; pods %d (ready %d, in back-off %d)",
			ptr.Deref(d.Spec.Replicas, 1), d.Status.ReadyReplicas, d.Status.UpdatedReplicas, image, len(pods.Items), ready, backoff))
	}
	if app, err := getMyApp(ctx, tl.in, tl.name); err == nil && app.Status.Traffic != nil {
		var s []string
		for _, c := range app.Status.Traffic.Clusters {
			s = append(s, fmt.Sprintf("%s %s %d%% %d/%d w%d", c.Name, c.State, c.CapPercent, c.Replicas, c.NormalReplicas, c.Weight))
		}
		tl.record("hub status.traffic", strings.Join(s, "; "))
	}
}
