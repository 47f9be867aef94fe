package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/setup"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

// The health-shift tests run a hub and real agents for member-1 and
// member-2 against the testbed's member control planes. The members run
// kube-controller-manager, kube-scheduler and kwok, so a Deployment's pods
// exist and become Ready; a crash loop is staged by hand: a pod that
// matches the app's Deployment's selector (but not its ReplicaSet's, so
// nothing adopts or deletes it), whose image contains flotilla-fail (kwok
// leaves such pods alone), with its status set to a container waiting in
// CrashLoopBackOff.

const (
	shiftSignal = "crashes"
	// shiftRecovery is the app's recovery window.
	shiftRecovery = 6 * time.Second
	// shiftTimeout bounds each wait for the fleet to converge: the agent
	// evaluates every second and `for` is a second, so a few seconds
	// suffice on an idle machine; the rest is for a loaded one.
	shiftTimeout = 30 * time.Second
)

var shiftMembers = []string{"member-1", "member-2"}

// startShiftFleet starts two members, a hub with its sync server and an
// agent per member, and waits for both members to be Ready. beforeHub, when
// set, runs against the fleet before the hub starts.
func startShiftFleet(t *testing.T, beforeHub func(*fleet)) *fleet {
	t.Helper()
	f := startFleet(t, 2)
	if beforeHub != nil {
		beforeHub(f)
	}
	syncAddr := freeAddr(t)
	f.startSyncHub(t, syncAddr)
	for _, m := range shiftMembers {
		startAgent(t, f.agentOptions(t, m, syncAddr))
	}
	waitReady(t, f.hub, shiftMembers...)
	return f
}

// shiftApp is MyApp default/<name>: 10 replicas Divided 8:2 between
// member-1 and member-2, with a health shift on pods in back-off (any one
// breaches) evaluated every second, `for` 1s, a 6s recovery window and a
// Degraded cluster kept at 20% of the app.
func shiftApp(name string) *flotillav1.MyApp {
	app := newApp(name, 10, flotillav1.Placement{
		ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: shiftMembers},
		ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{
			ReplicaSchedulingType:     flotillav1.ReplicaSchedulingDivided,
			ReplicaDivisionPreference: flotillav1.ReplicaDivisionWeighted,
			WeightPreference: &flotillav1.ClusterPreferences{StaticWeightList: []flotillav1.StaticClusterWeight{
				{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-1"}}, Weight: 8},
				{TargetCluster: flotillav1.ClusterAffinity{ClusterNames: []string{"member-2"}}, Weight: 2},
			}},
		},
		HealthShift: &flotillav1.HealthShift{
			Signals:         []flotillav1.HealthSignal{{Name: shiftSignal, Type: flotillav1.SignalBackOffPods, Threshold: resourceQty("0")}},
			For:             &metav1.Duration{Duration: time.Second},
			Interval:        &metav1.Duration{Duration: time.Second},
			RecoveryWindow:  &metav1.Duration{Duration: shiftRecovery},
			DegradedPercent: ptr.To[int32](20),
		},
	})
	app.Spec.Image = "nginx:1.27"
	return app
}

func (f *fleet) getApp(ctx context.Context, app *flotillav1.MyApp) (*flotillav1.MyApp, error) {
	got := &flotillav1.MyApp{}
	return got, f.hub.Get(ctx, client.ObjectKeyFromObject(app), got)
}

