package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// The push health-shift test runs member-1 with an agent and member-2 in
// Push mode: no agent, the hub applies member-2's Works through its
// kubeconfig and its push engine evaluates member-2's signals (pkg/health's
// Runner reading member-2's apiserver, and spec.push.prometheusURL for
// Prometheus signals). The push member is the big one, so a cut shows the
// hub evaluating and cutting a member no agent speaks for.

// pushLatencySignal is the Prometheus signal of the second app.
const pushLatencySignal = "latency"

// pushLatency is the latency each member's series reports to the real
// Prometheus the test starts: below the signal's threshold, and different
// per member, so a value in a member's report shows whose series the query
// read.
var pushLatency = map[string]float64{"member-1": 0.1, "member-2": 0.2}

// startPrometheus starts a real Prometheus (bin/prometheus) on loopback,
// scraping every second a test exporter that serves
// app_latency_seconds{cluster, app="api"} for both members; both are
// stopped when the test ends.
func startPrometheus(t *testing.T) *testbed.Prometheus {
	t.Helper()
	exp, err := testbed.StartExporter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exp.Stop() })
	for m, v := range pushLatency {
		exp.Set("fleet", "app_latency_seconds", map[string]string{"cluster": m, "app": "api"}, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prom, err := testbed.StartPrometheus(ctx, testbed.PrometheusConfig{
		Name: "prometheus", Dir: t.TempDir(),
		Targets: []testbed.ScrapeTarget{{Job: "app", Address: exp.Addr(), MetricsPath: exp.Path("fleet")}},
	})
	if err != nil {
		t.Fatalf("starting Prometheus: %v", err)
	}
	t.Cleanup(func() {
		if err := prom.Stop(); err != nil {
			t.Errorf("stopping Prometheus: %v", err)
		}
	})
	return prom
}

// startPushShiftFleet starts two members, member-2 in Push mode through its
// own kubeconfig, a hub (pushing every 500 ms) and an agent for member-1
// whose --prometheus-url is prom; it waits for both Ready and member-2
// Pushing.
func startPushShiftFleet(t *testing.T, prom string) *fleet {
	t.Helper()
	f := startFleet(t, 2)
	kubeconfig, err := os.ReadFile(f.tb.Members[1].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	f.makePush(t, "member-2", kubeconfig)
	syncAddr := freeAddr(t)
	f.startSyncHubWith(t, syncAddr, func(o *setup.Options) { o.PushHeartbeatInterval = 500 * time.Millisecond })
	opts := f.agentOptions(t, "member-1", syncAddr)
	opts.PrometheusURL = prom
	startAgent(t, opts)
	waitReady(t, f.hub, shiftMembers...)
	waitConnected(t, f.hub, "member-2", flotillav1.ReasonPushing)
	return f
}

// pushShiftApp is MyApp default/<name>: 10 replicas Divided 2:8 between
// member-1 (pulled) and member-2 (pushed), with a health shift on signals
// evaluated every second, `for` 1s, a 6s recovery window and a Degraded
// cluster kept at 20% of the app.
func pushShiftApp(name string, signals ...flotillav1.HealthSignal) *flotillav1.MyApp {
	app := newApp(name, 10, flotillav1.Placement{
		ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: shiftMembers},
		ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
			ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
			ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
			WeightPreference: &flotillav1.ClusterPreferences{StaticWeightList: []flotillav1.StaticClusterWeight{
				{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}, Weight: 2},
				{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-2"}}, Weight: 8},
			}},
		},
		HealthShift: &flotillav1.HealthShift{
			Signals:         signals,
			For:             &metav1.Duration{Duration: time.Second},
			Interval:        &metav1.Duration{Duration: time.Second},
			RecoveryWindow:  &metav1.Duration{Duration: shiftRecovery},
			DegradedPercent: ptr.To[int32](20),
		},
	})
	app.Spec.Image = "nginx:1.27"
	return app
}

// clusterSignal returns the named signal cluster reported in app's
// status.clusters.
func clusterSignal(app *flotillav1.MyApp, cluster, signal string) (flotillav1.SignalStatus, error) {
	for _, c := range app.Status.Clusters {
		if c.Name != cluster {
			continue
		}
		for _, s := range c.Signals {
			if s.Name == signal {
				return s, nil
			}
		}
		return flotillav1.SignalStatus{}, fmt.Errorf("%s reports signals %+v, none named %s", cluster, c.Signals, signal)
	}
	return flotillav1.SignalStatus{}, fmt.Errorf("no status.clusters entry for %s", cluster)
}