// memberReplicas reads spec.replicas of the app's Deployment in each
// member.
func (f *fleet) memberReplicas(ctx context.Context, app *flotillav1.MyApp) (map[string]int32, error) {
	out := map[string]int32{}
	for _, m := range shiftMembers {
		d, err := f.deployment(ctx, m, app.Namespace, app.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		out[m] = ptr.Deref(d.Spec.Replicas, 1)
	}
	return out, nil
}

// wantReplicas checks the Works on the hub and the Deployments in the
// members both carry want.
func (f *fleet) wantReplicas(ctx context.Context, app *flotillav1.MyApp, want map[string]int32) error {
	works, err := replicasByCluster(f.hub, app)
	if err != nil {
		return err
	}
	if err := equalReplicas(works, want); err != nil {
		return err
	}
	members, err := f.memberReplicas(ctx, app)
	if err != nil {
		return err
	}
	if err := equalReplicas(members, want); err != nil {
		return fmt.Errorf("member Deployments: %w", err)
	}
	return nil
}

// trafficOf returns status.traffic's clusters by name.
func trafficOf(app *flotillav1.MyApp) map[string]flotillav1.ClusterTraffic {
	out := map[string]flotillav1.ClusterTraffic{}
	if app.Status.Traffic != nil {
		for _, c := range app.Status.Traffic.Clusters {
			out[c.Name] = c
		}
	}
	return out
}

// clusterTrafficWant is what a test expects of one cluster's
// status.traffic entry.
type clusterTrafficWant struct {
	weight, replicas, normal, capPercent int32
	state                                flotillav1.ClusterHealthState
}

func wantTraffic(app *flotillav1.MyApp, want map[string]clusterTrafficWant) error {
	got := trafficOf(app)
	if len(got) != len(want) {
		return fmt.Errorf("status.traffic %s, want clusters %v", describeTraffic(app), want)
	}
	for name, w := range want {
		c, ok := got[name]
		if !ok || c.Weight != w.weight || c.Replicas != w.replicas || c.NormalReplicas != w.normal || c.CapPercent != w.capPercent || c.State != w.state {
			return fmt.Errorf("status.traffic %s, want %s weight %d replicas %d (normal %d) cap %d%% %s", describeTraffic(app), name, w.weight, w.replicas, w.normal, w.capPercent, w.state)
		}
	}
	return nil
}

func describeTraffic(app *flotillav1.MyApp) string {
	if app.Status.Traffic == nil {
		return "<none>"
	}
	var parts []string
	for _, c := range app.Status.Traffic.Clusters {
		parts = append(parts, fmt.Sprintf("%s{weight %d replicas %d normal %d cap %d%% %s %q}", c.Name, c.Weight, c.Replicas, c.NormalReplicas, c.CapPercent, c.State, c.Reason))
	}
	for _, s := range app.Status.Traffic.Shifts {
		parts = append(parts, fmt.Sprintf("shift{%s %s %d%%->%d%% %s=%s at %s}", s.Cluster, s.Reason, s.FromPercent, s.ToPercent, s.Signal, s.Value, s.Time.UTC().Format(time.RFC3339)))
	}
	if hr := app.Status.Traffic.HTTPRoute; hr != nil {
		parts = append(parts, fmt.Sprintf("httpRoute{%s synced %t %q}", hr.Name, hr.Synced, hr.Message))
	}
	return strings.Join(parts, " ")
}

// wantSignals checks each named cluster reported the signal in state.
func wantSignals(app *flotillav1.MyApp, state flotillav1.SignalState, clusters ...string) error {
	byName := map[string]flotillav1.ClusterAppStatus{}
	for _, c := range app.Status.Clusters {
		byName[c.Name] = c
	}
	for _, cl := range clusters {
		c, ok := byName[cl]
		if !ok {
			return fmt.Errorf("no status.clusters entry for %s", cl)
		}
		if len(c.Signals) != 1 || c.Signals[0].Name != shiftSignal || c.Signals[0].State != state {
			return fmt.Errorf("%s reports signals %+v, want %s %s", cl, c.Signals, shiftSignal, state)
		}
	}
	return nil
}

// wantHealthShifted checks the HealthShifted condition's status (any when
// empty), reason and that its message names each of inMessage.
func wantHealthShifted(app *flotillav1.MyApp, status metav1.ConditionStatus, reason string, inMessage ...string) error {
	c := meta.FindStatusCondition(app.Status.Conditions, flotillav1.ConditionHealthShifted)
	if c == nil {
		return fmt.Errorf("no %s condition", flotillav1.ConditionHealthShifted)
	}
	if (status != "" && c.Status != status) || c.Reason != reason {
		return fmt.Errorf("%s %s %s (%q), want %s %s", c.Type, c.Status, c.Reason, c.Message, status, reason)
	}
	for _, s := range inMessage {
		if !strings.Contains(c.Message, s) {
			return fmt.Errorf("%s message %q does not name %q", c.Type, c.Message, s)
		}
	}
	return nil
}

// selectorLabels reads the labels the app's Deployment in member selects
// its pods by.
func (f *fleet) selectorLabels(t *testing.T, ctx context.Context, member string, app *flotillav1.MyApp) map[string]string {
	t.Helper()
	d, err := f.deployment(ctx, member, app.Namespace, app.Name)
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchLabels) == 0 || len(d.Spec.Selector.MatchExpressions) > 0 {
		t.Fatalf("%s: Deployment %s/%s selector %+v: want matchLabels only", member, d.Namespace, d.Name, d.Spec.Selector)
	}
	return d.Spec.Selector.MatchLabels
}

// createCrashingPod creates pod name in member's app namespace with the
// Deployment's selector labels and sets its container waiting in
// CrashLoopBackOff.
func (f *fleet) createCrashingPod(t *testing.T, ctx context.Context, member string, app *flotillav1.MyApp, name string) client.ObjectKey {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: app.Namespace, Labels: f.selectorLabels(t, ctx, member, app)},
		// flotilla-fail: kwok leaves the pod's status to the test.
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:flotilla-fail"}}},
	}
	if err := f.members[member].Create(ctx, pod); err != nil {
		t.Fatalf("%s: creating pod %s: %v", member, name, err)
	}
	key := client.ObjectKeyFromObject(pod)
	f.setPodBackOff(t, ctx, member, key, true)
	return key
}

// setPodBackOff sets the pod's only container waiting in CrashLoopBackOff
// (backOff) or running and ready.
func (f *fleet) setPodBackOff(t *testing.T, ctx context.Context, member string, key client.ObjectKey, backOff bool) {
	t.Helper()
	c := f.members[member]
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod := &corev1.Pod{}
		if err := c.Get(ctx, key, pod); err != nil {
			return err
		}
		cs := corev1.ContainerStatus{Name: "web", Image: "nginx:flotilla-fail", RestartCount: 5}
		if backOff {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 5m0s restarting failed container=web"}
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
		} else {
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
			cs.Ready, cs.Started = true, ptr.To(true)
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return c.Status().Update(ctx, pod)
	})
	if err != nil {
		t.Fatalf("%s: setting the status of pod %s (back-off %t): %v", member, key, backOff, err)
	}
}

// wantEvent checks the hub has an event on app of type and reason whose
// note contains every string of inNote.
func (f *fleet) wantEvent(ctx context.Context, app *flotillav1.MyApp, typ, reason string, inNote ...string) error {
	var list eventsv1.EventList
	if err := f.hub.List(ctx, &list, client.InNamespace(app.Namespace)); err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.Kind != "MyApp" || e.Regarding.Name != app.Name {
			continue
		}
		seen = append(seen, fmt.Sprintf("%s %s %q", e.Type, e.Reason, e.Note))
		if e.Type != typ || e.Reason != reason {
			continue
		}
		all := true
		for _, s := range inNote {
			all = all && strings.Contains(e.Note, s)
		}
		if all {
			return nil
		}
	}
	return fmt.Errorf("no %s event %s naming %q on MyApp %s; its events: %v", typ, reason, inNote, app.Name, seen)
}