// TestPushMemberShiftsOnHealth runs member-1 with an agent and member-2 in
// Push mode, MyApp web Divided 2:8 (the push member the big one) with a
// health shift on pods in back-off. The hub's push engine evaluates
// member-2's signal: OK in its Work's status.health and the MyApp's
// status.clusters; a crash-looping pod in member-2 makes it Breaching and
// cuts member-2 to 20%: 8:2 replicas in the Works and the member
// Deployments, weights 80/20, HealthShifted Degraded, a Warning event.
// Once the pod runs again nothing moves within the recovery window, and
// after it the split is 2:8 again. MyApp api, with a Prometheus signal,
// while member-2 has no spec.push.prometheusURL: member-2's signal is
// Unknown naming spec.push.prometheusURL (member-1's agent answers it
// OK), HealthShifted is Unknown SignalUnknown naming it, and nothing
// moves; once spec.push.prometheusURL is set, member-2 answers it OK.
func TestPushMemberShiftsOnHealth(t *testing.T) {
	prom := startPrometheus(t)
	f := startPushShiftFleet(t, prom.URL())
	ctx := context.Background()
	app := pushShiftApp("web", flotillav1.HealthSignal{Name: shiftSignal, Type: flotillav1.SignalBackOffPods, Threshold: resourceQty("0")})
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	normalSplit := map[string]int32{"member-1": 2, "member-2": 8}
	cutSplit := map[string]int32{"member-1": 8, "member-2": 2}
	normal := map[string]clusterTrafficWant{
		"member-1": {weight: 20, replicas: 2, normal: 2, capPercent: 100, state: flotillav1.HealthStateHealthy},
		"member-2": {weight: 80, replicas: 8, normal: 8, capPercent: 100, state: flotillav1.HealthStateHealthy},
	}
	cut := map[string]clusterTrafficWant{
		"member-1": {weight: 80, replicas: 8, normal: 2, capPercent: 100, state: flotillav1.HealthStateHealthy},
		"member-2": {weight: 20, replicas: 2, normal: 8, capPercent: 20, state: flotillav1.HealthStateDegraded},
	}

	eventually(t, "MyApp web at 2:8 in the Works and member Deployments, weights 20/80, both clusters (the push member by the hub) reporting crashes OK", 60*time.Second, func() error {
		if err := f.wantReplicas(ctx, app, normalSplit); err != nil {
			return err
		}
		got, err := f.getApp(ctx, app)
		if err != nil {
			return err
		}
		if err := wantTraffic(got, normal); err != nil {
			return err
		}
		if err := wantSignals(got, flotillav1.SignalOK, shiftMembers...); err != nil {
			return err
		}
		if got.Status.Traffic != nil && len(got.Status.Traffic.Shifts) != 0 {
			return fmt.Errorf("shifts before any signal breached: %s", describeTraffic(got))
		}
		return wantHealthShifted(got, metav1.ConditionFalse, flotillav1.ReasonAllHealthy)
	})
	// The push member's signal as the hub evaluates it, in its Work.
	w := &flotillav1.Work{}
	if err := f.hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.ClusterNamespace("member-2"), Name: flotillav1.WorkName(app.Namespace, app.Name)}, w); err != nil {
		t.Fatal(err)
	}
	if w.Spec.Health == nil || w.Spec.Health.Interval.Duration != time.Second || w.Spec.Health.For.Duration != time.Second || len(w.Spec.Health.Signals) != 1 {
		t.Fatalf("member-2: Work spec.health %+v", w.Spec.Health)
	}
	if len(w.Status.Health) != 1 || w.Status.Health[0].Name != shiftSignal || w.Status.Health[0].State != flotillav1.SignalOK || w.Status.Health[0].Value != "0" {
		t.Fatalf("member-2: Work status.health %+v, want %s OK with value 0", w.Status.Health, shiftSignal)
	}

	var crashing client.ObjectKey
	cutOK := t.Run("a crash-looping pod in the push member cuts it to 20%", func(t *testing.T) {
		crashing = f.createCrashingPod(t, ctx, "member-2", app, "web-crashing")
		eventually(t, "member-2 (push) Breaching and cut to 2 replicas, member-1 up to 8, weights 80/20, HealthShifted Degraded", shiftTimeout, func() error {
			got, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			if err := wantSignals(got, flotillav1.SignalBreaching, "member-2"); err != nil {
				return err
			}
			if err := wantSignals(got, flotillav1.SignalOK, "member-1"); err != nil {
				return err
			}
			if err := f.wantReplicas(ctx, app, cutSplit); err != nil {
				return err
			}
			if err := wantTraffic(got, cut); err != nil {
				return err
			}
			sh := got.Status.Traffic.Shifts
			if len(sh) != 1 || sh[0].Cluster != "member-2" || sh[0].Reason != flotillav1.ReasonHealthDegraded || sh[0].Signal != shiftSignal ||
				sh[0].Value != "1" || sh[0].FromPercent != 100 || sh[0].ToPercent != 20 {
				return fmt.Errorf("status.traffic %s, want one shift of member-2 from 100%% to 20%% for %s=1", describeTraffic(got), shiftSignal)
			}
			if r := trafficOf(got)["member-2"].Reason; !strings.Contains(r, shiftSignal) {
				return fmt.Errorf("member-2's reason %q does not name %s", r, shiftSignal)
			}
			return wantHealthShifted(got, metav1.ConditionTrue, flotillav1.ReasonHealthDegraded, "member-2 at most 20%")
		})
		eventually(t, "a Warning Degraded event on MyApp web naming member-2, the signal and its value", shiftTimeout, func() error {
			return f.wantEvent(ctx, app, corev1.EventTypeWarning, flotillav1.ReasonHealthDegraded, "member-2", "signal "+shiftSignal+" is 1", "from 100% to 20%")
		})
	})

	t.Run("once the pod runs, the push member gets its share back after the recovery window", func(t *testing.T) {
		if !cutOK {
			t.Skip("member-2 was never cut: nothing to recover from")
		}
		fixed := time.Now()
		f.setPodBackOff(t, ctx, "member-2", crashing, false)
		consistently(t, "the 8:2 split held within the recovery window", 3*time.Second, func() error {
			if err := f.wantReplicas(ctx, app, cutSplit); err != nil {
				return err
			}
			got, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			return wantTraffic(got, cut)
		})
		f.waitRecovered(t, ctx, app, "member-2", normalSplit, normal, fixed)
		eventually(t, "a Normal Recovered event on MyApp web naming member-2", shiftTimeout, func() error {
			return f.wantEvent(ctx, app, corev1.EventTypeNormal, flotillav1.ReasonHealthRecovered, "member-2", "from 20% to 100%")
		})
	})

	t.Run("a Prometheus signal on the push member without spec.push.prometheusURL is Unknown and moves nothing", func(t *testing.T) {
		api := pushShiftApp("api", flotillav1.HealthSignal{Name: pushLatencySignal, Type: flotillav1.SignalPrometheus,
			Query: `max(app_latency_seconds{cluster="${cluster}",app="${name}"})`, Threshold: resourceQty("0.5")})
		if err := f.hub.Create(ctx, api); err != nil {
			t.Fatal(err)
		}
		held := func() error {
			if err := f.wantReplicas(ctx, api, normalSplit); err != nil {
				return err
			}
			got, err := f.getApp(ctx, api)
			if err != nil {
				return err
			}
			if err := wantTraffic(got, normal); err != nil {
				return err
			}
			if got.Status.Traffic != nil && len(got.Status.Traffic.Shifts) != 0 {
				return fmt.Errorf("shifts on an unknown signal: %s", describeTraffic(got))
			}
			// member-1's agent asks its Prometheus: OK.
			s1, err := clusterSignal(got, "member-1", pushLatencySignal)
			if err != nil {
				return err
			}
			if s1.State != flotillav1.SignalOK || s1.Value != "0.1" {
				return fmt.Errorf("member-1 reports %s %+v, want OK with value 0.1 (from its agent's Prometheus)", pushLatencySignal, s1)
			}
			// member-2 has no Prometheus: Unknown, naming the field.
			s2, err := clusterSignal(got, "member-2", pushLatencySignal)
			if err != nil {
				return err
			}
			if s2.State != flotillav1.SignalUnknown || !strings.Contains(s2.Message, "spec.push.prometheusURL") {
				return fmt.Errorf("member-2 reports %s %+v, want Unknown with a message naming spec.push.prometheusURL", pushLatencySignal, s2)
			}
			if err := wantHealthShifted(got, metav1.ConditionUnknown, flotillav1.ReasonSignalUnknown, "member-2: "+pushLatencySignal, "spec.push.prometheusURL"); err != nil {
				return err
			}
			c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionHealthShifted)
			if strings.Contains(c.Message, "member-1") {
				return fmt.Errorf("%s message %q names member-1, whose signal is OK", c.Type, c.Message)
			}
			return nil
		}
		eventually(t, "MyApp api at 2:8, member-1's latency OK, member-2's Unknown naming spec.push.prometheusURL, HealthShifted Unknown SignalUnknown", 60*time.Second, held)
		consistently(t, "MyApp api keeping its 2:8 split with member-2's signal Unknown", 3*time.Second, held)

		// Given a Prometheus, the hub asks it for member-2: OK.
		mc := &flotillav1.MemberCluster{}
		if err := f.hub.Get(ctx, client.ObjectKey{Name: "member-2"}, mc); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(mc.DeepCopy())
		mc.Spec.Push.PrometheusURL = prom.URL()
		if err := f.hub.Patch(ctx, mc, patch); err != nil {
			t.Fatalf("setting member-2's spec.push.prometheusURL: %v", err)
		}
		eventually(t, "member-2's latency OK once spec.push.prometheusURL is set, HealthShifted False AllHealthy, MyApp api at 2:8", shiftTimeout, func() error {
			if err := f.wantReplicas(ctx, api, normalSplit); err != nil {
				return err
			}
			got, err := f.getApp(ctx, api)
			if err != nil {
				return err
			}
			for _, m := range shiftMembers {
				s, err := clusterSignal(got, m, pushLatencySignal)
				if err != nil {
					return err
				}
				if want := fmt.Sprint(pushLatency[m]); s.State != flotillav1.SignalOK || s.Value != want {
					return fmt.Errorf("%s reports %s %+v, want OK with value %s", m, pushLatencySignal, s, want)
				}
			}
			if err := wantTraffic(got, normal); err != nil {
				return err
			}
			return wantHealthShifted(got, metav1.ConditionFalse, flotillav1.ReasonAllHealthy)
		})
	})
}