// TestHealthShiftMovesReplicasOffACrashLoopingCluster runs a hub and real
// agents for member-1 and member-2 with MyApp web Divided 8:2 and a health
// shift on pods in back-off. A pod in CrashLoopBackOff in member-1 cuts
// member-1 to 20% of the app: 2:8 replicas and weights 20/80, the
// HealthShifted condition, a Warning event and a shift naming the signal.
// Once the pod runs again nothing moves back within the recovery window;
// after it the split is 8:2 again. With member-1 cut again, member-2
// crash-looping too is not cut: there is no healthy cluster to shift to.
func TestHealthShiftMovesReplicasOffACrashLoopingCluster(t *testing.T) {
	f := startShiftFleet(t, nil)
	ctx := context.Background()
	app := shiftApp("web")
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	normal := map[string]clusterTrafficWant{
		"member-1": {weight: 80, replicas: 8, normal: 8, capPercent: 100, state: flotillav1.HealthStateHealthy},
		"member-2": {weight: 20, replicas: 2, normal: 2, capPercent: 100, state: flotillav1.HealthStateHealthy},
	}
	cut := map[string]clusterTrafficWant{
		"member-1": {weight: 20, replicas: 2, normal: 8, capPercent: 20, state: flotillav1.HealthStateDegraded},
		"member-2": {weight: 80, replicas: 8, normal: 2, capPercent: 100, state: flotillav1.HealthStateHealthy},
	}

	eventually(t, "MyApp web at 8:2 in the Works and member Deployments, weights 80/20, both clusters reporting crashes OK", 60*time.Second, func() error {
		if err := f.wantReplicas(ctx, app, map[string]int32{"member-1": 8, "member-2": 2}); err != nil {
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
	// The signal as the member evaluates it, in the Work's status.
	for _, m := range shiftMembers {
		w := &flotillav1.Work{}
		if err := f.hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.ClusterNamespace(m), Name: flotillav1.WorkName(app.Namespace, app.Name)}, w); err != nil {
			t.Fatal(err)
		}
		if w.Spec.Health == nil || w.Spec.Health.Interval.Duration != time.Second || w.Spec.Health.For.Duration != time.Second || len(w.Spec.Health.Signals) != 1 {
			t.Fatalf("%s: Work spec.health %+v", m, w.Spec.Health)
		}
		if len(w.Status.Health) != 1 || w.Status.Health[0].State != flotillav1.SignalOK || w.Status.Health[0].Value != "0" {
			t.Fatalf("%s: Work status.health %+v, want %s OK with value 0", m, w.Status.Health, shiftSignal)
		}
	}

	var crashing client.ObjectKey
	t.Run("a crash-looping pod in member-1 cuts it to 20%", func(t *testing.T) {
		crashing = f.createCrashingPod(t, ctx, "member-1", app, "web-crashing")
		eventually(t, "member-1 cut to 2 replicas, member-2 up to 8, weights 20/80, HealthShifted Degraded", shiftTimeout, func() error {
			if err := f.wantReplicas(ctx, app, map[string]int32{"member-1": 2, "member-2": 8}); err != nil {
				return err
			}
			got, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			if err := wantTraffic(got, cut); err != nil {
				return err
			}
			sh := got.Status.Traffic.Shifts
			if len(sh) != 1 || sh[0].Cluster != "member-1" || sh[0].Reason != flotillav1.ReasonHealthDegraded || sh[0].Signal != shiftSignal ||
				sh[0].Value != "1" || sh[0].FromPercent != 100 || sh[0].ToPercent != 20 {
				return fmt.Errorf("status.traffic %s, want one shift of member-1 from 100%% to 20%% for %s=1", describeTraffic(got), shiftSignal)
			}
			if r := trafficOf(got)["member-1"].Reason; !strings.Contains(r, shiftSignal) {
				return fmt.Errorf("member-1's reason %q does not name %s", r, shiftSignal)
			}
			if err := wantSignals(got, flotillav1.SignalBreaching, "member-1"); err != nil {
				return err
			}
			return wantHealthShifted(got, metav1.ConditionTrue, flotillav1.ReasonHealthDegraded, "member-1 at most 20%")
		})
		eventually(t, "a Warning Degraded event on MyApp web naming the signal and its value", shiftTimeout, func() error {
			return f.wantEvent(ctx, app, corev1.EventTypeWarning, flotillav1.ReasonHealthDegraded, "member-1", "signal "+shiftSignal+" is 1", "from 100% to 20%")
		})
	})

	t.Run("once the pod runs, member-1 gets its share back after the recovery window", func(t *testing.T) {
		fixed := time.Now()
		f.setPodBackOff(t, ctx, "member-1", crashing, false)
		consistently(t, "the 2:8 split held within the recovery window", 3*time.Second, func() error {
			if err := f.wantReplicas(ctx, app, map[string]int32{"member-1": 2, "member-2": 8}); err != nil {
				return err
			}
			got, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			return wantTraffic(got, cut)
		})
		f.waitRecovered(t, ctx, app, "member-1", map[string]int32{"member-1": 8, "member-2": 2}, normal, fixed)
		eventually(t, "a Normal Recovered event on MyApp web", shiftTimeout, func() error {
			return f.wantEvent(ctx, app, corev1.EventTypeNormal, flotillav1.ReasonHealthRecovered, "member-1", "from 20% to 100%")
		})
	})

	t.Run("with member-1 cut, a crash loop in member-2 moves nothing", func(t *testing.T) {
		f.setPodBackOff(t, ctx, "member-1", crashing, true)
		// The cut waits out the recovery window after the recovery.
		eventually(t, "member-1 cut again to 2 replicas", shiftTimeout, func() error {
			if err := f.wantReplicas(ctx, app, map[string]int32{"member-1": 2, "member-2": 8}); err != nil {
				return err
			}
			got, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			return wantTraffic(got, cut)
		})
		f.createCrashingPod(t, ctx, "member-2", app, "web-crashing")
		blocked := func() error {
			if err := f.wantReplicas(ctx, app, map[string]int32{"member-1": 2, "member-2": 8}); err != nil {
				return err
			}
			got, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			if err := wantTraffic(got, cut); err != nil {
				return err
			}
			if err := wantSignals(got, flotillav1.SignalBreaching, shiftMembers...); err != nil {
				return err
			}
			// True: member-1's share is cut; the reason says member-2
			// has nowhere to go.
			return wantHealthShifted(got, metav1.ConditionTrue, flotillav1.ReasonAllClustersDegraded, "no healthy cluster to shift to", "member-2 (")
		}
		eventually(t, "HealthShifted AllClustersDegraded naming member-2, both clusters Breaching", shiftTimeout, blocked)
		consistently(t, "member-2 keeping its 8 replicas and member-1 its cut", 5*time.Second, blocked)
	})
}

// installHTTPRouteCRD installs the Gateway API HTTPRoute CRD from the
// module cache into the hub apiserver.
func installHTTPRouteCRD(t *testing.T, f *fleet) {
	t.Helper()
	path, err := testutil.HTTPRouteCRD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(f.hubCfg, envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing the HTTPRoute CRD from %s: %v", path, err)
	}
}

// routeWeights returns the weight of each backendRef of route, by name.
func routeWeights(route *gatewayv1.HTTPRoute) map[string]string {
	out := map[string]string{}
	for _, r := range route.Spec.Rules {
		for _, b := range r.BackendRefs {
			w := "unset"
			if b.Weight != nil {
				w = fmt.Sprint(*b.Weight)
			}
			out[string(b.Name)] = w
		}
	}
	return out
}

// TestHealthShiftWritesHTTPRouteWeights runs the same fleet with the
// Gateway API's HTTPRoute CRD in the hub: MyApp web names HTTPRoute web,
// whose two backendRefs stand for member-1 and member-2. The hub writes
// their weights, 80 and 20, and 20 and 80 once member-1 crash-loops, and
// says the route is synced. MyApp api names a route that does not exist:
// its status says so, naming the route, and it runs all the same.
func TestHealthShiftWritesHTTPRouteWeights(t *testing.T) {
	f := startShiftFleet(t, func(f *fleet) { installHTTPRouteCRD(t, f) })
	ctx := context.Background()
	scheme, err := setup.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	gw, err := client.New(f.hubCfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	backend := func(name string) gatewayv1.HTTPBackendRef {
		return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
			Name: gatewayv1.ObjectName(name), Port: ptr.To(gatewayv1.PortNumber(80)),
		}}}
	}
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: gatewayv1.HTTPRouteSpec{
			Hostnames: []gatewayv1.Hostname{"web.example.com"},
			Rules:     []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{backend("web-member-1"), backend("web-member-2")}}},
		},
	}
	if err := gw.Create(ctx, route); err != nil {
		t.Fatalf("creating HTTPRoute web: %v", err)
	}
	backends := []flotillav1.ClusterBackend{{Cluster: "member-1", BackendName: "web-member-1"}, {Cluster: "member-2", BackendName: "web-member-2"}}

	app := shiftApp("web")
	app.Spec.Traffic = &flotillav1.TrafficSpec{HTTPRoute: &flotillav1.HTTPRouteTraffic{Name: "web", Backends: backends}}
	if err := f.hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	wantRoute := func(want map[string]string) func() error {
		return func() error {
			got := &gatewayv1.HTTPRoute{}
			if err := gw.Get(ctx, client.ObjectKeyFromObject(route), got); err != nil {
				return err
			}
			weights := routeWeights(got)
			for name, w := range want {
				if weights[name] != w {
					return fmt.Errorf("HTTPRoute web weights %v, want %v", weights, want)
				}
			}
			if len(got.Spec.Hostnames) != 1 || got.Spec.Hostnames[0] != "web.example.com" || len(got.Spec.Rules) != 1 || len(got.Spec.Rules[0].BackendRefs) != 2 {
				return fmt.Errorf("HTTPRoute web changed beyond its weights: %+v", got.Spec)
			}
			cur, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			if tr := cur.Status.Traffic; tr == nil || tr.HTTPRoute == nil || tr.HTTPRoute.Name != "web" || !tr.HTTPRoute.Synced {
				return fmt.Errorf("status.traffic %s, want httpRoute web synced", describeTraffic(cur))
			}
			return nil
		}
	}
	eventually(t, "HTTPRoute web weighted 80/20 and synced", 60*time.Second, wantRoute(map[string]string{"web-member-1": "80", "web-member-2": "20"}))

	t.Run("a crash loop in member-1 shifts the route's weights", func(t *testing.T) {
		eventually(t, "member-1 reporting crashes OK", shiftTimeout, func() error {
			got, err := f.getApp(ctx, app)
			if err != nil {
				return err
			}
			return wantSignals(got, flotillav1.SignalOK, shiftMembers...)
		})
		f.createCrashingPod(t, ctx, "member-1", app, "web-crashing")
		eventually(t, "HTTPRoute web weighted 20/80 and synced, member-1 at 2 replicas", shiftTimeout, func() error {
			if err := f.wantReplicas(ctx, app, map[string]int32{"member-1": 2, "member-2": 8}); err != nil {
				return err
			}
			return wantRoute(map[string]string{"web-member-1": "20", "web-member-2": "80"})()
		})
	})

	t.Run("a route that does not exist is reported and the app runs", func(t *testing.T) {
		// No health shift: the route follows the normal split.
		api := shiftApp("api")
		api.Spec.Placement.HealthShift = nil
		api.Spec.Traffic = &flotillav1.TrafficSpec{HTTPRoute: &flotillav1.HTTPRouteTraffic{Name: "missing", Backends: backends}}
		if err := f.hub.Create(ctx, api); err != nil {
			t.Fatal(err)
		}
		eventually(t, "MyApp api running 8:2 with status.traffic.httpRoute not synced, naming route missing", shiftTimeout, func() error {
			if err := f.wantReplicas(ctx, api, map[string]int32{"member-1": 8, "member-2": 2}); err != nil {
				return err
			}
			got, err := f.getApp(ctx, api)
			if err != nil {
				return err
			}
			tr := got.Status.Traffic
			if tr == nil || tr.HTTPRoute == nil || tr.HTTPRoute.Name != "missing" || tr.HTTPRoute.Synced || !strings.Contains(tr.HTTPRoute.Message, "missing") {
				return fmt.Errorf("status.traffic %s, want httpRoute missing not synced with a message naming it", describeTraffic(got))
			}
			if c := meta.FindStatusCondition(got.Status.Conditions, flotillav1.ConditionHealthShifted); c != nil {
				return fmt.Errorf("a %s condition without a health shift: %+v", c.Type, *c)
			}
			return wantTraffic(got, map[string]clusterTrafficWant{
				"member-1": {weight: 80, replicas: 8, normal: 8, capPercent: 100, state: flotillav1.HealthStateHealthy},
				"member-2": {weight: 20, replicas: 2, normal: 2, capPercent: 100, state: flotillav1.HealthStateHealthy},
			})
		})
		eventually(t, "a Warning event HTTPRouteSyncFailed on MyApp api naming route missing", shiftTimeout, func() error {
			return f.wantEvent(ctx, api, corev1.EventTypeWarning, flotillav1.ReasonHTTPRouteSyncFailed, "missing")
		})
		// The weights of the app's own route stay as they are.
		if err := wantRoute(map[string]string{"web-member-1": "20", "web-member-2": "80"})(); err != nil {
			t.Fatal(err)
		}
	})
}

// waitRecovered waits until cluster of app is back at its normal split
// (replicas per member, traffic as normal) with a Recovered shift of it
// from 20% to 100% ahead of the Degraded one, every member's signal OK and
// HealthShifted False AllHealthy; and checks the recovery came no sooner
// than the recovery window after fixed. The window counts from when the
// hub saw the signal OK, after the fix; status times have a resolution of
// a second.
func (f *fleet) waitRecovered(t *testing.T, ctx context.Context, app *flotillav1.MyApp, cluster string, split map[string]int32, normal map[string]clusterTrafficWant, fixed time.Time) {
	t.Helper()
	var recovered flotillav1.TrafficShift
	eventually(t, cluster+" back at its normal split, Healthy, a Recovered shift", shiftTimeout, func() error {
		if err := f.wantReplicas(ctx, app, split); err != nil {
			return err
		}
		got, err := f.getApp(ctx, app)
		if err != nil {
			return err
		}
		if err := wantTraffic(got, normal); err != nil {
			return err
		}
		sh := got.Status.Traffic.Shifts
		if len(sh) != 2 || sh[0].Cluster != cluster || sh[0].Reason != flotillav1.ReasonHealthRecovered || sh[0].FromPercent != 20 || sh[0].ToPercent != 100 ||
			sh[1].Reason != flotillav1.ReasonHealthDegraded {
			return fmt.Errorf("status.traffic %s, want a Recovered shift of %s from 20%% to 100%% before the Degraded one", describeTraffic(got), cluster)
		}
		recovered = sh[0]
		if err := wantSignals(got, flotillav1.SignalOK, shiftMembers...); err != nil {
			return err
		}
		return wantHealthShifted(got, metav1.ConditionFalse, flotillav1.ReasonAllHealthy)
	})
	if waited := recovered.Time.Sub(fixed); waited < shiftRecovery-time.Second {
		t.Errorf("%s recovered %s after its pod was fixed, within the %s recovery window", cluster, waited.Round(time.Millisecond), shiftRecovery)
	}
}
